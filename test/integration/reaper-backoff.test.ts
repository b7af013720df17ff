import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MAX_RESEND_INTERVAL_MS, reap } from "../../shared/dispatch/reaper.js";
import { createJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { startRun } from "../../shared/storage/run-start.js";
import { runKey } from "../../shared/storage/runs.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { withSqsFaults } from "../support/faults.js";

const LEASE_MS = 60_000;
const TICK_MS = 60_000;

/** The engine's clock runs `offsetMs` ahead of the machine's: the test moves it a tick at a time. */
let offsetMs = 0;
const clock = () => new Date(Date.now() + offsetMs);

let f: EngineFixture;
beforeEach(async () => {
  offsetMs = 0;
  f = await createEngineFixture({ settings: { leaseMs: LEASE_MS }, clock });
});
afterEach(() => f.destroy());

/** The reaper's passes, one a tick for `minutes`: the minutes (from the first) at which each re-sent. */
async function passes(minutes: number): Promise<number[]> {
  const resentAt: number[] = [];
  for (let minute = 1; minute <= minutes; minute++) {
    offsetMs += TICK_MS;
    if ((await reap(f.engine)).resent > 0) resentAt.push(minute);
  }
  return resentAt;
}

describe("the reaper's re-sends of a run no worker starts", () => {
  it("come a lease apart, then twice as far each time, up to 15 minutes: a backlog is not fed a copy every pass", async () => {
    const runAt = new Date(Math.ceil((clock().getTime() + 1000) / 1000) * 1000);
    await createJob(f.engine, testJob({ schedule: { runAt: runAt.toISOString() } }));
    // Its message waits in the queue: no worker takes it (the workers are down, or behind).
    const resentAt = await passes(40);
    const gaps = resentAt.slice(1).map((minute, i) => minute - (resentAt[i] ?? 0));
    expect(resentAt[0]).toBeLessThanOrEqual(2);
    // 1, 2, 4, 8, then 15 minutes apart (each up to a tick later: the pass that finds it).
    for (const [i, gap] of gaps.entries()) {
      expect(gap).toBeGreaterThanOrEqual(Math.min(2 ** i, MAX_RESEND_INTERVAL_MS / 60_000));
      expect(gap).toBeLessThanOrEqual(Math.min(2 ** i, MAX_RESEND_INTERVAL_MS / 60_000) + 1);
    }
    expect(resentAt.length).toBeLessThanOrEqual(6);
  }, 60_000);

  it("count again from a lease once a worker has started the run", async () => {
    const runAt = new Date(Math.ceil((clock().getTime() + 1000) / 1000) * 1000);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: runAt.toISOString() } }),
    );
    const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const before = await passes(8);
    expect(before).toHaveLength(3);
    // A worker takes it at last, writes its start and dies: its lease lapses a lease on.
    expect((await startRun(f.engine, first.message, "crashed", clock())).kind).toBe("started");
    // Found at the deadline the last re-send set (up to 8 minutes on), then re-sent a lease apart.
    const after = await passes(20);
    expect(after.length).toBeGreaterThanOrEqual(3);
    expect((after[1] ?? 0) - (after[0] ?? 0)).toBeLessThanOrEqual(2);
  }, 60_000);

  it("do not count a re-send SQS refused: the run is looked at again a lease on, its count and misfire clock as they were", async () => {
    const runAt = new Date(Math.ceil((clock().getTime() + 1000) / 1000) * 1000);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: runAt.toISOString() } }),
    );
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    if (!run) throw new Error("no run claimed");
    /** The reaper's bookkeeping on the run's item. */
    const reaperState = async (r: Run) => {
      const item = (
        await f.engine.doc.send(
          new GetCommand({
            TableName: f.engine.tables.runs,
            Key: runKey(r.jobId, r.scheduledFor, r.attempt),
            ConsistentRead: true,
          }),
        )
      ).Item;
      return {
        resentCount: item?.resentCount ?? 0,
        misfireFrom: item?.misfireFrom ?? null,
        deadline: String(item?.inflightSk),
      };
    };

    // The first pass past its deadline re-sends it, and SQS refuses the send.
    const refusing = withSqsFaults(f.engine, {
      operation: "SendMessageBatch",
      kind: "refuseEntries",
      times: Number.POSITIVE_INFINITY,
    });
    let refusedAt = 0;
    try {
      for (let minute = 1; minute <= 3 && refusing.injected.count === 0; minute++) {
        offsetMs += TICK_MS;
        refusedAt = clock().getTime();
        await reap(refusing.engine).catch(() => undefined);
      }
    } finally {
      refusing.destroy();
    }
    expect(refusing.injected.count).toBeGreaterThan(0);
    const afterRefusal = await reaperState(run);
    expect(afterRefusal.resentCount).toBe(0);
    // Nothing was sent: a late start does not count from this pass.
    expect(afterRefusal.misfireFrom).toBeNull();
    expect(Date.parse(afterRefusal.deadline) - refusedAt).toBeGreaterThanOrEqual(LEASE_MS - 1000);
    expect(Date.parse(afterRefusal.deadline) - refusedAt).toBeLessThanOrEqual(LEASE_MS + 1000);

    // SQS takes the next one: the first re-send, counted once, a lease apart from the next.
    const resentAt = await passes(6);
    expect(resentAt[0]).toBeLessThanOrEqual(2);
    expect((resentAt[1] ?? 0) - (resentAt[0] ?? 0)).toBeLessThanOrEqual(2);
    expect((await reaperState(run)).resentCount).toBe(resentAt.length);
  }, 60_000);
});
