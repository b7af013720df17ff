import { beforeEach, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { type JobContext, JobError } from "../../shared/execution/job-contract.js";
import { createJob, pauseJob, resumeJob, triggerJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job } from "../../shared/model.js";
import { startRun } from "../../shared/storage/run-start.js";
import { ValidationError } from "../../shared/validation.js";
import { useCancelledAttempt } from "../support/cancelled-attempt.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { type EngineFixture, testJob } from "../support/engine-fixture.js";
import { useOneOffMoves } from "../support/one-off-moves.js";

/**
 * Attacks on the retry a resume files in place of a one-off's failure retry (or replay) that a
 * pause cancelled (`DueEntry.retryAgain`), and on the worker's rule for such an attempt.
 */

const race = useClaimRace();
const { clock, runsOf, fixture, runsCalled } = race;
const { moveTo, attemptsOf, failedOnce } = useOneOffMoves(race);
const { thirdPutAsPauseCancels, expectAttempt3Skipped, expectRunsOnceCancelledEnded } =
  useCancelledAttempt(race);
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

/** Every message of the job's runs the queue holds now, delivered to a worker running `handler`. */
async function deliverQueued(jobId: string, handler: (ctx: JobContext) => Promise<unknown>) {
  const deps = f.workerDeps("w", { noop: handler });
  for (const received of await f.receiveAll(f.engine.queues.normal, { quietMs: 1500 })) {
    if (received.message.jobId === jobId) await f.process(deps, received);
  }
}

/**
 * An edit giving the one-off `due` back (at `version`) once a run of that occurrence succeeded:
 * refused naming schedule.runAt, nothing written; the job stays ACTIVE at `away`, no run is
 * queued, and the occurrence has one success.
 */
async function expectMoveBackRefused(job: Job, due: Date, version: number, away: Date) {
  const refused = await moveTo(job, version, due).catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(ValidationError);
  expect((refused as ValidationError).field).toBe("schedule.runAt");
  await dispatchShard(f.engine, 0, "pass-after-edit");
  expect(await runsCalled(job.jobId)).toEqual([]);
  const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
  expect([after.status, after.version, after.nextRunAt]).toEqual([
    "ACTIVE",
    version,
    away.toISOString(),
  ]);
  expect((await runsOf(job.jobId)).filter((r) => r.status === "SUCCEEDED")).toHaveLength(1);
}

describe("a one-off's failure retry that a pause cancelled, run at its old time after a move away", () => {
  it("moved back to that time after the retry succeeded there: the occurrence does not run a second time", async () => {
    const { job, due, away, first } = await failedOnce(0);
    const retry = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    expect(retry?.retryOf?.runId).toBe(first.runId);
    if (!retry) throw new Error("no retry");
    expect((await startRun(f.engine, retry, "worker-a", clock())).kind).toBe("started");
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await moveTo(job, 1, away);
    await expectRunsOnceCancelledEnded(job.jobId, due, 3);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "CANCELLED"],
      [3, "SUCCEEDED"],
    ]);

    await expectMoveBackRefused(job, due, 2, away);
  });

  it("the baseline, no pause: moved away while its run ran, and back once that run succeeded at its time", async () => {
    const { job, due, away } = await failedOnce(0, { moveAway: true });
    expect(await runsCalled(job.jobId)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    await expectMoveBackRefused(job, due, 2, away);
  });
});

describe("a triggered run of a one-off whose retry a pause cancelled as it failed (the narrow window)", () => {
  it("the retry's next attempt, put before the refused ending, is skipped after the resume: nothing gives a triggered run back", async () => {
    const away = new Date(clock().getTime() + 600 * SECOND);
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { runAt: away.toISOString() },
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0 },
        },
      }),
    );
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    const at = new Date(triggered.scheduledFor);
    await deliverQueued(job.jobId, async () => {
      throw new JobError("flaky", { retryable: true });
    });
    const retry = await thirdPutAsPauseCancels(job.jobId, at);
    expect(retry.retryOf?.runId).toBe(triggered.runId);

    await resumeJob(f.engine, job.tenantId, job.jobId);
    await expectAttempt3Skipped(job, at, away);
  });
});
