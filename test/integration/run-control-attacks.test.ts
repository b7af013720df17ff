import { beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { NotReplayableError } from "../../shared/errors.js";
import { type JobContext, JobError } from "../../shared/execution/job-contract.js";
import { editJob, replayDeadLetter } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, type EngineFixture } from "../support/engine-fixture.js";

const { clock, claimOptions, seedOne, runsOf, fixture, runsCalled } = useClaimRace();
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

const moveTo = (job: Job, version: number, at: Date) =>
  editJob(f.engine, job.tenantId, job.jobId, version, { schedule: { runAt: at.toISOString() } });

const attemptsOf = async (jobId: string, at: Date) =>
  (await runsOf(jobId))
    .filter((r) => r.scheduledFor === at.toISOString())
    .sort((a, b) => a.attempt - b.attempt)
    .map((r) => [r.attempt, r.status]);

/** Delivers `run` once to a worker whose `noop` handler is `handler`. */
async function deliverWith(run: Run, handler: (ctx: JobContext) => Promise<unknown>) {
  await f.process(f.workerDeps("w", { noop: handler }), deliveryOfRun(f.engine, run));
}

/**
 * A one-off due 5 s ago whose run, while it runs, has the job moved 10 minutes away (version 2)
 * and then dies of a non-retryable error: attempt 1 DEAD, on the dead-letter list, and the job
 * ACTIVE for its new time (the ending leaves a one-off moved meanwhile alone).
 */
async function deadWhileMovedAway(jobId: string) {
  const now = clock();
  const due = new Date(now.getTime() - 5 * SECOND);
  const away = new Date(now.getTime() + 600 * SECOND);
  const { job, entry } = await seedOne(jobId, { runAt: due.toISOString() }, due, now);
  expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
  const [first] = await runsOf(jobId);
  if (!first) throw new Error("the claim queued no run");
  await deliverWith(first, async () => {
    await moveTo(job, 1, away);
    throw new JobError("bad request", { retryable: false });
  });
  expect(await attemptsOf(jobId, due)).toEqual([[1, "DEAD"]]);
  const moved = await getTenantJob(f.engine, job.tenantId, jobId);
  expect([moved.status, moved.version]).toEqual(["ACTIVE", 2]);
  const dead = (await runsOf(jobId)).find((r) => r.status === "DEAD");
  if (!dead) throw new Error("no dead run");
  return { job, due, away, dead };
}

describe("a one-off whose run died while it was moved away, then moved back to that run's time", () => {
  it("the occurrence runs once more, as the dead run's next attempt, and the job completes", async () => {
    const jobId = "dead-back";
    const { job, due } = await deadWhileMovedAway(jobId);

    const back = await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edit");

    expect(back.status).toBe("ACTIVE");
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "QUEUED"],
    ]);
    expect(await runsCalled(jobId)).toEqual([[due.toISOString(), 1]]);
    expect((await getTenantJob(f.engine, job.tenantId, jobId)).status).toBe("COMPLETED");
  });

  it("a replay of the dead letter then is refused naming the run that took its attempt, queued or run", async () => {
    const jobId = "dead-back-replay";
    const { job, due, dead } = await deadWhileMovedAway(jobId);
    await moveTo(job, 2, due);
    const [, taken] = await runsOf(jobId);
    if (taken?.attempt !== 2) throw new Error("the edit filed no attempt 2");

    const whileQueued = await replayRefusal(job, dead);
    await runsCalled(jobId);
    const onceRun = await replayRefusal(job, dead);

    for (const refused of [whileQueued, onceRun]) {
      expect(refused.why).toContain(taken.runId);
      expect(refused.why).toContain("an edit gave its job this runAt again");
    }
    expect(whileQueued.why).toContain("(queued)");
    expect(onceRun.why).toContain("(succeeded)");
    expect(await attemptsOf(jobId, due)).toEqual([
      [1, "DEAD"],
      [2, "SUCCEEDED"],
    ]);
  });
});

/** The refusal of a replay of `dead`: a NotReplayableError, and the reason it gives. */
async function replayRefusal(job: Job, dead: Run): Promise<{ why: string }> {
  const refused = await replayDeadLetter(f.engine, job.tenantId, dead.runId).catch(
    (error: unknown) => error,
  );
  expect(refused).toBeInstanceOf(NotReplayableError);
  return { why: String((refused as NotReplayableError).context.why) };
}
