import { BatchWriteCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { forEachConcurrently } from "../../shared/concurrency.js";
import {
  cancelJob,
  createJob,
  deleteJob,
  editJob,
  pauseJob,
  resumeJob,
} from "../../shared/jobs/index.js";
import type { Job } from "../../shared/model.js";
import {
  createEngineFixture,
  type EngineFixture,
  firstAttemptAt,
  testJob,
} from "../support/engine-fixture.js";
import { countingEngine } from "../support/request-count.js";

/**
 * A recurring job edited into a one-off keeps its recurring history (runs expire after the
 * retention). A one-off's pause with running: "cancel", its cancel, resume and delete read its
 * runs from its floor (`oneOffFrom`), not that history.
 */

/** Run items of the recurring job's history, written straight into the table. */
const HISTORY = 4000;
/** Far fewer items than the history (a 1 MB page of it holds some 1,500). */
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

/** An every-minute job with `HISTORY` failed runs (an every-second job's hour) behind it, then edited into a one-off an hour ahead. */
async function oneOffWithLongHistory(): Promise<Job> {
  const created = await createJob(f.engine, testJob());
  const job = created.job;
  const now = f.engine.clock();
  const items = Array.from({ length: HISTORY }, (_, i) => {
    const at = new Date(now.getTime() - (HISTORY - i) * 1000 - 60 * 60 * 1000);
    const { item } = firstAttemptAt(f.engine, job, at);
    // Failed, each with an error message: a history of some megabytes, pages of the runs table.
    return { ...item, status: "FAILED", finishedAt: at.toISOString(), error: ERROR };
  });
  const batches = Array.from({ length: Math.ceil(HISTORY / 25) }, (_, i) =>
    items.slice(i * 25, i * 25 + 25),
  );
  await forEachConcurrently(batches, 16, async (batch) => {
    await f.engine.doc.send(
      new BatchWriteCommand({
        RequestItems: { [f.engine.tables.runs]: batch.map((Item) => ({ PutRequest: { Item } })) },
      }),
    );
  });
  const runAt = new Date(now.getTime() + 60 * 60 * 1000).toISOString();
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
