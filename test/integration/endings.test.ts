import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { MIN_LOOKAHEAD_SECONDS } from "../../shared/config.js";
import { tickOnce } from "../../shared/dispatch/tick.js";
import type { Engine } from "../../shared/engine.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import {
  cancelJob,
  createJob,
  deleteJob,
  editJob,
  pauseJob,
  replayDeadLetter,
  resumeJob,
  triggerJob,
} from "../../shared/jobs/index.js";
import { getTenantJob, listDeadLetters } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { idempotencyKey, jobKey } from "../../shared/storage/items.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { runKey } from "../../shared/storage/runs.js";
import {
  caseFixture,
  createEngineFixture,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import { waitFor } from "../support/wait.js";

const TENANT = "tenant-a";
const SECOND = 1000;
const MINUTE = 60 * SECOND;
const DAY = 24 * 60 * MINUTE;
const DAY_SECONDS = 86_400;
const epoch = (at: number | Date) => Math.floor(new Date(at).getTime() / 1000);
/**
 * For the cases that tick: a pass reads each minute bucket once a shard, and an hour's passes over
 * the default 8 shards were most of this file's requests; what a job's end does is the same on one.
 */
const ONE_SHARD = { shardCount: 1, maxShardCount: 1 };

async function rawItem(
  f: EngineFixture,
  table: "jobs" | "runs",
  key: Record<string, unknown>,
): Promise<Record<string, unknown> | undefined> {
  const found = await f.engine.doc.send(
    new GetCommand({ TableName: f.engine.tables[table], Key: key, ConsistentRead: true }),
  );
  return found.Item;
}

const runsOf = (f: EngineFixture, jobId: string): Promise<Run[]> =>
  f
    .runs()
    .then((runs) =>
      runs
        .filter((r) => r.jobId === jobId)
        .sort((a, b) => a.scheduledFor.localeCompare(b.scheduledFor)),
    );

const at = (f: EngineFixture, offsetMs: number): Engine => ({
  ...f.engine,
  clock: offsetClock(offsetMs),
});

/**
 * Each case on tables and queues of its own (caseFixture), side by side: a dispatcher pass claims
 * every job in its tables and a worker loop takes every message in its queue, so on one fixture
 * each case's tick and loop worked through the others' jobs too. The describes below run beside
 * these, each on its fixture, their cases one after another (it.sequential).
 */
describe.concurrent("end conditions: maxRuns and endAt", () => {
  it("maxRuns: the dispatcher queues exactly that many occurrences across claims, then the job is COMPLETED", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, { settings: ONE_SHARD });
    const start = new Date(Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1M", startAt: start.toISOString() }, maxRuns: 20 }),
    );
    expect(job).toMatchObject({ status: "ACTIVE", maxRuns: 20, occurrencesQueued: 0 });

    // The first pass claims the occurrences within the claim's reach (14 minutes), the next the rest.
    const firstPass = at(f, start.getTime() - Date.now() - MINUTE);
    await tickOnce(firstPass, "endings-1");
    const partly = await getTenantJob(f.engine, TENANT, job.jobId);
    expect(partly.status).toBe("ACTIVE");
    const queuedFirst = partly.occurrencesQueued ?? 0;
    expect(queuedFirst).toBeGreaterThan(0);
    expect(queuedFirst).toBeLessThan(20);
    expect(await runsOf(f, job.jobId)).toHaveLength(queuedFirst);

    const secondPassAt = start.getTime() + 10 * MINUTE;
    await tickOnce(at(f, secondPassAt - Date.now()), "endings-2");
    const ended = await getTenantJob(f.engine, TENANT, job.jobId);
    expect(ended).toMatchObject({ status: "COMPLETED", nextRunAt: null, occurrencesQueued: 20 });
    const runs = await runsOf(f, job.jobId);
    expect(runs.map((r) => r.scheduledFor)).toEqual(
      Array.from({ length: 20 }, (_, i) => new Date(start.getTime() + i * MINUTE).toISOString()),
    );
    expect(runs.every((r) => r.status === "QUEUED" && r.attempt === 1)).toBe(true);
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);

    // Later passes find nothing of it to claim.
    await tickOnce(at(f, start.getTime() + 30 * MINUTE - Date.now()), "endings-3");
    expect(await runsOf(f, job.jobId)).toHaveLength(20);
    // Completed by the claim: it expires a retention after its last runs can have run and retried
    // (14 minutes' reach, 5 attempts of up to 60 s, 4 backoffs of up to an hour).
    const item = await rawItem(f, "jobs", jobKey(job.jobId));
    const runsOn = (14 * MINUTE + 5 * MINUTE + 4 * 60 * MINUTE) / SECOND;
    expect(item?.expiresAt).toBeGreaterThanOrEqual(
      epoch(secondPassAt) + runsOn + 30 * DAY_SECONDS - 5,
    );
    expect(item?.expiresAt).toBeLessThanOrEqual(
      epoch(secondPassAt) + runsOn + 30 * DAY_SECONDS + 5,
    );
  });

  it("endAt: no occurrence after it is queued; one at it is, and the job completes", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, { settings: ONE_SHARD });
    const start = new Date(Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE);
    const endAt = new Date(start.getTime() + 6 * MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { every: "PT1M", startAt: start.toISOString() },
        endAt: endAt.toISOString(),
      }),
    );
    await tickOnce(at(f, start.getTime() - Date.now() - MINUTE), "endings-4");
    await tickOnce(at(f, start.getTime() + 5 * MINUTE - Date.now()), "endings-5");
    const runs = await runsOf(f, job.jobId);
    expect(runs.map((r) => r.scheduledFor)).toEqual(
      Array.from({ length: 7 }, (_, i) => new Date(start.getTime() + i * MINUTE).toISOString()),
    );
    expect(await getTenantJob(f.engine, TENANT, job.jobId)).toMatchObject({
      status: "COMPLETED",
      nextRunAt: null,
    });
  });

  it("a per-second job with maxRuns 120 is claimed in several transactions, each occurrence once", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    const start = new Date(Math.ceil((Date.now() + 10 * SECOND) / SECOND) * SECOND);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1S", startAt: start.toISOString() }, maxRuns: 120 }),
    );
    // Inside the fast-path window: the create claims all of them, 50 to a transaction.
    expect(job).toMatchObject({ status: "COMPLETED", nextRunAt: null, occurrencesQueued: 120 });
    const runs = await runsOf(f, job.jobId);
    expect(new Set(runs.map((r) => r.scheduledFor)).size).toBe(120);
    expect(runs.at(-1)?.scheduledFor).toBe(new Date(start.getTime() + 119 * SECOND).toISOString());
  });

  it("the last occurrence runs exactly once, and nothing after it", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    const stop = new AbortController();
    const loop = runWorkerLoop(f.workerDeps("endings-worker"), {
      concurrency: 4,
      signal: stop.signal,
    });
    try {
      const start = new Date(Math.ceil((Date.now() + 2 * SECOND) / SECOND) * SECOND);
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "noop",
          schedule: { every: "PT1S", startAt: start.toISOString() },
          maxRuns: 3,
          policies: { ...testJob().policies, overlap: "allow", maxConcurrent: 3 },
        }),
      );
      expect(job.status).toBe("COMPLETED");
      const runs = await waitFor(
        "three runs to succeed",
        async () => {
          const now = await runsOf(f, job.jobId);
          return now.filter((r) => r.status === "SUCCEEDED").length === 3 ? now : undefined;
        },
        20_000,
      );
      await new Promise((resolve) => setTimeout(resolve, 3 * SECOND));
      expect((await runsOf(f, job.jobId)).map((r) => [r.scheduledFor, r.status])).toEqual(
        runs.map((r) => [r.scheduledFor, "SUCCEEDED"]),
      );
      expect(runs).toHaveLength(3);
      // The runs' endings leave the completed job completed.
      expect(await getTenantJob(f.engine, TENANT, job.jobId)).toMatchObject({
        status: "COMPLETED",
        lastRun: { status: "SUCCEEDED" },
      });
    } finally {
      stop.abort();
      await loop;
    }
  });

  it("an edit lowering maxRuns to the occurrences already queued completes the job at once", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    const start = new Date(Math.ceil((Date.now() + 2 * MINUTE) / MINUTE) * MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1M", startAt: start.toISOString() }, maxRuns: 50 }),
    );
    const queued = job.occurrencesQueued ?? 0;
    expect(job.status).toBe("ACTIVE");
    expect(queued).toBeGreaterThan(3);
    const edited = await editJob(f.engine, TENANT, job.jobId, job.version, { maxRuns: queued });
    expect(edited).toMatchObject({ status: "COMPLETED", nextRunAt: null, maxRuns: queued });
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
    const item = await rawItem(f, "jobs", jobKey(job.jobId));
    expect(item?.expiresAt).toBeGreaterThanOrEqual(epoch(Date.now()) + 30 * DAY_SECONDS - 60);
    // The runs already queued were counted: they stay queued, to run.
    expect((await runsOf(f, job.jobId)).filter((r) => r.status === "QUEUED").length).toBe(queued);
  });

  it("an edit raising maxRuns lets the job go on from its pending occurrence", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, { settings: ONE_SHARD });
    const start = new Date(Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1M", startAt: start.toISOString() }, maxRuns: 2 }),
    );
    const edited = await editJob(f.engine, TENANT, job.jobId, job.version, { maxRuns: 4 });
    expect(edited).toMatchObject({ status: "ACTIVE", maxRuns: 4, nextRunAt: start.toISOString() });
    await tickOnce(at(f, start.getTime() - MINUTE - Date.now()), "endings-6");
    expect(await runsOf(f, job.jobId)).toHaveLength(4);
    expect(await getTenantJob(f.engine, TENANT, job.jobId)).toMatchObject({
      status: "COMPLETED",
      occurrencesQueued: 4,
    });
  });

  it("an edit moving endAt before queued occurrences: their workers skip them, and the job completes", async ({
    expect,
    onTestFinished,
  }) => {
    // The shortest lookahead: the create claims the per-second job's occurrences up to its fast-path
    // window (lookahead + 2 minutes), one run put each.
    const f = await caseFixture(onTestFinished, {
      settings: { lookaheadMs: MIN_LOOKAHEAD_SECONDS * SECOND },
    });
    const start = new Date(Math.ceil((Date.now() + 3 * SECOND) / SECOND) * SECOND);
    const { job } = await createJob(
      f.engine,
      testJob({ type: "noop", schedule: { every: "PT1S", startAt: start.toISOString() } }),
    );
    expect((await runsOf(f, job.jobId)).length).toBeGreaterThan(3);
    const endAt = start;
    const edited = await editJob(f.engine, TENANT, job.jobId, job.version, {
      endAt: endAt.toISOString(),
    });
    expect(edited).toMatchObject({ status: "COMPLETED", endAt: endAt.toISOString() });
    // A worker receiving the occurrence after endAt records it SKIPPED instead of running it.
    const late = new Date(start.getTime() + SECOND).toISOString();
    const worker = f.workerDeps("endings-skip");
    for (;;) {
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId, 20_000);
      await f.process(worker, received);
      if (received.message.scheduledFor === late) break;
    }
    const runs = await runsOf(f, job.jobId);
    expect(runs.find((r) => r.scheduledFor === start.toISOString())?.status).toBe("SUCCEEDED");
    expect(runs.find((r) => r.scheduledFor === late)).toMatchObject({
      status: "SKIPPED",
      reason: `after the job's endAt (${endAt.toISOString()})`,
    });
  });

  it("a paused job resumed after an edit that ended it is COMPLETED, not ACTIVE with nothing to run", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    const start = new Date(Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1M", startAt: start.toISOString() } }),
    );
    const paused = await pauseJob(f.engine, TENANT, job.jobId);
    const edited = await editJob(f.engine, TENANT, job.jobId, paused.version, {
      endAt: new Date(start.getTime() - MINUTE).toISOString(),
    });
    // The paused job keeps its pending occurrence: the end in force at the resume decides it.
    expect(edited).toMatchObject({ status: "PAUSED", nextRunAt: start.toISOString() });
    expect(await resumeJob(f.engine, TENANT, job.jobId)).toMatchObject({
      status: "COMPLETED",
      nextRunAt: null,
    });
    expect((await f.dueEntries()).filter((d) => d.jobId === job.jobId)).toEqual([]);
  });
});

