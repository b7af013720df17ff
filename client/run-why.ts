/**
 * Why a run is as it is, in one line, as the CLI's ERROR / REASON column and the console's run
 * tables show it: its reason, which for a dead run says why it is dead and quotes its last
 * attempt's error ("gave up after 2 attempts: HTTP 500: …", "non-retryable error: …"); else its
 * error (a failed run's, to be retried); null when it has neither. A reason that does not quote
 * the error (a run cancelled while its handler failed: "run cancelled", "job deleted") is followed
 * by it. The console bundles this module, so it imports nothing.
 */
export function runWhy({
  error,
  reason,
}: {
  readonly error: string | null;
  readonly reason: string | null;
}): string | null {
  if (reason === null) return error;
  if (error === null || quotes(reason, error)) return reason;
  return `${reason} (error: ${error})`;
}

/** Whether a reason holds the error, whole or, for a long one, its head and "…" (shared/retry.ts). */
function quotes(reason: string, error: string): boolean {
  if (reason.includes(error)) return true;
  if (!reason.endsWith("…")) return false;
  const head = reason.slice(0, -1);
  for (let at = head.indexOf(": "); at >= 0; at = head.indexOf(": ", at + 1)) {
    const quoted = head.slice(at + 2);
    if (quoted !== "" && error.startsWith(quoted)) return true;
  }
  return false;
}
