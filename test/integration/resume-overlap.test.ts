import { beforeEach, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job } from "../../shared/model.js";
import { startRun } from "../../shared/storage/run-start.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import type { EngineFixture } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * A pause with `running: "cancel"` asks a running attempt to stop; its worker sees that only at
 * its next heartbeat, and goes on under its live lease until then. The attempt a resume files in
 * its place (a first attempt's `rerun`, a retry's `retryAgain`) must not start before it has ended:
 * two attempts of one occurrence would run at once.
 */

const race = useClaimRace();
const { clock, runsOf, fixture, runsCalled } = race;
const { pausedWithRunCancelled, resumedUnclaimed, expectRunsOnceCancelledEnded, cancelLands } =
  useCancelledAttempt(race);
const { failedOnce } = useOneOffMoves(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/** The job's attempt `next` runs once, after the attempt before it ended; the job is COMPLETED. */
async function expectRunsOnlyAfterCancelledAttemptEnded(job: Job, due: Date, next: number) {
  await expectRunsOnceCancelledEnded(job.jobId, due, next);
  expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
}

/** A one-off's failure retry (attempt 2) running when a pause with `running: "cancel"` asks it to stop. */
async function retryRunningCancelledByPause() {
  const { job, due } = await failedOnce(0);
  const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
  if (!retry) throw new Error("no retry");
  expect((await startRun(f.engine, retry, "worker-a", clock())).kind).toBe("started");
  await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
  return { job, due, retry };
}

describe("a one-off's running attempt cancelled by a pause, its worker still holding it, then resumed", () => {
  it("attempt 1: the resume's next attempt waits for it to end, then runs once", async () => {
    const { job, due } = await pausedWithRunCancelled("overlap-first");
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await expectRunsOnlyAfterCancelledAttemptEnded(job, due, 2);
  });

  it("the waiting attempt looks again before the cancelled run's lease lapses: that run's worker sees the cancel at its next heartbeat, well within its lease", async () => {
    const { job } = await pausedWithRunCancelled("overlap-recheck");
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(await runsCalled(job.jobId)).toEqual([]);
    const runs = await runsOf(job.jobId);
    const cancelled = runs.find((r) => r.attempt === 1);
    const waiting = runs.find((r) => r.attempt === 2);
    expect(waiting?.reason).toBe(`waiting: ${cancelled?.runId} has not ended (RUNNING)`);
    expect(Date.parse(waiting?.dueAt ?? "")).toBeLessThan(Date.parse(cancelled?.leaseUntil ?? ""));
  });

  it("a failure's retry (attempt 2): the retry the resume files (retryAgain) waits for it, then runs once", async () => {
    const { job, due } = await retryRunningCancelledByPause();
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await expectRunsOnlyAfterCancelledAttemptEnded(job, due, 3);
  });

  it("the resume's entry left unclaimed, then rewritten by an edit that keeps the occurrence: it still waits", async () => {
    const { job, due } = await pausedWithRunCancelled("overlap-kept");
    await resumedUnclaimed(job);
    await editJob(f.engine, job.tenantId, job.jobId, 1, { name: "renamed" });
    await dispatchShard(f.engine, 0, "pass-after-edit");
    await expectRunsOnlyAfterCancelledAttemptEnded(job, due, 2);
  });
});

describe("a one-off's failure retry a pause cancelled, its cancel landed, resumed, then made recurring before the retry ran", () => {
  it("the retry the resume filed (retryAgain) still runs at its old time, as a retry no pause cancelled does", async () => {
    const { job, due, retry } = await retryRunningCancelledByPause();
    await cancelLands(retry);
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect((await runsOf(job.jobId)).find((r) => r.attempt === 3)?.status).toBe("QUEUED");

    const startAt = new Date(clock().getTime() + 600 * SECOND);
    await editJob(f.engine, job.tenantId, job.jobId, 1, {
      schedule: { every: "PT1H", startAt: startAt.toISOString() },
    });

    expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
    const ran = (await runsOf(job.jobId)).find((r) => r.attempt === 3);
    expect(ran?.status).toBe("SUCCEEDED");
  });
});
