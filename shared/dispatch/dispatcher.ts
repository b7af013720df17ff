import { CLOCK_DISAGREEMENT_MS } from "../clock.js";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { FenceLostError } from "../errors.js";
import { bucketsBetween, minuteOf } from "../keys.js";
import { METRICS } from "../observability.js";
import { dueBucketPages } from "../storage/due-entries.js";
import {
  acquireShardLease,
  endPass,
  endScanningPass,
  releaseShardLease,
  type ShardLease,
  type UnfinishedScan,
} from "../storage/lease.js";
import { sweepUnpositionedBacklog } from "./backlog-scan.js";
import { type ChainOptions, emptySweepStats, type SweepStats } from "./claim-chain.js";
import { claimPages, earliest } from "./claim-pages.js";
import { lookbackBuckets, sweepLookback } from "./lookback.js";

const MINUTE_MS = 60_000;
/**
 * Buckets from this far before a pass's start are read again by the next pass:
 * a writer may file an entry into the current minute's bucket after the pass
 * read it (clock skew, a slow write, a pass's own catch-up entries).
 */
const RESWEEP_MS = 2 * MINUTE_MS;
/**
 * A backlog (buckets not read since an outage of passes) is read at most this
 * many buckets per pass, and for at most half a lease; the next pass goes on
 * where this one stopped, so an outage of any length is swept in the end.
 */
export const MAX_BACKLOG_BUCKETS_PER_PASS = 2_880;
/** Backlog buckets read between checks of the pass's time budget, 8 at a time. */
const BACKLOG_CHUNK = 64;
const BACKLOG_CONCURRENCY = 8;

export type PassResult =
  | ({
      readonly shard: number;
      readonly outcome: "swept";
      readonly tookOver: boolean;
      readonly fence: number;
      /**
       * Where the next pass starts: before now when a backlog or a failed entry
       * remains; null while the scan for a shard's first backlog is unfinished,
       * so the next pass goes on with it.
       */
      readonly sweepFrom: string | null;
      /** Backlog buckets read by this pass. */
      readonly backlogBuckets: number;
      /** Buckets read again 15 minutes behind the line (see `lookbackBuckets`). */
      readonly lookbackBuckets: number;
      /** Due entries found there: filed behind the line, by a writer whose clock is behind. */
      readonly lookbackEntries: number;
    } & SweepStats)
  | { readonly shard: number; readonly outcome: "lease-held" }
  | { readonly shard: number; readonly outcome: "fence-lost"; readonly fence: number };

export interface PassOptions {
  /** Claims in flight at once; each follows its job's chain of next entries. */
  readonly concurrency?: number;
  /** Bounds the backlog one pass reads; defaults to MAX_BACKLOG_BUCKETS_PER_PASS. */
  readonly maxBacklogBuckets?: number;
}

/** The end of the claim window: the end of the minute that now + lookahead falls in. */
export function horizonOf(now: Date, lookaheadMs: number): { minute: string; end: Date } {
  const horizon = now.getTime() + lookaheadMs;
  return {
    minute: minuteOf(new Date(horizon)),
    end: new Date(Math.floor(horizon / MINUTE_MS) * MINUTE_MS + MINUTE_MS),
  };
}

const floorMinute = (ms: number) => Math.floor(ms / MINUTE_MS) * MINUTE_MS;
const minuteMs = (minute: string) => Date.parse(`${minute}:00.000Z`);

/**
 * Where the recent buckets a pass claims after its backlog begin: at the first minute that begins
 * a minute or more after the backlog's time budget ends (`deadlineMs`, half a lease from the
 * pass's `now`: the backlog loop starts no chunk past it), or at the horizon's end when that comes
 * first. The buckets before hold what falls due while the backlog may still be read, and go first;
 * those from here on, due at least a minute after the budget, wait for the backlog and the
 * look-back, whose entries are late already. The minute is their allowance for the backlog chunk
 * begun before the budget ended (up to 64 buckets, claimed to their end) and the look-back (up to
 * 15 buckets), so an entry here is still claimed before it is due.
 */
