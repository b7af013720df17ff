import { PRIORITIES, type Priority } from "../model.js";

/** What a message met at its tenant's gate. */
export type GateAnswer = "passed" | "stopped" | "full";

/** How many messages may wait at one tenant's gate, and at all the gates together. */
export interface WaitingLimits {
  readonly perTenant: number;
  readonly total: number;
}

interface Gate {
  /** Messages held in the loop, wherever they are. */
  held: number;
  /** Messages past the gate: waiting for their second or a slot, or running. */
  passed: number;
  /** Waiting at the gate, by priority, oldest first. */
  readonly waiting: Record<Priority, (() => void)[]>;
  /** The tenant's concurrent-runs quota as last read; undefined until read, null: no limit. */
  cap: number | null | undefined;
}

/**
 * The worker loop's side of the concurrent-runs quota, and what makes it a fair queue on one
 * machine. A tenant with a cap has at most `cap` of its messages past its gate in this loop
 * (waiting for their second or a slot, or running); the rest wait at the gate, higher priority
 * first and in the order they came within one, with no timer and no request, until one of its
 * runs ends. Messages waiting at a gate do not count against the loop's capacity, so the loop
 * receives past a capped tenant's backlog to the other tenants' messages behind it, as SQS fair
 * queues deliver a quiet tenant's messages before a noisy one's backlog on AWS.
 *
 * A gate keeps at most `limits.perTenant` messages waiting, and the gates together
 * `limits.total`: a message past either is turned away (`enter` answers "full") for the loop to
 * hand back to SQS (hand-back.ts). Held, a backlog would fill the loop's hold of messages however
 * many it may hold, and the loop would stop receiving for every tenant until the backlog drained.
 *
 * The quota itself holds across every worker at start (shared/quotas/concurrency.ts): the gate
 * only keeps a tenant at its cap from spending this loop's slots, and the table's requests, on
 * runs that would be sent back.
 */
export class TenantGates {
  private readonly gates = new Map<string, Gate>();
  /** Messages waiting at all the gates. */
  private waiting = 0;
  /** By priority: the last message to meet its gate found it full (a capped tenant's backlog). */
  private readonly lastFull: Record<Priority, boolean> = { high: false, normal: false, low: false };

  /** `capRead` is told when a tenant's cap is read, as it may change what counts. */
  constructor(
    private readonly capOf: (tenantId: string) => Promise<number | null>,
    private readonly capRead: () => void = () => {},
    private readonly limits: WaitingLimits = { perTenant: Infinity, total: Infinity },
  ) {}

  /** A message of the tenant was received. */
  hold(tenantId: string): void {
    this.gate(tenantId).held++;
  }

  /** The message is done with (acknowledged, left for redelivery, or the loop stopped). */
  unhold(tenantId: string): void {
    const gate = this.gate(tenantId);
    gate.held--;
    if (gate.held === 0 && gate.passed === 0 && waitingAt(gate) === 0) this.gates.delete(tenantId);
  }

  /** Messages of the tenant the loop holds, wherever they are. */
  heldBy(tenantId: string): number {
    return this.gates.get(tenantId)?.held ?? 0;
  }

  /**
   * Messages that count against the loop's capacity: each tenant's held messages up to its cap.
   * A tenant whose cap is not read yet counts in full.
   */
  counted(): number {
    let sum = 0;
    for (const gate of this.gates.values())
      sum += gate.cap == null ? gate.held : Math.min(gate.held, gate.cap);
    return sum;
  }

  /**
   * Waits until the tenant has fewer than its cap past the gate (reading the cap, which is
   * cached), then passes: "passed". A stop ends the wait without passing: "stopped". A message
   * that would wait while its gate, or the gates together, hold as many waiting as they may does
   * not wait: "full".
   */
  async enter(tenantId: string, priority: Priority, signal: AbortSignal): Promise<GateAnswer> {
    const cap = await this.capOf(tenantId);
    const gate = this.gate(tenantId);
    this.setCap(gate, cap);
    this.lastFull[priority] = false;
    if (cap === null || (gate.passed < cap && waitingAt(gate) === 0)) {
      gate.passed++;
      return "passed";
    }
    if (signal.aborted) return "stopped";
    if (waitingAt(gate) >= this.limits.perTenant || this.waiting >= this.limits.total) {
      this.lastFull[priority] = true;
      return "full";
    }
    return new Promise<GateAnswer>((resolve) => {
      const queue = gate.waiting[priority];
      const onAbort = () => {
        const index = queue.indexOf(admit);
        if (index >= 0) {
          queue.splice(index, 1);
          this.waiting--;
        }
        resolve("stopped");
      };
      // The one who frees its place counts it (see `admit`).
      const admit = () => {
        signal.removeEventListener("abort", onAbort);
        resolve("passed");
      };
      signal.addEventListener("abort", onAbort, { once: true });
      queue.push(admit);
      this.waiting++;
    });
  }

  /**
   * Whether the last message of the priority (of any, without one) to meet its gate was turned
   * away, and messages still wait at a gate: the messages coming in are a capped tenant's
   * backlog, and the loop reads on past them.
   */
  turningAway(priority?: Priority): boolean {
    if (this.waiting === 0) return false;
    return priority === undefined
      ? PRIORITIES.some((p) => this.lastFull[p])
      : this.lastFull[priority];
  }

  /** A message that passed the gate is done: the next one waiting may pass. */
  leave(tenantId: string): void {
    const gate = this.gate(tenantId);
    gate.passed--;
    this.admit(gate);
  }

  /**
   * Reads the caps of the tenants with messages waiting at their gates again (the reads are
   * cached), so a quota raised or lifted reaches a backlog the loop already holds.
   */
  async refreshCaps(): Promise<void> {
    const waiting = [...this.gates].filter(([, gate]) => waitingAt(gate) > 0);
    await Promise.all(
      waiting.map(async ([tenantId, gate]) => {
        this.setCap(gate, await this.capOf(tenantId));
      }),
    );
  }

  private setCap(gate: Gate, cap: number | null): void {
    if (gate.cap === cap) return;
    gate.cap = cap;
    // A cap lifted or raised lets those waiting through first.
    this.admit(gate);
    this.capRead();
  }

  private admit(gate: Gate): void {
    while (gate.cap == null || gate.passed < gate.cap) {
      const next = PRIORITIES.find((p) => gate.waiting[p].length > 0);
      if (next === undefined) return;
      gate.passed++;
      this.waiting--;
      gate.waiting[next].shift()?.();
    }
  }

  private gate(tenantId: string): Gate {
    let gate = this.gates.get(tenantId);
    if (gate === undefined) {
      gate = { held: 0, passed: 0, waiting: { high: [], normal: [], low: [] }, cap: undefined };
      this.gates.set(tenantId, gate);
    }
    return gate;
  }
}

function waitingAt(gate: Gate): number {
  return gate.waiting.high.length + gate.waiting.normal.length + gate.waiting.low.length;
}
