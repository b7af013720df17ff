import { performance } from "node:perf_hooks";
import type { Engine } from "../engine.js";
import { SchedulerError } from "../errors.js";

declare module "../errors.js" {
  interface ErrorContexts {
    /**
     * The run's lease, as its worker last wrote it, ran out on that worker (its heartbeats failed
     * since, or did not come): the worker no longer holds the run. The reason of the handler's
     * AbortSignal.
     */
    readonly lease_lapsed: { readonly leaseUntil: string };
  }
}

export class LeaseLapsedError extends SchedulerError<"lease_lapsed"> {
  override readonly name = "LeaseLapsedError";

  constructor(leaseUntil: Date) {
    const at = leaseUntil.toISOString();
    super(
      "lease_lapsed",
      `the run's lease lapsed at ${at} before a heartbeat extended it: another worker may run it now`,
      { leaseUntil: at },
    );
  }
}

/** The lease a worker holds its run under, as it last wrote it. */
export interface LeaseWatch {
  /**
   * A heartbeat wrote the run's lease on to `leaseUntil`, computed from `readAt`, the clock's
   * reading it was sent with, taken at `sentAt` (`performance.now()`).
   */
  extendTo(leaseUntil: Date, readAt: Date, sentAt: number): void;
  /**
   * Whether the lease has run out, aborting the handler if the timer has not yet: a process that
   * froze past it wakes with its heartbeat's timer and the watch's both due, and the beat must not
   * write a fresh lease for a run this worker no longer holds.
   */
  lapsed(): boolean;
  stop(): void;
}

/**
 * Aborts `controller` with a LeaseLapsedError once the run's lease, as this worker last wrote it,
 * has run out. A worker whose heartbeats fail (a throttled table, DynamoDB out of reach) otherwise
 * runs its handler on to the job's timeout, while the run, its lease lapsed, is taken over by
 * another worker: the reaper re-sends it once its clock reads the lease 5 s gone
 * (`REAPER_SETTLE_MS`), and a redelivery starts it once its worker's clock reads the lease gone.
 *
 * The lease runs out a lease after the clock reading it was written from, measured on this
 * process's monotonic clock (a timer), not by reading the host's clock again: a step of that clock
 * mid-run (NTP, a test's shifted clock) would stop a healthy run early or keep a stale one past the
 * moment the others read its lease lapsed, which depends on that reading alone. Without a margin: a
 * margin for a host ahead would have to exceed what a heartbeat leaves of a lease at the shortest
 * lease (4 s of 6 s), and would stop healthy runs at their next beat.
 */
export function watchLease(
  engine: Engine,
  controller: AbortController,
  leaseUntil: Date,
): LeaseWatch {
  let until = leaseUntil;
  // The lease's end on the monotonic clock.
  let endsAt = performance.now() + (leaseUntil.getTime() - engine.clock().getTime());
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  const arm = () => {
    clearTimeout(timer);
    if (stopped || controller.signal.aborted) return;
    const leftMs = endsAt - performance.now();
    if (leftMs < 0) controller.abort(new LeaseLapsedError(until));
    else timer = setTimeout(arm, leftMs + 1);
  };
  arm();
  return {
    extendTo(next, readAt, sentAt) {
      const nextEndsAt = sentAt + (next.getTime() - readAt.getTime());
      if (nextEndsAt <= endsAt) return;
      until = next;
      endsAt = nextEndsAt;
      arm();
    },
    lapsed() {
      if (!stopped && !controller.signal.aborted && endsAt - performance.now() < 0)
        controller.abort(new LeaseLapsedError(until));
      return controller.signal.reason instanceof LeaseLapsedError;
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
