import { GetCommand, type TransactWriteCommandInput } from "@aws-sdk/lib-dynamodb";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { MIN_LOOKAHEAD_SECONDS } from "../../shared/config.js";
import { type ClaimResult, claimDueEntry } from "../../shared/dispatch/claim.js";
import {
  dispatchShard,
  horizonOf,
  type PassResult,
  sweepShard,
} from "../../shared/dispatch/dispatcher.js";
import type { Engine } from "../../shared/engine.js";
import { FenceLostError } from "../../shared/errors.js";
import { bucketKeyForMinute } from "../../shared/keys.js";
import type { Job } from "../../shared/model.js";
import { shardLeaseKey } from "../../shared/storage/items.js";
import {
  acquireShardLease,
  advanceWatermark,
  endPass,
  type ShardLease,
} from "../../shared/storage/lease.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { seedJobs } from "../support/seed.js";

const SECOND = 1000;
const MINUTE = 60 * SECOND;

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

// 24 entries per race, three rounds of each racer's 8 claims at once: the racers meet on nearly
// every entry (three of the four lose it), and each losing claim has put the same runs as the
// winner, which is what a claim that mishandles a lost race breaks. Each entry costs the race
// about 11 requests (a run put and a transaction a racer), so more entries only repeat the meeting.
const ENTRIES = 24;

// Four racers: each entry is met by up to four claims at once, so by two at once among them; a
// race of two besides, the same entries and assertions, would prove nothing this one does not.
const RACERS = 4;

describe(`${RACERS} dispatchers racing on one shard over ${ENTRIES} due entries`, () => {
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
      Array.from({ length: RACERS }, () =>
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
    expect(new Set(messages.map((m) => `${m.message.jobId}|${m.message.scheduledFor}`)).size).toBe(
      ENTRIES,
    );

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
      expect(Date.parse(after?.nextRunAt ?? "")).toBe(Date.parse(job.nextRunAt ?? "") + 3_600_000);
    }
    for (const job of jobs.filter((j) => "runAt" in j.schedule)) {
      expect(stored.get(job.jobId)?.nextRunAt).toBeNull();
    }
  }, 120_000);
});

describe("shard lease with fencing", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("a dispatcher whose lease was taken over can neither advance the watermark nor end its pass", async () => {
    const now = new Date();
    const a = await acquireShardLease(f.engine, 0, "dispatcher-a", now);
    expect(a?.fence).toBe(1);
    // B cannot take a live lease...
    expect(await acquireShardLease(f.engine, 0, "dispatcher-b", now)).toBeNull();
    // ...but takes it once A's lease has lapsed (A froze).
    const later = new Date(now.getTime() + f.engine.settings.leaseMs + SECOND);
    const b = await acquireShardLease(f.engine, 0, "dispatcher-b", later);
    if (!a || !b) throw new Error("setup failed");
    expect(b.fence).toBeGreaterThan(a.fence);
    expect(b.tookOver).toBe(true);

    const progress = { watermark: "2030-01-01T00:00", sweepFrom: "2030-01-01T00:00" };
    await expect(advanceWatermark(f.engine, a, progress.watermark)).rejects.toBeInstanceOf(
      FenceLostError,
    );
    await expect(endPass(f.engine, a, progress, later)).rejects.toBeInstanceOf(FenceLostError);
    await advanceWatermark(f.engine, b, progress.watermark);
  });
});

/** The jobs table's item for the shard's lease. */
async function leaseItem(f: EngineFixture, shard: number): Promise<Record<string, unknown>> {
  const { Item } = await f.engine.doc.send(
    new GetCommand({
      TableName: f.engine.tables.jobs,
      Key: shardLeaseKey(shard),
      ConsistentRead: true,
    }),
  );
  if (!Item) throw new Error(`no lease item for shard ${shard}`);
  return Item;
}

type TransactItems = NonNullable<TransactWriteCommandInput["TransactItems"]>;

/**
 * An engine whose first claim transaction of a due entry that `matches` (by key) waits for
 * `hooks.before`, and is followed by `hooks.after` once it committed; counts the claims committed.
 */
function claimingAround(
  f: EngineFixture,
  matches: (entryKey: Record<string, unknown>) => boolean,
  hooks: { before?: () => Promise<void>; after?: () => void },
): { engine: Engine; committed: () => number; destroy: () => void } {
  const clients = createTestClients({ maxSockets: 64 });
  let held = false;
  let committed = 0;
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== "TransactWriteItemsCommand") return next(args);
      const items = (args.input as TransactWriteCommandInput).TransactItems ?? [];
      const deleted = items.find((item) => item.Delete)?.Delete?.Key;
      const first = !held && deleted !== undefined && matches(deleted);
      if (first) {
        held = true;
        await hooks.before?.();
      }
      const result = await next(args);
      committed++;
      if (first) hooks.after?.();
      return result;
    },
    { step: "initialize", name: "claimingAfter" },
  );
  return {
    engine: { ...f.engine, doc: clients.doc },
    committed: () => committed,
    destroy: () => clients.destroy(),
  };
}

