/**
 * The fast-path window, a pure rule shared by the writers that claim at once
 * (create, resume, edit: `fast-path.ts`) and the worker, whose retries due
 * inside it go straight to a QUEUED run instead of a due entry; and the claim's
 * reach, how far ahead of now a claim queues a job's occurrences; and whether an entry whose job
 * is missing may still be a create's, put before its job.
 */
import { CLAIM_REACH_SECONDS, MIN_LOOKAHEAD_SECONDS } from "../config.js";
import type { DueEntry } from "../model.js";

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

/**
 * Whether an occurrence entry whose job is not there may be a create's, put before its job: a
 * create puts the entry first when it lies past its fast-path window (`now + lookahead + 2 min`,
 * at least 3 minutes ahead of the create's clock, at the shortest lookahead), and during a deploy
 * that raises `lookaheadSeconds` a pass may sweep that far before the API's instances have the new
 * setting. The pass's `now` comes after the create's reading when it began while the create wrote
 * (or on a clock a little ahead), so an entry at the window's very end is less than 3 minutes
 * ahead of it: a minute is left for that (`CREATE_SLACK_MS`). Removed, the entry would leave the
 * job naming one that is gone, for good. Left, it is claimed once the job's put lands, or removed
 * once due within 2 minutes (a create that died before its job's put).
 */
export function mayAwaitItsJob(entry: DueEntry, now: Date): boolean {
  const windowEnd = fastPathHorizonEnd(now, MIN_LOOKAHEAD_SECONDS * 1000).getTime();
  return entry.kind === "occurrence" && Date.parse(entry.dueAt) >= windowEnd - CREATE_SLACK_MS;
}

/**
 * How much later than a create's clock reading a pass may begin and still meet the entry the
 * create put before its job: the create's writes after its reading, and clocks apart.
 */
const CREATE_SLACK_MS = 60_000;
