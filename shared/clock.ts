/** Time is always a parameter: production passes `systemClock`, tests pass a fixed or offset clock. */
export type Clock = () => Date;

export const systemClock: Clock = () => new Date();

/** A clock `offsetMs` ahead of real time: lets integration tests live in the future while SQS delays stay real. */
export function offsetClock(offsetMs: number): Clock {
  return () => new Date(Date.now() + offsetMs);
}

export const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });

/**
 * How far behind its own line a pass reads when a position recorded by another pass lies ahead
 * of it (the reaper's cursor, the dispatcher's `sweepFrom`): a clock ahead recorded it, or this
 * one went back, and entries written since on the right clock may lie behind it.
 */
export const CLOCK_DISAGREEMENT_MS = 15 * 60_000;

/**
 * How long a run ran, from its start (`startedAt`, written by the clock of the process that
 * started it) to `end` (this process's clock): never negative. A run started by a process whose
 * clock runs ahead, and ended by another's (an async target's completion or a cancel in the API),
 * or by a clock that went back, ends before it started by those clocks; it counts 0.
 */
export function runDurationMs(startedAt: string, end: Date): number {
  return Math.max(0, end.getTime() - Date.parse(startedAt));
}