function aheadFromMs(deadlineMs: number, horizonEnd: Date): number {
  return Math.min(horizonEnd.getTime(), floorMinute(deadlineMs + MINUTE_MS) + MINUTE_MS);
}

/**
 * Where a pass starts reading: where the last completed pass said (two minutes
 * before it began, or the rest of a backlog, or a bucket with a failed entry),
 * or well behind this pass's window when that lies ahead of it (a clock ahead
 * recorded it); for a lease last written without that, the watermark's next
 * minute, or two minutes back when that is later. Null for a shard no pass has
 * completed on: its backlog has no known start, so the pass finds it by a scan.
 */
function sweepStartMs(lease: ShardLease, recentFromMs: number): number | null {
  if (lease.sweepFrom) {
    const recorded = minuteMs(lease.sweepFrom);
    return recorded > recentFromMs ? recentFromMs - CLOCK_DISAGREEMENT_MS : recorded;
  }
  if (lease.watermark) return Math.min(minuteMs(lease.watermark) + MINUTE_MS, recentFromMs);
  return null;
}

/**
 * One dispatcher pass over a shard: take the lease; sweep the recent buckets
 * (two minutes back to the horizon) in two parts around what is late already:
 * first those due before the backlog's time budget can end and a minute on
 * (`aheadFromMs`), then any backlog left by passes that did not run or did not
 * complete (bounded per pass) and the buckets 15 minutes behind the line it
 * moves on (`lookbackBuckets`: what writers behind the passes' clocks filed
 * there), then the rest of the window; record where the next pass starts and
 * release the lease. A due entry that cannot be claimed does not stop the pass
 * (see `sweepBuckets`), and the lease is released however the pass ends, so the
 * next tick need not wait for it to lapse. A pass whose lease lapsed and was
 * taken over claims on, racing the new owner entry by entry (a claim needs no
 * lease: the due entry's delete lets one claimer through), and learns it at its
 * end write, which records nothing and releases nothing.
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
  let ended = false;
  try {
    const pass = await sweepPass(engine, lease, now, options);
    if (pass.sweepFrom === null) {
      await endScanningPass(engine, lease, pass.scan, engine.clock());
    } else {
      await endPass(
        engine,
        lease,
        { watermark: pass.watermark, sweepFrom: pass.sweepFrom },
        engine.clock(),
      );
    }
    ended = true;
    return {
      shard,
      outcome: "swept",
      tookOver: lease.tookOver,
      fence: lease.fence,
      sweepFrom: pass.sweepFrom,
      backlogBuckets: pass.backlogBuckets,
      lookbackBuckets: pass.lookbackBuckets,
      lookbackEntries: pass.lookbackEntries,
      ...pass.stats,
    };
  } catch (error) {
    if (error instanceof FenceLostError) {
      ended = true;
      engine.obs.metrics.add(METRICS.fenceLost, 1, "Count", { component: "dispatcher" });
      engine.obs.log.warn("lost the shard lease to a takeover; the pass records nothing", {
        shard,
        fence: lease.fence,
      });
      return { shard, outcome: "fence-lost", fence: lease.fence };
    }
    engine.obs.log.error("dispatcher pass failed; the next pass starts where this one did", {
      shard,
      fence: lease.fence,
      error: String(error),
    });
    throw error;
  } finally {
    if (!ended) {
      await releaseShardLease(engine, lease, engine.clock()).catch((error: unknown) =>
        engine.obs.log.warn("could not release the shard lease; it lapses on its own", {
          shard,
          error: String(error),
        }),
      );
    }
  }
}

/** How often a pass in its backlog looks whether the budget has ended, to start the window's rest. */
const AHEAD_CHECK_MS = 1000;

async function sweepPass(
  engine: Engine,
  lease: ShardLease,
  now: Date,
  options: PassOptions,
): Promise<
  {
    stats: SweepStats;
    watermark: string;
    backlogBuckets: number;
    lookbackBuckets: number;
    lookbackEntries: number;
  } & ({ sweepFrom: string; scan?: never } | { sweepFrom: null; scan: UnfinishedScan })
