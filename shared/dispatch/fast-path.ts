import type { Engine } from "../engine.js";
import type { DueEntry, Run } from "../model.js";
import { METRICS } from "../observability.js";
import { claimChain, emptySweepStats } from "./claim-chain.js";
import { fastPathHorizonEnd, needsFastPath } from "./fast-path-window.js";
import { RunSender } from "./run-sender.js";

/**
 * Claims a freshly written due entry at once, and the job's following entries
 * while they fall inside the fast-path horizon, then enqueues the runs. Used by
 * create, resume and edit. With `upTo`, only occurrences planned before it are
 * claimed: the chain stops there, and so does each claim's reach (an edit's
 * claim of what the old schedule has due).
 */
export async function dispatchNow(
  engine: Engine,
  entry: DueEntry,
  now: Date,
  upTo?: Date,
): Promise<Run[]> {
  const stats = emptySweepStats();
  const claimed: Run[] = [];
  const sender = new RunSender(engine, stats, (runs) => claimed.push(...runs));
  const bounds =
    upTo === undefined
      ? { horizonEnd: fastPathHorizonEnd(now, engine.settings.lookaheadMs) }
      : { horizonEnd: upTo, reachEnd: upTo };
  try {
    await claimChain(engine, entry, { now, ...bounds }, stats, sender);
  } finally {
    // Runs claimed before a later link of the chain failed are stored QUEUED: send them now.
    await sender.flush();
  }
  return claimed;
}

/** Sends runs just claimed outside a pass; a failed send leaves them QUEUED for the reaper, as in a pass. */
export async function sendClaimed(engine: Engine, runs: readonly Run[]): Promise<void> {
  const sender = new RunSender(engine, { sendFailures: 0 });
  await sender.add(runs);
  await sender.flush();
}

/** Claims a just-written entry now when it is due inside the fast-path window; else the dispatcher will. */
async function dispatchIfDueSoon(engine: Engine, entry: DueEntry | null): Promise<Run[]> {
  if (entry === null) return [];
  const now = engine.clock();
  if (!needsFastPath(new Date(entry.dueAt), now, engine.settings.lookaheadMs)) return [];
  return dispatchNow(engine, entry, now);
}

/**
 * The fast path of a write that has already committed (create, edit, resume). Every dispatcher
 * pass sweeps again from two minutes back to its horizon, so an entry this fails to claim is
 * claimed by the next pass: the failure is logged and counted, not made the request's failure
 * (the caller would see an error for a write that stands).
 */
export async function dispatchAfterCommit(
  engine: Engine,
  entry: DueEntry | null,
  operation: string,
): Promise<Run[]> {
  try {
    return await dispatchIfDueSoon(engine, entry);
  } catch (error) {
    engine.obs.metrics.add(METRICS.fastPathFailures, 1, "Count", { operation });
    engine.obs.log.warn("fast-path claim failed; the next dispatcher pass claims the entry", {
      operation,
      tenantId: entry?.tenantId,
      jobId: entry?.jobId,
      error: String(error),
    });
    return [];
  }
}
