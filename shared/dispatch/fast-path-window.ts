/**
 * The fast-path window, a pure rule shared by the writers that claim at once
 * (create, resume, edit: `fast-path.ts`) and the worker, whose retries due
 * inside it go straight to a QUEUED run instead of a due entry; and the claim's
 * reach, how far ahead of now a claim queues a job's occurrences.
 */
import { CLAIM_REACH_SECONDS } from "../config.js";

/**
 * A dispatcher pass has already swept up to its horizon (now + lookahead, to
 * the end of that minute). An entry written below that line would wait for
 * the two-minute resweep or be missed, so writers claim it themselves. The
 * margin covers a minute of horizon rounding plus clock skew between hosts.
 */
const SWEPT_MARGIN_MS = 120_000;

export function fastPathHorizonEnd(now: Date, lookaheadMs: number): Date {
  return new Date(now.getTime() + lookaheadMs + SWEPT_MARGIN_MS);
}

export function needsFastPath(dueAt: Date, now: Date, lookaheadMs: number): boolean {
  return dueAt < fastPathHorizonEnd(now, lookaheadMs);
}

const CLAIM_REACH_MS = CLAIM_REACH_SECONDS * 1000;

/**
 * A claim queues the job's occurrences planned before this instant, not only
 * those before the horizon that found its entry: the claim's transaction (the
 * entry, the job, the next entry, the fence) is then shared by every
 * occurrence of the next 14 minutes. The next entry lies past them, and a pass
 * reaches it once its horizon does: with the default 300 s lookahead a
 * per-minute job is claimed every nine or ten minutes instead of every minute.
 * Every run a claim queues can still be sent at once with its delay.
 */
export function claimReachEnd(now: Date, horizonEnd: Date): Date {
  return new Date(Math.max(horizonEnd.getTime(), now.getTime() + CLAIM_REACH_MS));
}
