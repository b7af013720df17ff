import { randomUUID } from "node:crypto";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import {
  joinRunSlot,
  slotsHeldPastLease,
  type TakenSlot,
  takeRunSlot,
} from "../storage/run-slots.js";
import { readQuotaPartition } from "../storage/tenant-quotas.js";
import { effectiveQuotas } from "./limits.js";
import { cachedQuotaOverride } from "./override-cache.js";

/** Free slots tried after one read (another start may win each at the same moment), and reads. */
const TAKE_ATTEMPTS = 4;
const SLOT_READS = 3;

export type SlotDecision =
  | { readonly kind: "taken"; readonly slot: TakenSlot }
  /** The tenant has no concurrent-runs limit: no slot is taken, read or written. */
  | { readonly kind: "unlimited" }
  | { readonly kind: "full"; readonly limit: number };

/** The tenant's concurrent-runs quota as this process caches it; null: no limit. */
export async function concurrentRunsCap(engine: Engine, tenantId: string): Promise<number | null> {
  return effectiveQuotas(engine.settings.quotas, await cachedQuotaOverride(engine, tenantId))
    .concurrentRuns;
}

/**
 * The tenant's concurrent-runs quota at a run's start: takes one of the
 * tenant's slots `0 … concurrentRuns − 1` for the run, under the run's lease,
 * or answers `full`. A slot is free when no run holds it, its lease lapsed
 * (its worker died) and its run is not read RUNNING under it with a live lease
 * of its own (`slotsHeldPastLease`), or an earlier start of this same run holds it (a
 * redelivery after a crash takes its own slot back). When another delivery of
 * this very start (the same fence) holds one, this take joins that slot, and
 * the delivery that does not run the run leaves it (storage/run-slots.ts).
 * The quota is read with the slots, so an override applies at the next start; lowering it leaves
 * running runs alone and makes new ones wait until enough have ended.
 * While the tenant has no limit (the override as this process caches it, read
 * again within 10 s) the start costs no request: `unlimited`, and no slot.
 */
export async function takeTenantSlot(engine: Engine, run: Run, now: Date): Promise<SlotDecision> {
  const leaseUntil =
    run.leaseUntil ?? new Date(now.getTime() + engine.settings.leaseMs).toISOString();
  const nowIso = now.toISOString();
  const cachedLimit = await concurrentRunsCap(engine, run.tenantId);
  if (cachedLimit === null) return { kind: "unlimited" };
  let limit: number = cachedLimit;
  // This delivery's take, told from another delivery's take of the same start on a slot both hold.
  const taker = randomUUID();
  for (let read = 1; read <= SLOT_READS; read++) {
    const partition = await readQuotaPartition(engine, run.tenantId);
    // The fresh override wins; one that lifted the limit since leaves the last one standing.
    limit = effectiveQuotas(engine.settings.quotas, partition.override).concurrentRuns ?? limit;
    // The run's slot under this start's fence first: another delivery's take of it, joined.
    const ownSlots = partition.slots.filter((s) => s.runId === run.runId && s.index < limit);
    const own = ownSlots.find((s) => s.fence === run.fence) ?? ownSlots[0];
    const others = partition.slots.filter((s) => s.runId !== run.runId);
    const live = new Set(others.filter((s) => s.leaseUntil >= nowIso).map((s) => s.index));
    const lapsed = others.filter((s) => s.leaseUntil < nowIso);
    // A lapsed slot is free only once its run no longer holds it: a run whose heartbeats keep its
    // own lease may have failed to extend the slot. Its run is read only when such slots could
    // fill the quota; below that, slots never taken are left and those are tried alone. Live
    // slots that fill it already (a quota lowered below the slots taken) leave nothing to read:
    // the run waits whatever the lapsed slots' runs say.
    const readLapsed =
      own === undefined &&
      lapsed.length > 0 &&
      live.size < limit &&
      live.size + lapsed.length >= limit;
    const held = readLapsed ? await slotsHeldPastLease(engine, lapsed, now) : new Set<number>();
    for (const index of held) live.add(index);
    // Runs in slots above a lowered quota count too: new runs wait until they end.
    if (own === undefined && live.size >= limit) return { kind: "full", limit };
    const unknown = new Set(readLapsed ? [] : lapsed.map((s) => s.index));
    const free: number[] = [];
    for (let index = 0; index < limit; index++)
      if (!live.has(index) && !unknown.has(index)) free.push(index);
    // From a random free slot on, so starts at the same moment mostly try different ones.
    const offset = Math.floor(engine.random() * free.length);
    const candidates =
      own !== undefined
        ? [own.index]
        : Array.from(
            { length: Math.min(free.length, TAKE_ATTEMPTS) },
            (_, k) => free[(offset + k) % free.length] ?? 0,
          );
    for (const index of candidates) {
      const slot: TakenSlot = {
        tenantId: run.tenantId,
        index,
        runId: run.runId,
        fence: run.fence,
        leaseUntil,
        taker,
      };
      const taken =
        own?.index === index && own.fence === run.fence
          ? await joinRunSlot(engine, slot, own.takers !== null)
          : await takeRunSlot(engine, slot, now);
      if (taken) return { kind: "taken", slot };
    }
  }
  return { kind: "full", limit };
}
