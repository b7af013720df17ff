import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  cancelJob,
  createJob,
  deleteJob,
  editJob,
  pauseJob,
  replayDeadLetter,
  resumeJob,
} from "../../shared/jobs/index.js";
import type { Job, Run } from "../../shared/model.js";
import { deadLetterPk } from "../../shared/storage/items.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { queuedRun } from "../../shared/storage/runs.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  firstAttemptAt,
  testJob,
} from "../support/engine-fixture.js";
import { countingEngine } from "../support/request-count.js";
import { putItems } from "../support/seed.js";

/**
 * A recurring job edited into a one-off keeps its recurring history (runs expire after the
 * retention). A one-off's pause with running: "cancel", its cancel, resume and delete read its
 * runs from its floor (`oneOffFrom`), not that history.
 */

/**
 * Run items of the recurring job's history, written straight into the table: a few hundred, far
 * more than the `FEW` a read from the one-off's floor meets; a read of the history meets them all.
 */
const HISTORY = 400;
/** Far fewer items than the history. */
const FEW = 100;
const ERROR = "handler failed: ".padEnd(600, "x");

let f: EngineFixture;
let counting: ReturnType<typeof countingEngine>;
beforeAll(async () => {
  f = await createEngineFixture();
  counting = countingEngine(f.engine);
  counting.engine.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const result = await next(args);
      const read: unknown = Reflect.get(result.output as object, "ScannedCount");
      if (context.commandName === "QueryCommand" && typeof read === "number") scanned += read;
      return result;
    },
    { step: "initialize", name: "countScannedRuns" },
  );
});
afterAll(async () => {
  counting.destroy();
  await f.destroy();
});

/**
 * A job with `length` failed runs a second apart behind it, the oldest first, then edited into a
 * one-off an hour ahead. `before` runs before the edit.
 */
async function oneOffWithLongHistory(
  length = HISTORY,
  before: (job: Job, oldest: Date) => Promise<unknown> = async () => undefined,
  runAtOf: (oldest: Date, now: Date) => Date = (_, now) => new Date(now.getTime() + 60 * 60 * 1000),
): Promise<Job> {
  const created = await createJob(f.engine, testJob());
  const job = created.job;
  const now = f.engine.clock();
  const oldest = new Date(now.getTime() - length * 1000 - 60 * 60 * 1000);
  const items = Array.from({ length }, (_, i) => {
    const at = new Date(oldest.getTime() + i * 1000);
    const { item } = firstAttemptAt(f.engine, job, at);
    // Failed, each with an error message, as a history's runs are.
    return { ...item, status: "FAILED", finishedAt: at.toISOString(), error: ERROR };
  });
  await putItems(f, f.engine.tables.runs, items);
  await before(job, oldest);
  const runAt = runAtOf(oldest, now).toISOString();
  return editJob(f.engine, job.tenantId, job.jobId, job.version, { schedule: { runAt } });
}

/** The run items `act`'s queries read (their ScannedCount: a filter drops items only after reading them). */
let scanned = 0;
async function runsReadBy(act: () => Promise<unknown>): Promise<number> {
  scanned = 0;
  await act();
  return scanned;
}

describe("a recurring job with a long history, edited into a one-off", () => {
  it("paused with running: cancel, resumed, paused again and cancelled: none reads the history", async () => {
    const before = f.engine.clock().toISOString();
    const job = await oneOffWithLongHistory();
    // Its floor is the time it became a one-off, after the whole history.
    expect(job.oneOffFrom !== undefined && job.oneOffFrom >= before).toBe(true);
    const { engine } = counting;
    const { tenantId, jobId } = job;
    const pause = () => pauseJob(engine, tenantId, jobId, { running: "cancel" });
    expect(await runsReadBy(pause)).toBeLessThan(FEW);
    expect(await runsReadBy(() => resumeJob(engine, tenantId, jobId))).toBeLessThan(FEW);
    expect(await runsReadBy(pause)).toBeLessThan(FEW);
    expect(await runsReadBy(() => cancelJob(engine, tenantId, jobId))).toBeLessThan(FEW);
  }, 60_000);

  it("deleted: the delete does not read the history", async () => {
    const job = await oneOffWithLongHistory();
    const del = () => deleteJob(counting.engine, job.tenantId, job.jobId);
    expect(await runsReadBy(del)).toBeLessThan(FEW);
  }, 60_000);
});