> {
  const horizon = horizonOf(now, engine.settings.lookaheadMs);
  const recentFromMs = floorMinute(now.getTime() - RESWEEP_MS);
  const sweep = {
    now,
    horizonEnd: horizon.end,
    concurrency: options.concurrency,
  };
  const stats = emptySweepStats();
  const deadline = now.getTime() + engine.settings.leaseMs / 2;
  // What is due before the backlog's budget can end first, then what is late already (the
  // backlog, the look-back), then the rest of the window, due a minute or more after that budget
  // (see `aheadFromMs`): a late entry does not wait for every claim up to the horizon, minutes on.
  const aheadFrom = new Date(aheadFromMs(deadline, horizon.end));
  const dueSoon = bucketsBetween(new Date(recentFromMs), new Date(aheadFrom.getTime() - 1));
  const ahead =
    aheadFrom < horizon.end ? bucketsBetween(aheadFrom, new Date(horizon.end.getTime() - 1)) : [];
  let leftFrom = await sweepBuckets(engine, lease.shard, dueSoon, sweep, stats);
  /**
   * Claims what is late already, then the window's rest, however the first ends: a pass that fails
   * in its backlog still claims its whole window, as when the window went first (the failure is
   * thrown after it). The rest starts at the backlog's budget at the latest, beside a chunk still
   * claiming (or a read that hangs): the pass's Lambda stops a lease after the pass began (a
   * minute at the least), and a pass stopped there in its backlog would leave the rest, due from
   * 90 s on, to a pass a tick or two later. The rest lies past the line, so its left bucket moves
   * neither the look-back's range nor `sweepFrom`; it is recorded with the others all the same.
   */
  async function overdueThenAhead<T>(
    overdue: () => Promise<T>,
  ): Promise<{ value: T; aheadLeft: string | null }> {
    let aheadSweep: Promise<string | null> | undefined;
    const sweepAhead = () => {
      if (aheadSweep === undefined) {
        aheadSweep = sweepBuckets(engine, lease.shard, ahead, sweep, stats);
        // Awaited below; until then a failure must not count as unhandled.
        aheadSweep.catch(() => undefined);
      }
      return aheadSweep;
    };
    // Read on the engine's clock, as the budget is: a second's lag is nothing beside the minute.
    const atBudget = setInterval(() => {
      if (engine.clock().getTime() >= deadline) void sweepAhead();
    }, AHEAD_CHECK_MS);
    atBudget.unref();
    let value: T;
    try {
      value = await overdue();
    } catch (error) {
      clearInterval(atBudget);
      await sweepAhead().catch((aheadError: unknown) =>
        engine.obs.log.warn("could not sweep the window's rest after the backlog failed", {
          shard: lease.shard,
          error: String(aheadError),
        }),
      );
      throw error;
    }
    clearInterval(atBudget);
    return { value, aheadLeft: await sweepAhead() };
  }

  const startMs = sweepStartMs(lease, recentFromMs);
  if (startMs === null) {
    const scan: UnfinishedScan = lease.scan ?? {
      from: null,
      before: minuteOf(new Date(recentFromMs)),
      leftFrom: null,
    };
    const { value: backlog, aheadLeft } = await overdueThenAhead(() =>
      sweepUnpositionedBacklog(engine, lease.shard, scan, deadline, sweep, stats),
    );
    leftFrom = earliest([leftFrom, aheadLeft, backlog.leftFrom, scan.leftFrom]);
    if (backlog.nextKey !== undefined) {
      const left = { ...scan, from: backlog.nextKey, leftFrom };
      const scanning = { backlogBuckets: 0, lookbackBuckets: 0, lookbackEntries: 0 };
      return { stats, watermark: horizon.minute, sweepFrom: null, scan: left, ...scanning };
    }
    // The buckets from the scan's bound on were read only as the recent windows of the passes
    // that ran meanwhile: the backlog sweep reads them from there. A bound another pass set came
    // from its clock, which may be ahead: writers on the right clock may have filed since in the
    // minutes before it, past what the scan had read, so the sweep reads back from further still.
    const boundMs = minuteMs(scan.before) - (lease.scan === null ? 0 : CLOCK_DISAGREEMENT_MS);
    const sweepFromMs = Math.min(
      boundMs,
      recentFromMs,
      leftFrom === null ? Number.POSITIVE_INFINITY : minuteMs(leftFrom),
    );
    return {
      stats,
      watermark: horizon.minute,
      sweepFrom: minuteOf(new Date(sweepFromMs)),
      backlogBuckets: 0,
      lookbackBuckets: 0,
      lookbackEntries: 0,
    };
  }

  const budget = options.maxBacklogBuckets ?? MAX_BACKLOG_BUCKETS_PER_PASS;
  const backlogEndMs = Math.min(recentFromMs, startMs + budget * MINUTE_MS);
  let nextMs = startMs;
  // Unread backlog, or a bucket where an entry failed for now, is where the next pass starts.
  const lineMs = (left: string | null) =>
    Math.min(nextMs, recentFromMs, left === null ? Number.POSITIVE_INFINITY : minuteMs(left));
  const { value: lookback, aheadLeft } = await overdueThenAhead(async () => {
    while (nextMs < backlogEndMs && engine.clock().getTime() < deadline) {
      const chunkEndMs = Math.min(backlogEndMs, nextMs + BACKLOG_CHUNK * MINUTE_MS);
      const chunk = bucketsBetween(new Date(nextMs), new Date(chunkEndMs - 1));
      const results = await mapConcurrently(chunk, BACKLOG_CONCURRENCY, (minute) =>
        sweepBuckets(engine, lease.shard, [minute], sweep, stats),
      );
      leftFrom = earliest([leftFrom, ...results]);
      nextMs = chunkEndMs;
    }
    // What writers behind the passes' clocks filed before the line, as far as the line moves on.
    const buckets = lookbackBuckets(startMs, lineMs(leftFrom));
    return { buckets, ...(await sweepLookback(engine, lease.shard, buckets, sweep, stats)) };
  });
  leftFrom = earliest([leftFrom, lookback.leftFrom, aheadLeft]);
  return {
    stats,
    watermark: horizon.minute,
    sweepFrom: minuteOf(new Date(lineMs(leftFrom))),
    backlogBuckets: Math.max(0, (nextMs - startMs) / MINUTE_MS),
    lookbackBuckets: lookback.buckets.length,
    lookbackEntries: lookback.entries,
  };
}