describe.concurrent("retention: TTL values, idempotency window, dead letters, the expiry sweep", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { retentionDays: 30, deadLetterRetentionDays: 90 } });
  });
  afterAll(() => f.destroy());

  it.sequential("a cancelled job expires a retention after its cancel; a deleted job's runs keep their TTL", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT30S" } }));
    const before = epoch(Date.now());
    await cancelJob(f.engine, TENANT, job.jobId);
    const cancelled = await rawItem(f, "jobs", jobKey(job.jobId));
    expect(cancelled?.status).toBe("CANCELLED");
    expect(cancelled?.expiresAt).toBeGreaterThanOrEqual(before + 30 * DAY_SECONDS);
    expect(cancelled?.expiresAt).toBeLessThanOrEqual(epoch(Date.now()) + 30 * DAY_SECONDS);

    const runs = await runsOf(f, job.jobId);
    expect(runs.length).toBeGreaterThan(0);
    await deleteJob(f.engine, TENANT, job.jobId);
    expect(await rawItem(f, "jobs", jobKey(job.jobId))).toBeUndefined();
    for (const run of runs) {
      const item = await rawItem(f, "runs", runKey(run.jobId, run.scheduledFor, run.attempt));
      expect(item?.expiresAt).toBeGreaterThanOrEqual(before + 30 * DAY_SECONDS - 5);
    }
  });

  it.sequential("a one-off completed by its run expires after it by the longer of the history's and the dead letters' retention", async () => {
    const stop = new AbortController();
    const loop = runWorkerLoop(f.workerDeps("retention-worker"), {
      concurrency: 2,
      signal: stop.signal,
    });
    try {
      const { job } = await createJob(
        f.engine,
        testJob({ type: "noop", schedule: { runAt: new Date().toISOString() } }),
      );
      const done = await waitFor(
        "the one-off to complete",
        async () => {
          const item = await rawItem(f, "jobs", jobKey(job.jobId));
          return item?.status === "COMPLETED" ? item : undefined;
        },
        20_000,
      );
      const [run] = await runsOf(f, job.jobId);
      // 90: deadLetterRetentionDays here, longer than the 30 of retentionDays.
      expect(done.expiresAt).toBe(epoch(Date.parse(run?.finishedAt ?? "")) + 90 * DAY_SECONDS);
    } finally {
      stop.abort();
      await loop;
    }
  });

  it.sequential("an idempotency key answers with its job for 24 hours, then is free again", async () => {
    const created = await createJob(
      f.engine,
      testJob({ schedule: { cron: "0 9 * * *", timezone: "UTC" } }),
      { idempotency: { key: "daily-report", requestHash: "h1" } },
    );
    const record = await rawItem(f, "jobs", idempotencyKey(TENANT, "daily-report"));
    expect(record?.expiresAt).toBe(epoch(Date.parse(created.job.createdAt)) + DAY_SECONDS);

    const sameDay = await createJob(
      at(f, DAY - MINUTE),
      testJob({ schedule: { cron: "0 9 * * *", timezone: "UTC" } }),
      { idempotency: { key: "daily-report", requestHash: "h1" } },
    );
    expect(sameDay).toMatchObject({ created: false, job: { jobId: created.job.jobId } });

    // Past the window (the record is not swept yet: TTL deletes late) the key makes a new job.
    const nextDay = await createJob(
      at(f, DAY + MINUTE),
      testJob({ schedule: { cron: "0 9 * * *", timezone: "UTC" } }),
      { idempotency: { key: "daily-report", requestHash: "h2" } },
    );
    expect(nextDay.created).toBe(true);
    expect(nextDay.job.jobId).not.toBe(created.job.jobId);
    const replaced = await rawItem(f, "jobs", idempotencyKey(TENANT, "daily-report"));
    expect(replaced).toMatchObject({ jobId: nextDay.job.jobId, requestHash: "h2" });
  });

  it.sequential("a dead letter outlives the run history's retention: listed, replayable and kept by the sweep until its own", async () => {
    const stop = new AbortController();
    const loop = runWorkerLoop(f.workerDeps("dead-worker"), {
      concurrency: 2,
      signal: stop.signal,
    });
    let dead: Run;
    try {
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "fail",
          payload: { retryable: false },
          schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
        }),
      );
      const run = await triggerJob(f.engine, TENANT, job.jobId);
      dead = await waitFor(
        "the run to die",
        async () => {
          const runs = await runsOf(f, job.jobId);
          return runs.find((r) => r.runId === run.runId && r.status === "DEAD");
        },
        20_000,
      );
    } finally {
      stop.abort();
      await loop;
    }
    const diedAt = Date.parse(dead.finishedAt ?? "");
    const item = await rawItem(f, "runs", runKey(dead.jobId, dead.scheduledFor, dead.attempt));
    expect(item?.expiresAt).toBe(epoch(diedAt) + 90 * DAY_SECONDS);

    // 40 days on: past the history's 30, inside the dead letter's 90.
    const later = at(f, diedAt + 40 * DAY - Date.now());
    await sweepExpired(later, later.clock());
    expect(
      await rawItem(f, "runs", runKey(dead.jobId, dead.scheduledFor, dead.attempt)),
    ).toBeDefined();
    const listed = await listDeadLetters(later, TENANT, { limit: 100 });
    expect(listed.items.map((r) => r.runId)).toContain(dead.runId);
    const replay = (await replayDeadLetter(later, TENANT, dead.runId)).run;
    expect(replay.attempt).toBe(dead.attempt + 1);
  });

  it.sequential("a one-off whose run died keeps its completed job as long as the dead letter: replayable until it expires", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "fail",
        payload: { retryable: false },
        schedule: { runAt: new Date().toISOString() },
      }),
    );
    await f.process(f.workerDeps("w"), await f.nextDelivery(f.engine.queues.normal, job.jobId));
    const [dead] = await runsOf(f, job.jobId);
    expect(dead?.status).toBe("DEAD");
    expect((await getTenantJob(f.engine, TENANT, job.jobId)).status).toBe("COMPLETED");
    const diedAt = Date.parse(dead?.finishedAt ?? "");
    const deadItem = await rawItem(f, "runs", runKey(job.jobId, dead?.scheduledFor ?? "", 1));
    expect((await rawItem(f, "jobs", jobKey(job.jobId)))?.expiresAt).toBe(deadItem?.expiresAt);

    // 40 days on: past the retention of 30, inside the dead letter's 90.
    const later = at(f, diedAt + 40 * DAY - Date.now());
    await sweepExpired(later, later.clock());
    const listed = await listDeadLetters(later, TENANT, { limit: 100 });
    expect(listed.items.map((r) => r.runId)).toContain(dead?.runId);
    const replay = (await replayDeadLetter(later, TENANT, dead?.runId ?? "")).run;
    expect(replay.attempt).toBe(2);
  });

  it.sequential("a run parked through a pause longer than the retention runs after resume, and a cancelled one still expires", async () => {
    const resumed = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const cancelled = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    // Paused with their runs claimed and sent: each delivery parks its run.
    for (const { job } of [resumed, cancelled]) {
      await pauseJob(f.engine, TENANT, job.jobId);
      await f.process(f.workerDeps("w"), await f.nextDelivery(f.engine.queues.normal, job.jobId));
      expect((await runsOf(f, job.jobId)).map((r) => [r.status, r.reason])).toEqual([
        ["QUEUED", "waiting: job paused"],
      ]);
    }

    // Forty days on, past the run history's 30: the sweep stands in for DynamoDB's TTL.
    const later = at(f, 40 * DAY);
    await sweepExpired(later, later.clock());
    await resumeJob(later, TENANT, resumed.job.jobId);
    // The occurrence's one run is still there to run, sent again by the resume.
    expect((await runsOf(f, resumed.job.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);
    await f.process(
      { ...f.workerDeps("w"), engine: later },
      await f.nextDelivery(f.engine.queues.normal, resumed.job.jobId),
    );
    const [ran] = await runsOf(f, resumed.job.jobId);
    expect(ran?.status).toBe("SUCCEEDED");
    expect((await getTenantJob(later, TENANT, resumed.job.jobId)).status).toBe("COMPLETED");
    const ranItem = await rawItem(f, "runs", runKey(ran?.jobId ?? "", ran?.scheduledFor ?? "", 1));
    expect(ranItem?.expiresAt).toBeGreaterThanOrEqual(epoch(later.clock()) + 30 * DAY_SECONDS - 5);

    await cancelJob(later, TENANT, cancelled.job.jobId);
    const [ended] = await runsOf(f, cancelled.job.jobId);
    expect(ended?.status).toBe("CANCELLED");
    const endedItem = await rawItem(
      f,
      "runs",
      runKey(ended?.jobId ?? "", ended?.scheduledFor ?? "", 1),
    );
    expect(endedItem?.expiresAt).toBeGreaterThanOrEqual(
      epoch(later.clock()) + 30 * DAY_SECONDS - 5,
    );
  }, 30_000);

  it.sequential("the expiry sweep deletes what has expired and keeps the rest", async () => {
    const { job: live } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
    const { job: ended } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
    await cancelJob(f.engine, TENANT, ended.jobId);
    const endedRuns = await runsOf(f, ended.jobId);
    const liveRuns = await runsOf(f, live.jobId);

    // A day before the retention ends nothing of theirs goes.
    const early = at(f, 29 * DAY);
    await sweepExpired(early, early.clock());
    expect(await rawItem(f, "jobs", jobKey(ended.jobId))).toBeDefined();

    const past = at(f, 30 * DAY + MINUTE);
    const swept = await sweepExpired(past, past.clock());
    expect(swept.jobs).toBeGreaterThanOrEqual(1);
    expect(await rawItem(f, "jobs", jobKey(ended.jobId))).toBeUndefined();
    // A job still active has no TTL: it stays, whatever its age; its runs' history goes.
    expect(await rawItem(f, "jobs", jobKey(live.jobId))).toBeDefined();
    for (const run of [...endedRuns, ...liveRuns]) {
      expect(
        await rawItem(f, "runs", runKey(run.jobId, run.scheduledFor, run.attempt)),
      ).toBeUndefined();
    }
  });
});

