import { sleep } from "../clock.js";
import { RoundRobin } from "../concurrency.js";
import { PRIORITIES, type Priority } from "../model.js";

/**
 * At most `size` runs at once. A free slot goes to a waiting run of a queue below high that is
 * under its reserved share (lowest first), else to the highest priority with a run waiting; within
 * a priority, to the waiting tenant whose backlog in the loop is smallest (the messages it holds,
 * its runs in progress included; ties in turn), so a tenant whose runs fill the slots, or that has
 * thousands waiting, does not take the next one from a tenant that has a few. Free slots are
 * handed out once the runs that became due at the same moment have all asked for one (on the
 * next turn of the event loop), so that the order among them is this one, not the order their
 * timers fired in.
 */
export class FairSlots {
  busy = 0;
  /** Runs holding a slot, by priority. */
  private readonly running: Record<Priority, number> = { high: 0, normal: 0, low: 0 };
  /** Messages held (waiting for their second or a slot, or running), by priority. */
  private readonly holding: Record<Priority, number> = { high: 0, normal: 0, low: 0 };
  private readonly waiting: Record<Priority, RoundRobin<() => void>> = {
    high: new RoundRobin(),
    normal: new RoundRobin(),
    low: new RoundRobin(),
  };
  /**
   * Slots a queue below high is guaranteed while it has runs: its share of the slots, rounded down,
   * so a loop with fewer than 1/share slots reserves none and keeps strict priority order.
   */
  private readonly reserved: number;
  private granting = false;

  constructor(
    private readonly size: number,
    share: number,
    private readonly backlogOf: (tenantId: string) => number,
  ) {
    this.reserved = Math.floor(size * share);
  }

  hold(priority: Priority): void {
    this.holding[priority]++;
  }

  unhold(priority: Priority): void {
    this.holding[priority]--;
  }

  /** How many runs short of its share a queue below high holds: what it is received for first. */
  owed(priority: Priority): number {
    return priority === "high" ? 0 : Math.max(0, this.reserved - this.holding[priority]);
  }

  async acquire(priority: Priority, tenantId: string): Promise<void> {
    await new Promise<void>((resolve) => {
      this.waiting[priority].push(tenantId, () => {
        this.running[priority]++;
        resolve();
      });
      if (this.busy < this.size && !this.granting) {
        this.granting = true;
        setImmediate(() => this.grant());
      }
    });
  }

  /** A run is done with its slot: it goes to the next waiting run, if any. */
  release(priority: Priority): void {
    this.running[priority]--;
    const next = this.nextWaiting();
    if (next === undefined) this.busy--;
    else this.waiting[next].shift(this.backlogOf)?.();
  }

  private grant(): void {
    this.granting = false;
    while (this.busy < this.size) {
      const next = this.nextWaiting();
      if (next === undefined) return;
      this.busy++;
      this.waiting[next].shift(this.backlogOf)?.();
    }
  }

  /** Whose waiting run gets a freed slot. */
  private nextWaiting(): Priority | undefined {
    const guarded = (["low", "normal"] as const).find(
      (p) => this.running[p] < this.reserved && this.waiting[p].size > 0,
    );
    return guarded ?? PRIORITIES.find((p) => this.waiting[p].size > 0);
  }
}

/**
 * One timer per instant that held messages are due at: every message due then wakes in the same
 * callback, so all of them ask for a slot before any is handed out (FairSlots), whatever order
 * their separate timers would have fired in.
 */
export class DueTimers {
  private readonly timers = new Map<number, Promise<void>>();

  /** Until `dueMs` (resolved early by a stop). */
  until(dueMs: number, nowMs: number, signal: AbortSignal): Promise<void> {
    let timer = this.timers.get(dueMs);
    if (timer === undefined) {
      timer = sleep(dueMs - nowMs).then(() => {
        this.timers.delete(dueMs);
      });
      this.timers.set(dueMs, timer);
    }
    const due = timer;
    return new Promise<void>((resolve) => {
      if (signal.aborted) return resolve();
      const done = () => {
        signal.removeEventListener("abort", done);
        resolve();
      };
      signal.addEventListener("abort", done, { once: true });
      void due.then(done);
    });
  }
}
