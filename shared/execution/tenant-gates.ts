interface Gate {
  /** Messages held in the loop, wherever they are. */
  held: number;
  /** Messages past the gate: waiting for their second or a slot, or running. */
  passed: number;
  /** Waiting at the gate, oldest first. */
  readonly waiting: (() => void)[];
  /** The tenant's concurrent-runs quota as last read; undefined until read, null: no limit. */
  cap: number | null | undefined;
}

/**
 * The worker loop's side of the concurrent-runs quota, and what makes it a fair queue on one
 * machine. A tenant with a cap has at most `cap` of its messages past its gate in this loop
 * (waiting for their second or a slot, or running); the rest wait at the gate in the order they
 * came, with no timer and no request, until one of its runs ends. Messages waiting at a gate do
 * not count against the loop's capacity, so the loop receives past a capped tenant's backlog to
 * the other tenants' messages behind it, as SQS fair queues deliver a quiet tenant's messages
 * before a noisy one's backlog on AWS.
 *
 * The quota itself holds across every worker at start (shared/quotas/concurrency.ts): the gate
 * only keeps a tenant at its cap from spending this loop's slots, and the table's requests, on
 * runs that would be sent back.
 */
export class TenantGates {
  private readonly gates = new Map<string, Gate>();

  /** `capRead` is told when a tenant's cap is read, as it may change what counts. */
  constructor(
    private readonly capOf: (tenantId: string) => Promise<number | null>,
    private readonly capRead: () => void = () => {},
  ) {}

  /** A message of the tenant was received. */
  hold(tenantId: string): void {
    this.gate(tenantId).held++;
  }

  /** The message is done with (acknowledged, left for redelivery, or the loop stopped). */
  unhold(tenantId: string): void {
    const gate = this.gate(tenantId);
    gate.held--;
    if (gate.held === 0 && gate.passed === 0 && gate.waiting.length === 0)
      this.gates.delete(tenantId);
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
   * cached), then passes; returns how long it waited. A stop ends the wait without passing.
   */
  async enter(
    tenantId: string,
    signal: AbortSignal,
  ): Promise<{ passed: boolean; waitedMs: number }> {
    const cap = await this.capOf(tenantId);
    const gate = this.gate(tenantId);
    if (gate.cap !== cap) {
      gate.cap = cap;
      // A cap lifted or raised lets those waiting through first.
      this.admit(gate);
      this.capRead();
    }
    if (cap === null || (gate.passed < cap && gate.waiting.length === 0)) {
      gate.passed++;
      return { passed: true, waitedMs: 0 };
    }
    const since = performance.now();
    const passed = await new Promise<boolean>((resolve) => {
      const onAbort = () => {
        const index = gate.waiting.indexOf(admit);
        if (index >= 0) gate.waiting.splice(index, 1);
        resolve(false);
      };
      // The one who frees its place counts it (see `leave`).
      const admit = () => {
        signal.removeEventListener("abort", onAbort);
        resolve(true);
      };
      if (signal.aborted) return resolve(false);
      signal.addEventListener("abort", onAbort, { once: true });
      gate.waiting.push(admit);
    });
    return { passed, waitedMs: performance.now() - since };
  }

  /** A message that passed the gate is done: the next one waiting may pass. */
  leave(tenantId: string): void {
    const gate = this.gate(tenantId);
    gate.passed--;
    this.admit(gate);
  }

  private admit(gate: Gate): void {
    while (gate.waiting.length > 0 && (gate.cap == null || gate.passed < gate.cap)) {
      gate.passed++;
      gate.waiting.shift()?.();
    }
  }

  private gate(tenantId: string): Gate {
    let gate = this.gates.get(tenantId);
    if (gate === undefined) {
      gate = { held: 0, passed: 0, waiting: [], cap: undefined };
      this.gates.set(tenantId, gate);
    }
    return gate;
  }
}