describe.concurrent("a completed job's retries", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    // Retries drawn at the top of their backoff: each lands a full two days after its failure. A
    // completed job is kept the longer of the two retentions after its runs: one day each here.
    f = await createEngineFixture({
      settings: { ...ONE_SHARD, retentionDays: 1, deadLetterRetentionDays: 1 },
      random: () => 0.999,
    });
  });
  afterAll(() => f.destroy());

  const failing = {
    failing: async () => {
      throw new Error("receiver down");
    },
  };

  it.sequential("still run when due after the retention: the job is kept until its last retry can have run", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "failing",
        schedule: { every: "PT1H" },
        maxRuns: 1,
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 3, initialDelayMs: 2 * DAY, maxDelayMs: 2 * DAY },
        },
      }),
    );
    // Its one occurrence was queued at create: the job is complete while that run may still retry.
    expect(job.status).toBe("COMPLETED");
    await f.process(
      f.workerDeps("w", failing),
      await f.nextDelivery(f.engine.queues.normal, job.jobId),
    );
    const [retry] = (await f.dueEntries()).filter((e) => e.jobId === job.jobId);
    expect(retry).toMatchObject({ kind: "retry", attempt: 2 });
    const dueAt = Date.parse(retry?.dueAt ?? "");
    expect(dueAt - Date.now()).toBeGreaterThan(DAY);

    // When the retry is due, a day past the retention: the sweep stands in for DynamoDB's TTL.
    const later = at(f, dueAt - Date.now() + SECOND);
    await sweepExpired(later, later.clock());
    expect(await getJob(later, job.jobId)).not.toBeNull();
    await tickOnce(later, "completed-retry");
    await f.process(
      { ...f.workerDeps("w", failing), engine: later },
      await f.nextDelivery(f.engine.queues.normal, job.jobId),
    );
    // The first attempt's history has expired by now (a day's retention); the retry ran.
    expect((await runsOf(f, job.jobId)).map((r) => [r.attempt, r.status])).toEqual([[2, "FAILED"]]);
  }, 30_000);
});

