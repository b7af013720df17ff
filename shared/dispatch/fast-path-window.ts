/**
 * The fast-path window, a pure rule shared by the writers that claim at once
 * (create, resume, edit: `fast-path.ts`) and the worker, whose retries due
 * inside it go straight to a QUEUED run instead of a due entry.
 */

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
