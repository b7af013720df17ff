import { beforeEach, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { JobError } from "../../shared/execution/job-contract.js";
import { cancelRun, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { startRun } from "../../shared/storage/run-start.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, type EngineFixture } from "../support/engine-fixture.js";
import { withSqsFaults } from "../support/faults.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * Attacks on the next attempts a resume (or a pause's check after one) files for a one-off's
 * failure retries at occurrences it has left (`retriesCancelledElsewhere`).
 */

const race = useClaimRace();
const { clock, runsOf, fixture, runsCalled, pastDeadlineOf, seedOne, claimOptions } = race;
const { failedOnce, attemptsOf } = useOneOffMoves(race);
const { cancelLands } = useCancelledAttempt(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/**
 * A one-off whose attempt 1 failed while it was moved 10 minutes away: its retry, attempt 2,
 * queued at the old time, is running under worker-a.
 */
async function retryRunningAtOldTime() {
  const { job, due } = await failedOnce(0, { moveAway: true });
  const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
  if (!retry) throw new Error("no retry");
  expect((await startRun(f.engine, retry, "worker-a", clock())).kind).toBe("started");
  return { job, due, retry };
}

describe("a one-off's retry at an occurrence it left, cancelled through the API", () => {
  it.each(["finish", "cancel"] as const)(
    "paused (running: %s) and resumed before its worker saw the cancel: the cancelled retry is not filed again, and nothing runs",
    async (running) => {
      const { job, due, retry } = await retryRunningAtOldTime();
      const asked = await cancelRun(f.engine, job.tenantId, job.jobId, retry.runId);
      expect([asked.status, asked.cancelledBy]).toEqual(["RUNNING", "api"]);
      await pauseJob(f.engine, job.tenantId, job.jobId, { running });
      await resumeJob(f.engine, job.tenantId, job.jobId);
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, "FAILED"],
        [2, "RUNNING"],
      ]);

      // The cancel lands: worker-a's lease lapses and a delivery ends attempt 2; nothing is left to run.
      pastDeadlineOf(clock());
      await f.process(f.workerDeps("w", {}), deliveryOfRun(f.engine, retry));
      pastDeadlineOf(clock());
      await reap(f.engine);
      expect(await runsCalled(job.jobId)).toEqual([]);
      expect(await attemptsOf(job.jobId, due)).toEqual([
        [1, "FAILED"],
        [2, "CANCELLED"],
      ]);
    },
  );
});

describe("a one-off's retry at an occurrence it left, cancelled by a pause", () => {
  it("resumed with every send refused (a resume dead before its sends), then the resume repeated: the reaper sends the attempt filed again, which runs once", async () => {
    const { job, due, retry } = await retryRunningAtOldTime();
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    const refusing = withSqsFaults(f.engine, {
      operation: "SendMessageBatch",
      kind: "refuseEntries",
      times: Number.POSITIVE_INFINITY,
    });
    try {
      await resumeJob(refusing.engine, job.tenantId, job.jobId);
    } finally {
      refusing.destroy();
    }
    expect(refusing.injected.count).toBeGreaterThan(0);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "RUNNING"],
      [3, "QUEUED"],
    ]);

    await cancelLands(retry);
    const third = (await runsOf(job.jobId)).find((r) => r.attempt === 3);
    pastDeadlineOf(new Date(third?.dueAt ?? ""));
    await reap(f.engine);
    expect((await runsCalled(job.jobId)).filter(([at]) => at === due.toISOString())).toEqual([
      [due.toISOString(), 1],
    ]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "CANCELLED"],
      [3, "SUCCEEDED"],
    ]);
  });
});

describe("a recurring job's failure retry running, the job made a one-off at another time", () => {
  it("paused with running: cancel and resumed: the pause's cancel of a recurring job's retry stands, and nothing runs again", async () => {
    const now = clock();
    const due = new Date(now.getTime() - 5 * SECOND);
    const away = new Date(now.getTime() + 600 * SECOND);
    const schedule = { every: "PT1H", startAt: due.toISOString() };
    const { job, entry } = await seedOne("recurring-retry-made-one-off", schedule, due, now);
    expect((await claimDueEntry(f.engine, entry, claimOptions(now))).outcome).toBe("claimed");
    const first = (await runsOf(job.jobId)).find((r) => r.scheduledFor === due.toISOString());
    if (!first) throw new Error("no first run");
    const fails = async () => {
      throw new JobError("flaky", { retryable: true });
    };
    const deps = f.workerDeps("w", { noop: fails });
    await f.process(
      { ...deps, engine: { ...f.engine, random: () => 0 } },
      deliveryOfRun(f.engine, first),
    );
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!retry) throw new Error("no retry");
    expect(retry.retryOf?.oneOff).toBeUndefined();
    expect((await startRun(f.engine, retry, "worker-a", clock())).kind).toBe("started");
    await editJob(f.engine, job.tenantId, job.jobId, 1, {
      schedule: { runAt: away.toISOString() },
    });

    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "RUNNING"],
    ]);
    await cancelLands(retry);
    pastDeadlineOf(clock());
    await reap(f.engine);
    expect((await runsCalled(job.jobId)).filter(([at]) => at === due.toISOString())).toEqual([]);
  });
});
