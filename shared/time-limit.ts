/**
 * A time limit on waiting for fetch, which ends the wait itself, not only through an abort.
 *
 * Node 20's fetch can lose an abort: the signal `AbortSignal.any` makes is held weakly by its
 * sources, and the one a `Request` makes for its init's signal weakly by that signal, so either
 * may be collected while the request is under way, and then a receiver that never answers, or
 * sends its headers and trickles its body, is waited on past any limit (the client's
 * `boundedFetch` hung so). What waits under a TimeLimit waits for `within`, which rejects when
 * the time is up or the parent signal aborts, whether the fetch heeds its signal or not; the
 * signal still aborts the request, so that its connection is closed when the abort does arrive.
 */
export interface TimeLimit {
  /**
   * Aborted when the time is up (a TimeoutError, as `AbortSignal.timeout`'s) or the parent
   * aborts (the parent's reason): the signal for the fetch, so that it is cleaned up.
   */
  readonly signal: AbortSignal;
  /** Whether the time ran out (rather than the parent aborting first). */
  readonly expired: boolean;
  /** `work`'s outcome, or the signal's reason as a rejection as soon as it aborts. */
  within<T>(work: Promise<T>): Promise<T>;
  /** Stops the timer and stops following the parent; call it once the wait is over. */
  end(): void;
}

/** A limit of `ms` milliseconds that also ends when `parent` (e.g. the run's signal) aborts. */
export function timeLimit(ms: number, parent?: AbortSignal): TimeLimit {
  // Held here and by the timer and the parent's listener below, so nothing about it is weak.
  const controller = new AbortController();
  let expired = false;
  const stop = (reason: unknown) => {
    if (!controller.signal.aborted) controller.abort(reason);
  };
  const timer = setTimeout(() => {
    if (controller.signal.aborted) return;
    expired = true;
    stop(new DOMException("The operation was aborted due to timeout", "TimeoutError"));
  }, ms);
  const followParent = () => stop(parent?.reason);
  if (parent?.aborted) followParent();
  else parent?.addEventListener("abort", followParent, { once: true });
  return {
    signal: controller.signal,
    get expired() {
      return expired;
    },
    // Each wait listens for the abort only while it lasts: a race with one promise for the whole
    // limit held every wait's outcome (each chunk of a body read 1 byte at a time) until the end.
    within: (work) =>
      new Promise((resolve, reject) => {
        const { signal } = controller;
        const onAbort = () => reject(signal.reason);
        if (signal.aborted) onAbort();
        else signal.addEventListener("abort", onAbort, { once: true });
        // Followed even once aborted: a failure of work waited on no more is handled here.
        work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
      }),
    end: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", followParent);
    },
  };
}