describe("a pass whose shard lease was taken over", () => {
  let f: EngineFixture;
  const time = { ms: Math.floor(Date.now() / MINUTE) * MINUTE };
  // A table each: a pass sweeps every job of its shard. The shortest lookahead: a pass claims a
  // per-second job's chain up to its horizon, a run put an occurrence (the late-claim case).
  beforeEach(async () => {
    f = await createEngineFixture({
      settings: { shardCount: 1, maxShardCount: 1, lookaheadMs: MIN_LOOKAHEAD_SECONDS * SECOND },
      clock: () => new Date(time.ms),
    });
  });
  afterEach(() => f.destroy());

  it("claims on, exclusively against the new owner: one run per occurrence; it stops at its end write, recording nothing", async () => {
    time.ms += 10 * MINUTE;
    const t0 = new Date(time.ms);
    const jobs = await seedJobs(
      f,
      Array.from({ length: 40 }, (_, i) => {
        const at = new Date(t0.getTime() - (1 + i) * SECOND);
        return {
          jobId: `taken${String(i).padStart(3, "0")}`,
          schedule:
            i % 2 === 0
              ? { every: "PT1H", startAt: at.toISOString() }
              : { runAt: at.toISOString() },
          dueAt: at,
        };
      }),
      t0,
    );
    const passB: { takeover?: ShardLease | null; started?: Promise<PassResult> } = {};
    // A's first claim waits until its lease has lapsed and B has taken the shard; once it has
    // committed, B's pass sweeps the same buckets while A claims on.
    const stale = claimingAround(f, () => true, {
      before: async () => {
        time.ms += f.engine.settings.leaseMs + SECOND;
        passB.takeover = await acquireShardLease(f.engine, 0, "dispatcher-b", new Date(time.ms));
      },
      after: () => {
        passB.started = dispatchShard(f.engine, 0, "dispatcher-b", { concurrency: 4 });
      },
    });
    try {
      const a = await dispatchShard(stale.engine, 0, "dispatcher-a", { concurrency: 4 });
      expect(passB.takeover?.tookOver).toBe(true);
      expect(a).toEqual({ shard: 0, outcome: "fence-lost", fence: expect.any(Number) });
      // Its claims after the takeover committed: the fence is not in the claim.
      expect(stale.committed()).toBeGreaterThan(0);
      if (!passB.started) throw new Error("B's pass never started");
      const b = await passB.started;
      expect(b.outcome).toBe("swept");
      if (b.outcome !== "swept" || a.outcome !== "fence-lost") return;
      expect(b.fence).toBeGreaterThan(a.fence);

      // Whichever pass claimed an entry, each occurrence has one run and one message.
      const runs = await f.runs();
      const keys = (xs: readonly { jobId: string; scheduledFor: string }[]) =>
        xs.map((x) => `${x.jobId}|${x.scheduledFor}`).sort();
      expect(keys(runs)).toEqual(
        keys(jobs.map((j) => ({ jobId: j.jobId, scheduledFor: j.nextRunAt ?? "" }))),
      );
      const messages = await f.receiveAll(f.engine.queues.normal);
      expect(keys(messages.map((m) => m.message))).toEqual(keys(runs));

      // The hourly jobs' next entries, one each; the one-offs have none.
      const due = await f.dueEntries();
      const stored = new Map((await f.jobs()).map((j) => [j.jobId, j]));
      expect(due).toHaveLength(jobs.length / 2);
      for (const entry of due) expect(stored.get(entry.jobId)?.nextDueKey).toEqual(entry.key);

      // B's record stands: A's end write failed under B's fence, so the lease is B's, released.
      const lease = await leaseItem(f, 0);
      expect(lease).toMatchObject({ owner: "dispatcher-b", fence: b.fence, released: true });
      expect(lease.sweepFrom).toBe(b.sweepFrom);
    } finally {
      stale.destroy();
    }
  });

  it("files a job's next entry by the clock of its claim, so a claim that lands after the new owner read the bucket is still found", async () => {
    // Late in a minute, so that a per-second job's 50 runs from early in it end before t0.
    time.ms = Math.floor(time.ms / MINUTE) * MINUTE + 10 * MINUTE + 58 * SECOND;
    const t0 = new Date(time.ms);
    // A completed pass half a minute before, so the next ones read on from where it began.
    time.ms = t0.getTime() - 30 * SECOND;
    expect((await dispatchShard(f.engine, 0, "dispatcher-before")).outcome).toBe("swept");
    time.ms = t0.getTime();
    const minuteStart = Math.floor(t0.getTime() / MINUTE) * MINUTE;
    // A per-second job due early in this minute: a claim takes 50 occurrences, so its next one
    // is due before t0, and a claim planned at t0 files it in t0's minute, the bucket of its entry.
    const dueAt = new Date(minuteStart + 3 * SECOND);
    const [job] = await seedJobs(
      f,
      [{ jobId: "late-claim", schedule: { every: "PT1S", startAt: dueAt.toISOString() }, dueAt }],
      t0,
    );
    const [entry] = (await f.dueEntries()).filter((e) => e.jobId === "late-claim");
    if (!job || !entry) throw new Error("setup failed");
    const a = await acquireShardLease(f.engine, 0, "dispatcher-a", t0);
    if (!a) throw new Error("A could not take the lease");

    // Three minutes later B takes the lapsed lease and sweeps, reading again from two minutes before
    // its start, a minute past t0's; A, having read the entry at t0, claims it just before B does,
    // after B has read its bucket.
    time.ms += 3 * MINUTE;
    const claimA: { result?: ClaimResult } = {};
    const b = claimingAround(f, (key) => key.pk === entry.key.pk && key.sk === entry.key.sk, {
      before: async () => {
        claimA.result = await claimDueEntry(f.engine, entry, {
          now: t0,
          horizonEnd: horizonOf(t0, f.engine.settings.lookaheadMs).end,
        });
      },
    });
    let passB: PassResult;
    try {
      passB = await dispatchShard(b.engine, 0, "dispatcher-b");
    } finally {
      b.destroy();
    }
    expect(claimA.result?.outcome).toBe("claimed");
    if (passB.outcome !== "swept") throw new Error(`B's pass ended ${passB.outcome}`);
    expect(passB.lost).toBe(1);

    // A's claim's next entry lies where the passes after B read.
    const afterA = (await f.jobs()).find((j) => j.jobId === "late-claim");
    const next = afterA?.nextDueKey;
    if (!afterA?.nextRunAt || !next || passB.sweepFrom === null) throw new Error("no next entry");
    expect(Date.parse(afterA.nextRunAt)).toBeLessThan(t0.getTime());
    expect(next.pk >= bucketKeyForMinute(passB.sweepFrom, 0)).toBe(true);

    expect((await dispatchShard(f.engine, 0, "dispatcher-c")).outcome).toBe("swept");
    const afterC = (await f.jobs()).find((j) => j.jobId === "late-claim");
    expect(Date.parse(afterC?.nextRunAt ?? "")).toBeGreaterThan(Date.parse(afterA.nextRunAt));
    expect((await f.dueEntries()).filter((e) => e.key.sk === next.sk)).toEqual([]);
  });

  // The run's own put (one write unit, and its index entry's), then the commit: by default the
  // transaction of the entry's delete and the job's update (two items, four write units on AWS);
  // with plain claims on, the job's update and the entry's delete, two plain writes. No write is
  // conditioned on the shard lease.
  it.for([
    ["transaction", ["run put", "transaction: Delete, Update"]],
    ["plain", ["run put", "job update", "entry delete"]],
  ] as const)(
    "claims a one-off, oneOffClaimWrites %s, with %j: no write checks the lease",
    async ([claimWrites, expected]) => {
      time.ms += 10 * MINUTE;
      const t0 = new Date(time.ms);
      const at = new Date(t0.getTime() - 5 * SECOND);
      const jobId = `one-claim-${claimWrites}`;
      await seedJobs(f, [{ jobId, schedule: { runAt: at.toISOString() }, dueAt: at }], t0);
      const transactions: TransactItems[] = [];
      const writes: string[] = [];
      f.engine.doc.middlewareStack.add(
        (next, context) => async (args) => {
          const input = args.input as { TableName?: string; Key?: { pk?: unknown } };
          const name = String(context.commandName);
          if (name === "TransactWriteItemsCommand") {
            const items = (args.input as TransactWriteCommandInput).TransactItems ?? [];
            transactions.push(items);
            writes.push(`transaction: ${items.map((item) => Object.keys(item).join()).join(", ")}`);
          }
          if (name === "PutItemCommand" && input.TableName === f.engine.tables.runs)
            writes.push("run put");
          if (name === "UpdateItemCommand" && String(input.Key?.pk) === `JOB#${jobId}`)
            writes.push("job update");
          if (name === "DeleteItemCommand" && String(input.Key?.pk).startsWith("DUE#"))
            writes.push("entry delete");
          return next(args);
        },
        { step: "initialize", name: "captureClaims" },
      );
      try {
        const engine = {
          ...f.engine,
          settings: { ...f.engine.settings, oneOffClaimWrites: claimWrites },
        };
        const pass = await dispatchShard(engine, 0, "dispatcher-count");
        expect(pass.outcome === "swept" && pass.runs).toBe(1);
      } finally {
        f.engine.doc.middlewareStack.remove("captureClaims");
      }
      expect(writes).toEqual(expected);
      expect(
        transactions
          .flat()
          .some((item) => String(item.ConditionCheck?.Key?.pk).startsWith("SHARD#")),
      ).toBe(false);
    },
  );
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
