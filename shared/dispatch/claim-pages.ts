import { RoundRobin, Wakeup } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { minuteOf } from "../keys.js";
import type { DueEntry } from "../model.js";
import { METRICS } from "../observability.js";
import { type ChainOptions, claimChain, type SweepStats } from "./claim-chain.js";
import { isolateFailure } from "./failed-claims.js";
import { RunSender } from "./run-sender.js";

/**
 * Due entries a pass reads ahead of its claims to take turns between tenants: one tenant's entries
 * beyond this many ahead of another's (in one shard's sweep) still hold that one back. Counted by
 * `readAheadWeight`, so the entries held stay within some 25 MB of the dispatcher's memory.
 */
const READ_AHEAD_ENTRIES = 50_000;

/**
 * What an entry read ahead counts against READ_AHEAD_ENTRIES: one, and for a `trigger` entry one
 * more per 8 dependents it names (an id held takes about an eighth of an entry's memory: 55 KB for
 * an entry of 1,000 dependents, 0.4 KB for an occurrence's). Counted one each, 50,000 trigger
 * entries of a tenant's jobs with 1,000 dependents each would hold 2.7 GB, past the dispatcher's
 * 512 MB, and fail every pass of their shard.
 */
function readAheadWeight(entry: DueEntry): number {
  return 1 + Math.ceil((entry.fanOut?.dependents.length ?? 0) / 8);
}

/**
 * Claims every due entry of the pages and enqueues the runs, isolating each
 * failure (see `sweepBuckets` in dispatcher.ts); returns the earliest bucket where an entry was
 * left.
 *
 * Claims take turns between tenants: the pages are read ahead (up to
 * READ_AHEAD_ENTRIES entries) into one queue per tenant, and each claim lane
 * takes the next tenant's oldest entry, so one tenant's 50,000 entries in a
 * bucket do not hold back another tenant's 10 behind them in key order
 * (further behind, they wait for the claims of the entries past it). The
 * buckets of minutes already begun (at the pass's `now`) share one round of
 * turns: one tenant's overdue entries in an earlier minute do not hold back
 * another's due now in the next. A bucket of a minute still to come waits until
 * every entry before it is claimed and its runs sent, as in key order: what is
 * due first is claimed first, and a claim's chain files a job's next entry there
 * before it is read, so no second lane races the chain for it. The reads are the
 * same Query pages as in key order, so the fairness costs no request, only the
 * memory of the entries read ahead.
 */
export async function claimPages(
  engine: Engine,
  shard: number,
  pages: AsyncIterable<readonly DueEntry[]>,
  options: ChainOptions & { readonly concurrency?: number | undefined },
  stats: SweepStats,
): Promise<string | null> {
  const sender = new RunSender(engine, stats);
  let leftFrom: string | null = null;
  const onFailure = async (entry: DueEntry, error: unknown) => {
    const handling = await isolateFailure(engine, shard, entry, error, options.now);
    if (handling === "set-aside") stats.setAside++;
    // Filed again in a later bucket: it holds no bucket back for the next pass to read.
    else if (handling === "refiled") stats.failed++;
    else if (handling === "left") {
      stats.failed++;
      leftFrom = earliest([leftFrom, bucketMinuteOf(entry)]);
    }
  };
  // A committed claim's entry its delete left: the next pass reads the bucket again and removes
  // it (claim-plain.ts, `removeClaimedEntry`), as it would try a failed entry again. Counted as
  // such an entry is, so that an operator waiting for none left (deploy.md) sees it at once.
  const onEntryLeft = (entry: DueEntry) => {
    engine.obs.metrics.add(METRICS.dueEntryFailures, 1, "Count", { handling: "left" });
    leftFrom = earliest([leftFrom, bucketMinuteOf(entry)]);
  };
  const nowMinute = minuteOf(options.now);
  const begun = (entry: DueEntry) => {
    const minute = bucketMinuteOf(entry);
    return minute !== null && minute <= nowMinute;
  };
  const turns = new RoundRobin<DueEntry>();
  /** The read-ahead weight of the entries in `turns`. */
  let held = 0;
  const queued = new Wakeup();
  const taken = new Wakeup();
  let reading = true;
  let stopped: { error: unknown } | null = null;
  const stop = (error: unknown) => {
    stopped ??= { error };
    queued.notify();
    taken.notify();
  };

  let claiming = 0;
  /** Until every entry handed out so far is claimed (or the pass stops), then sends their runs. */
  const drained = async () => {
    while ((turns.size > 0 || claiming > 0) && stopped === null) await taken.wait();
    await sender.flush();
  };
  const read = async () => {
    let bucket: string | undefined;
    try {
      for await (const entries of pages) {
        for (const entry of entries) {
          // A minute still to come waits for the claims before it; begun ones take turns together.
          if (bucket !== undefined && entry.key.pk !== bucket && !begun(entry)) {
            queued.notify();
            await drained();
          }
          if (stopped !== null) return;
          bucket = entry.key.pk;
          turns.push(entry.tenantId, entry);
          held += readAheadWeight(entry);
        }
        queued.notify();
        while (held >= READ_AHEAD_ENTRIES && stopped === null) await taken.wait();
        if (stopped !== null) return;
      }
    } catch (error) {
      stop(error);
    } finally {
      reading = false;
      queued.notify();
    }
  };
  const lane = async () => {
    while (stopped === null) {
      const entry = turns.shift();
      if (entry !== undefined) held -= readAheadWeight(entry);
      if (entry === undefined) {
        if (!reading) return;
        // Nothing to claim until the next page: what is claimed waits in the sender for its
        // batch to fill, no longer than its linger (run-sender.ts), as it would beside claims.
        if (turns.size === 0 && reading && stopped === null) await queued.wait();
        continue;
      }
      claiming++;
      taken.notify();
      try {
        await claimChain(engine, entry, options, stats, sender, { onFailure, onEntryLeft });
      } catch (error) {
        stop(error);
      } finally {
        claiming--;
        taken.notify();
      }
    }
  };
  const lanes = Math.max(1, options.concurrency ?? 16);
  await Promise.all([read(), ...Array.from({ length: lanes }, lane)]);
  // Runs already claimed are sent even when the pass stops: they are committed.
  await sender.flush();
  if (stopped !== null) throw (stopped as { error: unknown }).error;
  return leftFrom;
}

function bucketMinuteOf(entry: DueEntry): string | null {
  // DUE#<yyyy-mm-ddTHH:MM>#<shard>
  const minute = entry.key.pk.split("#")[1];
  return minute !== undefined && Number.isFinite(Date.parse(`${minute}:00.000Z`)) ? minute : null;
}

export function earliest(minutes: readonly (string | null)[]): string | null {
  let first: string | null = null;
  for (const minute of minutes)
    if (minute !== null && (first === null || minute < first)) first = minute;
  return first;
}