/** Writes `item` (a run's) into the runs table as it is. */
const putRun = (item: Record<string, unknown>) =>
  f.engine.doc.send(new PutCommand({ TableName: f.engine.tables.runs, Item: item }));

/** The retry (attempt 2, QUEUED) of the oldest run of the history, put before the edit. */
async function retryAtOldest(job: Job, oldest: Date) {
  const failed = firstAttemptAt(f.engine, job, oldest).run;
  const retry = queuedRun(
    {
      jobId: job.jobId,
      tenantId: job.tenantId,
      scheduledFor: oldest,
      dueAt: f.engine.clock(),
      attempt: 2,
      priority: job.priority,
      jobVersion: job.version,
      retryOf: { runId: failed.runId, fence: 0 },
    },
    f.engine.clock(),
    f.engine.settings,
  );
  await putRun(retry.item);
  return retry.run;
}

/** The oldest run of the history written DEAD, on its tenant's dead-letter list. */
async function deadAtOldest(job: Job, oldest: Date) {
  const { run, item } = firstAttemptAt(f.engine, job, oldest);
  const finishedAt = new Date(oldest.getTime() + 500).toISOString();
  await putRun({
    ...item,
    status: "DEAD",
    finishedAt,
    error: ERROR,
    deadPk: deadLetterPk(job.tenantId),
    deadSk: `${finishedAt}#${run.runId}`,
  });
  return run;
}

describe("a recurring job with a history, edited into a one-off, a run at its oldest occurrence then made", () => {
  it("its retry, queued before the edit, run by a worker: the next cancel reads that occurrence, not the history", async () => {
    let queued: Run | undefined;
    const job = await oneOffWithLongHistory(HISTORY, async (recurring, oldest) => {
      queued = await retryAtOldest(recurring, oldest);
    });
    const retry = queued && (await getRun(f.engine, queued));
    if (!retry) throw new Error("no retry");
    expect(await f.process(f.workerDeps("w"), deliveryOfRun(f.engine, retry))).toBe("ack");
    expect((await getRun(f.engine, retry))?.status).toBe("SUCCEEDED");
    const { tenantId, jobId } = job;
    expect(await runsReadBy(() => cancelJob(counting.engine, tenantId, jobId))).toBeLessThan(FEW);
    expect((await getJob(f.engine, jobId))?.status).toBe("CANCELLED");
  }, 60_000);

  it("a replay of its dead run: the next pause and cancel read that occurrence and reach the replay, not the history", async () => {
    let deadId = "";
    const job = await oneOffWithLongHistory(HISTORY, async (recurring, oldest) => {
      deadId = (await deadAtOldest(recurring, oldest)).runId;
    });
    const { run: replay } = await replayDeadLetter(f.engine, job.tenantId, deadId);
    const { engine } = counting;
    const { tenantId, jobId } = job;
    const pause = () => pauseJob(engine, tenantId, jobId, { running: "cancel" });
    expect(await runsReadBy(pause)).toBeLessThan(FEW);
    expect(await runsReadBy(() => cancelJob(engine, tenantId, jobId))).toBeLessThan(FEW);
    expect((await getRun(f.engine, replay))?.status).toBe("CANCELLED");
  }, 60_000);
});

describe("a recurring job with a history, edited into a one-off whose runAt lies before it", () => {
  it("a cancel reads the runAt's attempts, not the history since, and reaches its run under way", async () => {
    const job = await oneOffWithLongHistory(
      HISTORY,
      async () => undefined,
      (oldest) => new Date(oldest.getTime() - 30_000),
    );
    if (!("runAt" in job.schedule)) throw new Error("not a one-off");
    // The one-off's own run at its runAt, as its claim puts it, started by a worker.
    const { run, item } = firstAttemptAt(f.engine, job, new Date(job.schedule.runAt));
    await putRun(item);
    expect((await startRun(f.engine, run, "worker-a", f.engine.clock())).kind).toBe("started");
    const { tenantId, jobId } = job;
    expect(await runsReadBy(() => cancelJob(counting.engine, tenantId, jobId))).toBeLessThan(FEW);
    expect((await getRun(f.engine, run))?.cancelRequestedAt ?? null).not.toBeNull();
  }, 60_000);
});
