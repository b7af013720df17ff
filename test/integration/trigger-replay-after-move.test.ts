import { describe, expect, it } from "vitest";
import { JobError } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, replayDeadLetter, triggerJob } from "../../shared/jobs/index.js";
import { createEngineFixture, deliveryOfRun, testJob } from "../support/engine-fixture.js";
import { refusedEditOnto } from "../support/triggered-instant.js";

/**
 * A triggered run is an extra run the tenant asked for, no occurrence, and a dead one is
 * replayable while its job exists. A one-off moved to its instant was filed as that run's next
 * attempt (the same occurrence key): once it succeeded there, the dead triggered run's replay was
 * refused ('NotReplayableError: … its occurrence ran again as …-2 and succeeded'), though the
 * work the trigger asked for never succeeded. The move is refused (400 naming `schedule.runAt`)
 * and takes no key: the dead triggered run stays replayable, as its own next attempt.
 */
describe("a dead triggered run whose instant a one-off is then moved to", () => {
  it("refuses the move, and the triggered run stays replayable", async ({ onTestFinished }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() } }),
    );
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    const dies = async () => {
      throw new JobError("the receiver refused it", { retryable: false });
    };
    await processRun(f.workerDeps("w1", { noop: dies }), deliveryOfRun(f.engine, triggered));
    expect((await f.runs()).find((r) => r.runId === triggered.runId)?.status).toBe("DEAD");

    const issue = await refusedEditOnto(f.engine, job, triggered);
    expect(issue.message).toContain(`(${triggered.runId}, dead)`);
    // Nothing filed at the triggered run's time: its only run is the dead one.
    expect(
      (await f.runs())
        .filter((r) => r.scheduledFor === triggered.scheduledFor)
        .map((r) => r.attempt),
    ).toEqual([1]);

    const replayed = await replayDeadLetter(f.engine, job.tenantId, triggered.runId);
    expect([replayed.run.status, replayed.run.attempt]).toEqual(["QUEUED", 2]);
  }, 60_000);
});
