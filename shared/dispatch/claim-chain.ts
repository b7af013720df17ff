import type { Engine } from "../engine.js";
import type { DueEntry } from "../model.js";
import { type ClaimResult, claimDueEntry } from "./claim.js";
import type { RunSender } from "./run-sender.js";
import { fanOutTrigger } from "./trigger-fan-out.js";

/** What a sweep (or a fast-path claim) did, counted entry by entry. */
export interface SweepStats {
  entries: number;
  runs: number;
  skipped: number;
  lost: number;
  stale: number;
  sendFailures: number;
  /** Entries no claim could process, moved to the shard's set-aside list. */
  setAside: number;
  /** Entries that failed for a transient reason and stay in their bucket for the next pass. */
  failed: number;
}

export interface ChainOptions {
  readonly now: Date;
  readonly horizonEnd: Date;
  /** Each claim's reach (`ClaimOptions.reachEnd`); absent, the claim's own. */
  readonly reachEnd?: Date;
}

export const emptySweepStats = (): SweepStats => ({
  entries: 0,
  runs: 0,
  skipped: 0,
  lost: 0,
  stale: 0,
  sendFailures: 0,
  setAside: 0,
  failed: 0,
});

/** What a pass does with the entries a chain leaves in their buckets. */
export interface LeftEntries {
  /** A claim that threw: the entry is still in its bucket. */
  readonly onFailure: (entry: DueEntry, error: unknown) => Promise<void>;
  /** A claim that committed with its entry's delete failed (a plain claim's): the entry stays. */
  readonly onEntryLeft: (entry: DueEntry) => void;
}

/**
 * Claims an entry and then, while the job's next entry is inside the horizon,
 * that one too; a `trigger` entry is fanned out to its dependents instead. With `left` (a pass), a
 * claim that throws ends the chain there and is handed over (the failed entry is still in its
 * bucket), and so is an entry a committed claim could not delete; without, a claim that throws
 * throws.
 */
export async function claimChain(
  engine: Engine,
  first: DueEntry,
  options: ChainOptions,
  stats: SweepStats,
  sender: RunSender,
  left?: LeftEntries,
): Promise<void> {
  const onFailure = left?.onFailure;
  if (first.kind === "trigger") {
    // An upstream run's ending whose worker did not fan it out (it died, or the fan-out failed).
    stats.entries++;
    try {
      const fanned = await fanOutTrigger(engine, first);
      stats.runs += fanned.queued;
      stats.skipped += fanned.skipped;
    } catch (error) {
      if (onFailure === undefined) throw error;
      await onFailure(first, error);
    }
    return;
  }
  let entry: DueEntry | null = first;
  while (entry !== null) {
    stats.entries++;
    let result: ClaimResult;
    try {
      result = await claimDueEntry(engine, entry, {
        now: options.now,
        horizonEnd: options.horizonEnd,
        reachEnd: options.reachEnd,
      });
    } catch (error) {
      if (onFailure === undefined) throw error;
      await onFailure(entry, error);
      return;
    }
    if (result.outcome === "lost") {
      stats.lost++;
      return;
    }
    if (result.outcome === "stale") {
      stats.stale++;
      return;
    }
    if (result.entryLeft) left?.onEntryLeft(entry);
    stats.runs += result.runs.length;
    stats.skipped += result.skipped;
    await sender.add(result.runs);
    const next = result.next;
    entry = next !== null && new Date(next.dueAt) < options.horizonEnd ? next : null;
  }
}
