import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { dispatchShard, horizonOf, sweepShard } from "../../shared/dispatch/dispatcher.js";
import { FenceLostError } from "../../shared/errors.js";
import type { Job } from "../../shared/model.js";
import { acquireShardLease, advanceWatermark } from "../../shared/storage/lease.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

const SECOND = 1000;

/** Jobs due 1–50 s before `now` by default, half one-off and half hourly, on shard 0. */
function seed(
  f: EngineFixture,
  count: number,
  now: Date,
  dueOf?: (i: number) => Date,
): Promise<Job[]> {
  const due = dueOf ?? ((i: number) => new Date(now.getTime() - (1 + (i % 50)) * SECOND));
  return seedJobs(
    f,
    Array.from({ length: count }, (_, i) => {
      const at = due(i);
      return {
        jobId: `seed${String(i).padStart(5, "0")}`,
        schedule:
          i % 2 === 0 ? { every: "PT1H", startAt: at.toISOString() } : { runAt: at.toISOString() },
        dueAt: at,
      };
    }),
    now,
  );
}

// 1,000 entries per race: enough that racers collide on most of them; DynamoDB Local's transaction
// rate, not the race, sets how long this takes (2,000 took over two minutes for both races).
const ENTRIES = 1000;

describe.each([2, 4])(
  `%i dispatchers racing on one shard over ${ENTRIES} due entries`,
  (racers) => {
    let f: EngineFixture;
    beforeAll(async () => {
      f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
    });
    afterAll(() => f.destroy());

    it("claims each occurrence exactly once: one run, one message, nothing left behind", async () => {
      const now = new Date();
      const jobs = await seed(f, ENTRIES, now);
      const horizon = horizonOf(now, f.engine.settings.lookaheadMs);
      const sweeps = await Promise.all(
        Array.from({ length: racers }, () =>
          // No lease: the due entry's conditional delete alone must make claims exclusive.
          sweepShard(f.engine, 0, {
            from: new Date(now.getTime() - 120 * SECOND),
            to: now,
            now,
            horizonEnd: horizon.end,
            concurrency: 8,
          }),
        ),
      );
      const claimedRuns = sweeps.reduce((n, s) => n + s.runs, 0);
      const lost = sweeps.reduce((n, s) => n + s.lost, 0);
      expect(claimedRuns).toBe(ENTRIES);
      expect(lost).toBeGreaterThan(0);

      const runs = await f.runs();
      expect(runs).toHaveLength(ENTRIES);
      expect(new Set(runs.map((r) => `${r.jobId}|${r.scheduledFor}`)).size).toBe(ENTRIES);
      expect(runs.every((r) => r.status === "QUEUED" && r.attempt === 1)).toBe(true);

      const messages = await f.receiveAll(f.engine.queues.normal);
      expect(messages).toHaveLength(ENTRIES);
      expect(
        new Set(messages.map((m) => `${m.message.jobId}|${m.message.scheduledFor}`)).size,
      ).toBe(ENTRIES);

      const due = await f.dueEntries();
      const stored = new Map((await f.jobs()).map((j) => [j.jobId, j]));
      const recurring = jobs.filter((j) => "every" in j.schedule);
      // The only entries left are the recurring jobs' next occurrences, one each, an hour on.
      expect(due).toHaveLength(recurring.length);
      for (const job of recurring) {
        const mine = due.filter((d) => d.jobId === job.jobId);
        expect(mine).toHaveLength(1);
        const after = stored.get(job.jobId);
        expect(after?.nextRunAt).toBe(mine[0]?.scheduledFor);
        expect(after?.nextDueKey).toEqual(mine[0]?.key);
        expect(Date.parse(after?.nextRunAt ?? "")).toBe(
          Date.parse(job.nextRunAt ?? "") + 3_600_000,
        );
      }
      for (const job of jobs.filter((j) => "runAt" in j.schedule)) {
        expect(stored.get(job.jobId)?.nextRunAt).toBeNull();
      }
    }, 120_000);
  },
);

describe("shard lease with fencing", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("a dispatcher whose lease was taken over can neither claim nor advance the watermark", async () => {
    const now = new Date();
    const [job] = await seed(f, 1, now);
    const a = await acquireShardLease(f.engine, 0, "dispatcher-a", now);
    expect(a?.fence).toBe(1);
    // B cannot take a live lease...
    expect(await acquireShardLease(f.engine, 0, "dispatcher-b", now)).toBeNull();
    // ...but takes it once A's lease has lapsed (A froze).
    const later = new Date(now.getTime() + f.engine.settings.leaseMs + SECOND);
    const b = await acquireShardLease(f.engine, 0, "dispatcher-b", later);
    if (!a || !b || !job?.nextDueKey) throw new Error("setup failed");
    expect(b.fence).toBeGreaterThan(a.fence);
    expect(b.tookOver).toBe(true);

    const [entry] = await f.dueEntries();
    if (!entry) throw new Error("no due entry");
    const horizonEnd = new Date(now.getTime() + 60 * SECOND);
    await expect(
      claimDueEntry(f.engine, entry, { now, horizonEnd, lease: { shard: 0, fence: a.fence } }),
    ).rejects.toBeInstanceOf(FenceLostError);
    await expect(advanceWatermark(f.engine, a, "2030-01-01T00:00")).rejects.toBeInstanceOf(
      FenceLostError,
    );
    expect(await f.runs()).toHaveLength(0);

    const claimed = await claimDueEntry(f.engine, entry, {
      now,
      horizonEnd,
      lease: { shard: 0, fence: b.fence },
    });
    expect(claimed.outcome).toBe("claimed");
    await advanceWatermark(f.engine, b, "2030-01-01T00:00");
  });
});

describe("a dispatcher pass", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("a full pass takes the lease, sweeps, records the watermark and releases", async () => {
    const first = await dispatchShard(f.engine, 0, "pass-1");
    expect(first.outcome).toBe("swept");
    // Released: the next pass need not wait for the lease to expire, and its fence is higher.
    const second = await dispatchShard(f.engine, 0, "pass-2");
    expect(second.outcome).toBe("swept");
    if (first.outcome === "swept" && second.outcome === "swept") {
      expect(second.fence).toBe(first.fence + 1);
      expect(second.tookOver).toBe(false);
    }
  });
});