export interface SweepOptions extends ChainOptions {
  readonly from: Date;
  readonly to: Date;
  readonly concurrency?: number | undefined;
}

/** Claims every due entry of the shard's buckets between two instants and enqueues the runs. */
export async function sweepShard(
  engine: Engine,
  shard: number,
  options: SweepOptions,
): Promise<SweepStats> {
  const stats = emptySweepStats();
  await sweepBuckets(engine, shard, bucketsBetween(options.from, options.to), options, stats);
  return stats;
}

/**
 * Claims every due entry of the given minute buckets and enqueues the runs.
 * An entry whose claim fails is isolated, so the other entries (other tenants'
 * jobs) are still claimed on time: a failure that would repeat (the claim
 * cannot be planned or DynamoDB refuses its transaction) sets the entry aside
 * for operators; a transient one (contention that outlasted its retries, a
 * throttled or failing service) leaves it in place. Returns the earliest bucket
 * where an entry was left, which the next pass must read again. Only a bucket
 * that cannot be read stops the sweep.
 */
async function sweepBuckets(
  engine: Engine,
  shard: number,
  minutes: readonly string[],
  options: Pick<SweepOptions, "now" | "horizonEnd" | "concurrency">,
  stats: SweepStats,
): Promise<string | null> {
  return claimPages(engine, shard, dueBucketPages(engine, shard, minutes), options, stats);
}

async function mapConcurrently<T, R>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<R>,
): Promise<R[]> {
  const results: R[] = [];
  await forEachConcurrently(items, concurrency, async (item) => {
    results.push(await work(item));
  });
  return results;
}