describe.concurrent("a completed job's triggered runs", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { ...ONE_SHARD, retentionDays: 1, deadLetterRetentionDays: 1 },
      random: () => 0.999,
    });
  });
  afterAll(() => f.destroy());

  let failing = false;
  const handlers = {
    switched: async () => {
      if (failing) throw new Error("receiver down");
    },
  };

  it.sequential("retry when due after the job's retention: a trigger keeps the job until its retries can have run", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "switched",
        schedule: { runAt: new Date().toISOString() },
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 3, initialDelayMs: 2 * DAY, maxDelayMs: 2 * DAY },
        },
      }),
    );
    failing = false;
    await f.process(
      f.workerDeps("w", handlers),
      await f.nextDelivery(f.engine.queues.normal, job.jobId),
    );
    expect((await getTenantJob(f.engine, TENANT, job.jobId)).status).toBe("COMPLETED");

    // Half a day on, inside the job's one-day retention, a trigger: its run fails.
    failing = true;
    const halfDay = at(f, DAY / 2);
    const triggered = await triggerJob(halfDay, TENANT, job.jobId);
    await f.process(
      { ...f.workerDeps("w", handlers), engine: halfDay },
      await f.nextDelivery(f.engine.queues.normal, job.jobId),
    );
    const [retry] = (await f.dueEntries()).filter((e) => e.jobId === job.jobId);
    expect(retry).toMatchObject({
      kind: "retry",
      attempt: 2,
      scheduledFor: triggered.scheduledFor,
    });

    // Its retry is due two days later, past the retention the job completed with.
    const later = at(f, Date.parse(retry?.dueAt ?? "") - Date.now() + SECOND);
    await sweepExpired(later, later.clock());
    expect(await getJob(later, job.jobId)).not.toBeNull();
    await tickOnce(later, "triggered-retry");
    await f.process(
      { ...f.workerDeps("w", handlers), engine: later },
      await f.nextDelivery(f.engine.queues.normal, job.jobId),
    );
    const attempts = (await runsOf(f, job.jobId)).filter(
      (r) => r.scheduledFor === triggered.scheduledFor,
    );
    // The first attempt's history has expired by now (a day's retention); the retry ran.
    expect(attempts.map((r) => [r.attempt, r.status])).toEqual([[2, "FAILED"]]);
  }, 30_000);
});
