import { beforeEach, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { JobError } from "../../shared/execution/job-contract.js";
import { createJob, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { DueEntry, Job } from "../../shared/model.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import { SECOND, useClaimRace } from "../support/claim-race.js";
import { deliveryOfRun, type EngineFixture, testJob } from "../support/engine-fixture.js";

/**
 * Attacks on the `rerun` mark (a one-off's occurrence claimed again past attempt 1) and on what
 * files such an attempt: whether a failure's retry can be taken over by one and then skipped with
 * it, as a first attempt is.
 */

const { clock, time, runsOf, fixture, runsCalled, entriesOf } = useClaimRace();
let f: EngineFixture;
beforeEach(() => {
  f = fixture();
});

const HOUR = 3_600_000;

const moveTo = (job: Job, version: number, at: Date) =>
  editJob(f.engine, job.tenantId, job.jobId, version, { schedule: { runAt: at.toISOString() } });

const attemptsOf = async (jobId: string, at: Date) =>
  (await runsOf(jobId))
    .filter((r) => r.scheduledFor === at.toISOString())
    .sort((a, b) => a.attempt - b.attempt)
    .map((r) => [r.attempt, r.status]);

/**
 * A one-off due 5 s ago (retries an hour apart, at most 3 attempts) whose first run, while it
 * runs, has the job moved 10 minutes away (version 2), then fails retryably: attempt 1 FAILED, its
 * retry an entry due in about an hour, the job ACTIVE at its new time.
 */
async function failedWhileMovedAway(misfire: MisfirePolicy) {
  const now = clock();
  const due = new Date(now.getTime() - 5 * SECOND);
  const away = new Date(now.getTime() + 600 * SECOND);
  const { job } = await createJob(
    f.engine,
    testJob({
      schedule: { runAt: due.toISOString() },
      policies: {
        ...testJob().policies,
        misfire,
        retry: { maxAttempts: 3, initialDelayMs: HOUR, maxDelayMs: HOUR },
      },
    }),
  );
  const [first] = await runsOf(job.jobId);
  if (!first) throw new Error("the create queued no run");
  const deps = f.workerDeps("w", {
    noop: async () => {
      await moveTo(job, 1, away);
      throw new JobError("flaky", { retryable: true });
    },
  });
  // A draw near the top of the backoff's jitter: the retry is a due entry, not a QUEUED run.
  await f.process(
    { ...deps, engine: { ...f.engine, random: () => 0.99 } },
    deliveryOfRun(f.engine, first),
  );
  expect(await attemptsOf(job.jobId, due)).toEqual([[1, "FAILED"]]);
  const retries = (await entriesOf(job.jobId)).filter((e) => e.kind === "retry");
  const [retry] = retries;
  if (!retry || retries.length !== 1) throw new Error("expected one retry entry");
  expect(retry.attempt).toBe(2);
  return { job, due, away, retry };
}

/**
 * At the retry entry's time: a pass claims it, the queue's runs of the job are delivered, and the
 * calls of the handler for the occurrence at `due` are returned (the one-off's new time, an hour
 * past too, runs beside them).
 */
async function atRetryTime(jobId: string, retry: DueEntry, due: Date) {
  time.ms = Math.max(time.ms, Date.parse(retry.dueAt) + 5 * SECOND);
  await dispatchShard(f.engine, 0, "pass-at-retry");
  return (await runsCalled(jobId)).filter(([at]) => at === due.toISOString());
}

describe("a one-off whose run failed (its retry an entry an hour out) while it was moved away", () => {
  it("moved away only: the retry runs at its time (the baseline the attacks below hold to)", async () => {
    const { job, due, retry } = await failedWhileMovedAway("fire_once");
    expect(await runsCalled(job.jobId)).toEqual([]);

    expect(await atRetryTime(job.jobId, retry, due)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
  });

  it("moved back past the misfire grace under skip: the failure's retry still runs once", async () => {
    const { job, due, retry } = await failedWhileMovedAway("skip");
    time.ms += 120 * SECOND;

    await moveTo(job, 2, due);
    await dispatchShard(f.engine, 0, "pass-after-edit");
    expect(await runsCalled(job.jobId)).toEqual([]);

    expect(await atRetryTime(job.jobId, retry, due)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    expect((await getTenantJob(f.engine, job.tenantId, job.jobId)).status).toBe("COMPLETED");
  });

  it("moved back, then away again before anything ran: the failure's retry still runs once", async () => {
    const { job, due, retry } = await failedWhileMovedAway("fire_once");
    const later = new Date(clock().getTime() + 1200 * SECOND);

    await moveTo(job, 2, due);
    await moveTo(job, 3, later);
    expect(await runsCalled(job.jobId)).toEqual([]);

    expect(await atRetryTime(job.jobId, retry, due)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
  });

  it("paused, moved back while paused, resumed past the grace under skip: the failure's retry still runs once", async () => {
    const { job, due, retry } = await failedWhileMovedAway("skip");
    await pauseJob(f.engine, job.tenantId, job.jobId, {});
    await moveTo(job, 2, due);
    time.ms += 120 * SECOND;
    await resumeJob(f.engine, job.tenantId, job.jobId);
    await dispatchShard(f.engine, 0, "pass-after-resume");
    expect(await runsCalled(job.jobId)).toEqual([]);

    expect(await atRetryTime(job.jobId, retry, due)).toEqual([[due.toISOString(), 1]]);
    expect(await attemptsOf(job.jobId, due)).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
  });
});
