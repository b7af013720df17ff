import { QueryCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { FenceLostError } from "../errors.js";
import { bucketKeyForMinute, bucketsBetween, minuteOf } from "../keys.js";
import type { DueEntry, Run } from "../model.js";
import { METRICS } from "../observability.js";
import { sendRuns } from "../queue/work-queue.js";
import { decodeDueEntry, runMessageOf } from "../storage/items.js";
import { claimDueEntry } from "./claim.js";
import { acquireShardLease, advanceWatermark, releaseShardLease } from "./lease.js";

const MINUTE_MS = 60_000;
/** Buckets this far back are swept again every pass, in case a writer raced an earlier sweep. */
const RESWEEP_MS = 2 * MINUTE_MS;
/** A shard not swept for longer than this (an outage of days) restarts from here. */
const MAX_CATCH_UP_MS = 9_000 * MINUTE_MS;

export interface SweepStats {
  entries: number;
  runs: number;
  skipped: number;
  lost: number;
  stale: number;
  sendFailures: number;
}

export type PassResult =
  | ({
      readonly shard: number;
      readonly outcome: "swept";
      readonly tookOver: boolean;
      readonly fence: number;
    } & SweepStats)
  | { readonly shard: number; readonly outcome: "lease-held" }
  | { readonly shard: number; readonly outcome: "fence-lost"; readonly fence: number };

export interface PassOptions {
  /** Claims in flight at once; each follows its job's chain of next entries. */
  readonly concurrency?: number;
}

/** The end of the claim window: the end of the minute that now + lookahead falls in. */
export function horizonOf(now: Date, lookaheadMs: number): { minute: string; end: Date } {
  const horizon = now.getTime() + lookaheadMs;
  return {
    minute: minuteOf(new Date(horizon)),
    end: new Date(Math.floor(horizon / MINUTE_MS) * MINUTE_MS + MINUTE_MS),
  };
}

/**
 * One dispatcher pass over a shard: take the lease, sweep the buckets from
 * the watermark (or two minutes back) to the horizon, advance the watermark
 * under the fence, release the lease.
 */
export async function dispatchShard(
  engine: Engine,
  shard: number,
  owner: string,
  options: PassOptions = {},
): Promise<PassResult> {
  const now = engine.clock();
  const lease = await acquireShardLease(engine, shard, owner, now);
  if (lease === null) return { shard, outcome: "lease-held" };
  if (lease.tookOver) {
    engine.obs.metrics.add(METRICS.leaseTakeovers, 1, "Count", { shard: String(shard) });
    engine.obs.log.warn("took over an expired shard lease", { shard, fence: lease.fence });
  }
  const horizon = horizonOf(now, engine.settings.lookaheadMs);
  const resweepFrom = now.getTime() - RESWEEP_MS;
  const afterWatermark = lease.watermark
    ? new Date(`${lease.watermark}:00.000Z`).getTime() + MINUTE_MS
    : resweepFrom;
  const from = new Date(
    Math.max(Math.min(afterWatermark, resweepFrom), now.getTime() - MAX_CATCH_UP_MS),
  );
  try {
    const stats = await sweepShard(engine, shard, {
      from,
      to: new Date(horizon.end.getTime() - 1),
      now,
      horizonEnd: horizon.end,
      lease: { shard, fence: lease.fence },
      concurrency: options.concurrency,
    });
    await advanceWatermark(engine, lease, horizon.minute);
    await releaseShardLease(engine, lease, engine.clock());
    return { shard, outcome: "swept", tookOver: lease.tookOver, fence: lease.fence, ...stats };
  } catch (error) {
    if (error instanceof FenceLostError) {
      engine.obs.metrics.add(METRICS.fenceLost, 1, "Count", { component: "dispatcher" });
      engine.obs.log.warn("lost the shard lease mid-pass", { shard, fence: lease.fence });
      return { shard, outcome: "fence-lost", fence: lease.fence };
    }
    throw error;
  }
}

export interface SweepOptions {
  readonly from: Date;
  readonly to: Date;
  readonly now: Date;
  readonly horizonEnd: Date;
  /** Without a lease the sweep still claims exclusively (the due entry's delete decides), just unfenced. */
  readonly lease?: { readonly shard: number; readonly fence: number };
  readonly concurrency?: number | undefined;
}

/** Claims every due entry of the shard's buckets between two instants and enqueues the runs. */
export async function sweepShard(
  engine: Engine,
  shard: number,
  options: SweepOptions,
): Promise<SweepStats> {
  const stats: SweepStats = { entries: 0, runs: 0, skipped: 0, lost: 0, stale: 0, sendFailures: 0 };
  const sender = new RunSender(engine, stats);
  for (const minute of bucketsBetween(options.from, options.to)) {
    const pk = bucketKeyForMinute(minute, shard);
    let startKey: Record<string, unknown> | undefined;
    do {
      const page = await engine.doc.send(
        new QueryCommand({
          TableName: engine.tables.jobs,
          KeyConditionExpression: "pk = :pk",
          ExpressionAttributeValues: { ":pk": pk },
          ConsistentRead: true,
          ExclusiveStartKey: startKey,
        }),
      );
      const entries = (page.Items ?? []).map(decodeDueEntry);
      await forEachConcurrently(entries, options.concurrency ?? 16, (entry) =>
        claimChain(engine, entry, options, stats, sender),
      );
      await sender.flush();
      startKey = page.LastEvaluatedKey;
    } while (startKey);
  }
  await sender.flush();
  return stats;
}

/** Claims an entry and then, while the job's next entry is inside the horizon, that one too. */
export async function claimChain(
  engine: Engine,
  first: DueEntry,
  options: Pick<SweepOptions, "now" | "horizonEnd" | "lease">,
  stats: SweepStats,
  sender: RunSender,
): Promise<void> {
  let entry: DueEntry | null = first;
  while (entry !== null) {
    stats.entries++;
    const result = await claimDueEntry(engine, entry, {
      now: options.now,
      horizonEnd: options.horizonEnd,
      ...(options.lease ? { lease: options.lease } : {}),
    });
    if (result.outcome === "lost") {
      stats.lost++;
      return;
    }
    if (result.outcome === "stale") {
      stats.stale++;
      return;
    }
    stats.runs += result.runs.length;
    stats.skipped += result.skipped;
    await sender.add(result.runs);
    const next = result.next;
    entry = next !== null && new Date(next.dueAt) < options.horizonEnd ? next : null;
  }
}

/**
 * Buffers claimed runs and sends them ten to a batch. A failed send is not
 * fatal: the runs are QUEUED in the table and the reaper sends them again.
 */
export class RunSender {
  private pending: Run[] = [];

  constructor(
    private readonly engine: Engine,
    private readonly stats: Pick<SweepStats, "sendFailures">,
    private readonly onClaimed?: (runs: readonly Run[]) => void,
  ) {}

  async add(runs: readonly Run[]): Promise<void> {
    this.onClaimed?.(runs);
    this.pending.push(...runs);
    if (this.pending.length >= 10) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    try {
      await sendRuns(
        this.engine.sqs,
        this.engine.queues,
        batch.map((run) => ({ message: runMessageOf(run), dueAt: new Date(run.dueAt) })),
        // Delays count from the moment of sending: a pass that took seconds must not send them late.
        this.engine.clock(),
      );
    } catch (error) {
      this.stats.sendFailures += batch.length;
      this.engine.obs.log.error("could not enqueue claimed runs; the reaper will resend them", {
        runs: batch.map((r) => r.runId),
        error: String(error),
      });
    }
  }
}

export async function forEachConcurrently<T>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let index = 0;
  const lanes = Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    while (index < items.length) {
      const item = items[index++];
      if (item !== undefined) await work(item);
    }
  });
  await Promise.all(lanes);
}
