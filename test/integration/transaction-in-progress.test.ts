import { describe, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { createJobs } from "../../shared/jobs/create-batch.js";
import { createJob, editJob, replayDeadLetter, triggerJob } from "../../shared/jobs/index.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import {
  caseFixture,
  type EngineFixture,
  jobWithDeadRun,
  testJob,
} from "../support/engine-fixture.js";
import { withTransactionsInProgress } from "../support/faults.js";
import { yearlyCronHalfAYearAway } from "../support/time-of-day.js";

/** A yearly cron that never falls due while the file runs (time-of-day.ts). */
const YEARLY_CRON = yearlyCronHalfAYearAway();

/**
 * A transaction DynamoDB applied whose answer was lost, and whose repeats under the same
 * ClientRequestToken (the SDK's own retries) meet TransactionInProgressException until the SDK
 * gives up: the write is made, so the request must answer as made, write nothing twice, and keep
 * its quota share. More answers in progress than the SDK's retries of one send, fewer than the
 * sends the storage layer makes under contention.
 */
const IN_PROGRESS_ANSWERS = 4;

/**
 * Each case waits out the SDK's backoff over its answers in progress: 2-5 s, nearly all of it
 * asleep (the file took 22 s, 5 s of CPU, one case after another). Side by side, each on tables
 * and queues of its own (a case's receive would take another's message, a purge between cases
 * would empty a neighbour's tables), they take the longest case's time.
 */
describe.concurrent("a transaction applied whose repeats meet TransactionInProgressException", () => {
  /** Quotas on, read fresh: each case checks its quota share. */
  const quotasOn = { settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0 } };

  const inProgress = (f: EngineFixture) =>
    withTransactionsInProgress(f.engine, { times: 1, inProgressAnswers: IN_PROGRESS_ANSWERS });

  it("a keyed create answers the job created (201), keeps its quota share and sends its run at once", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, quotasOn);
    const tenantId = "in-progress-create";
    await writeQuotaOverride(f.engine, tenantId, { activeJobs: 10 }, new Date());
    const faulty = inProgress(f);
    let answer: Awaited<ReturnType<typeof createJob>>;
    try {
      answer = await createJob(
        faulty.engine,
        testJob({ tenantId, schedule: { runAt: new Date().toISOString() } }),
        { idempotency: { key: "in-progress", requestHash: "h" } },
      );
    } finally {
      faulty.destroy();
    }
    expect(faulty.injected.count).toBe(1);
    expect(answer.created).toBe(true);
    expect((await f.jobs()).filter((j) => j.tenantId === tenantId)).toHaveLength(1);
    expect(await readQuotaUsage(f.engine, tenantId)).toMatchObject({ activeJobs: 1 });
    const received = await f.nextDelivery(f.engine.queues.normal, answer.job.jobId, 5_000);
    expect(received.message.jobId).toBe(answer.job.jobId);
  });

  it("a batch's keyed job answers created and keeps its quota share", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, quotasOn);
    const tenantId = "in-progress-batch";
    await writeQuotaOverride(f.engine, tenantId, { activeJobs: 10 }, new Date());
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const faulty = inProgress(f);
    let outcomes: Awaited<ReturnType<typeof createJobs>>;
    try {
      outcomes = await createJobs(faulty.engine, tenantId, [
        {
          input: testJob({ tenantId, name: "keyed", schedule: { runAt: later } }),
          idempotency: { key: "in-progress", requestHash: "h" },
        },
        { input: testJob({ tenantId, name: "plain", schedule: { runAt: later } }) },
      ]);
    } finally {
      faulty.destroy();
    }
    expect(faulty.injected.count).toBe(1);
    expect(outcomes.map((o) => ("job" in o ? o.created : String(o.error)))).toEqual([true, true]);
    expect((await f.jobs()).filter((j) => j.tenantId === tenantId)).toHaveLength(2);
    expect(await readQuotaUsage(f.engine, tenantId)).toMatchObject({ activeJobs: 2 });
  });

  it("a trigger without a key queues one run", async ({ expect, onTestFinished }) => {
    const f = await caseFixture(onTestFinished, quotasOn);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { cron: YEARLY_CRON, timezone: "UTC" } }),
    );
    const faulty = inProgress(f);
    let run: Awaited<ReturnType<typeof triggerJob>>;
    try {
      run = await triggerJob(faulty.engine, "tenant-a", job.jobId);
    } finally {
      faulty.destroy();
    }
    expect(faulty.injected.count).toBe(1);
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => r.runId)).toEqual([run.runId]);
  });

  it("an edit answers the job it edited, not a version mismatch against its own write", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, quotasOn);
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
    const faulty = inProgress(f);
    let edited: Awaited<ReturnType<typeof editJob>>;
    try {
      edited = await editJob(faulty.engine, "tenant-a", job.jobId, job.version, {
        name: "renamed",
      });
    } finally {
      faulty.destroy();
    }
    expect(faulty.injected.count).toBe(1);
    expect(edited).toMatchObject({ name: "renamed", version: job.version + 1 });
    const stored = (await f.jobs()).find((j) => j.jobId === job.jobId);
    expect(stored).toMatchObject({ name: "renamed", version: job.version + 1 });
  });

  it("a replay answers its new run and sends it", async ({ expect, onTestFinished }) => {
    const f = await caseFixture(onTestFinished, quotasOn);
    const { job, dead } = await jobWithDeadRun(f);
    const faulty = inProgress(f);
    let replay: Awaited<ReturnType<typeof replayDeadLetter>>["run"];
    try {
      replay = (await replayDeadLetter(faulty.engine, "tenant-a", dead.runId)).run;
    } finally {
      faulty.destroy();
    }
    expect(faulty.injected.count).toBe(1);
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => [r.runId, r.status])).toEqual([
      [dead.runId, "DEAD"],
      [replay.runId, "QUEUED"],
    ]);
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId, 5_000);
    expect(received.message.attempt).toBe(2);
  });
});
