/** Time is always a parameter: production passes `systemClock`, tests pass a fixed or offset clock. */
export type Clock = () => Date;

export const systemClock: Clock = () => new Date();

/** A clock `offsetMs` ahead of real time: lets integration tests live in the future while SQS delays stay real. */
export function offsetClock(offsetMs: number): Clock {
  return () => new Date(Date.now() + offsetMs);
}

/** A manually driven clock for unit tests. */
export function manualClock(
  start: Date,
): Clock & { set(at: Date): void; advance(ms: number): void } {
  let current = start.getTime();
  const clock = () => new Date(current);
  clock.set = (at: Date) => {
    current = at.getTime();
  };
  clock.advance = (ms: number) => {
    current += ms;
  };
  return clock;
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
