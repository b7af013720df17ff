import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import {
  type RunSlot,
  readQuotaPartition,
  releaseRunSlot,
  takeRunSlot,
} from "../storage/tenant-quotas.js";
import { effectiveQuotas } from "./limits.js";
import { cachedQuotaOverride } from "./override-cache.js";

/** Free slots tried after one read (another start may win each at the same moment), and reads. */
const TAKE_ATTEMPTS = 4;
const SLOT_READS = 3;

export type SlotDecision =
  | { readonly kind: "taken"; readonly slot: RunSlot }
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
 * (its worker died), or an earlier start of this same run holds it (a
 * redelivery after a crash takes its own slot back). The quota is read with
 * the slots, so an override applies at the next start; lowering it leaves
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
  for (let read = 1; read <= SLOT_READS; read++) {
    const partition = await readQuotaPartition(engine, run.tenantId);
    // The fresh override wins; one that lifted the limit since leaves the last one standing.
    limit = effectiveQuotas(engine.settings.quotas, partition.override).concurrentRuns ?? limit;
    const own = partition.slots.find((s) => s.runId === run.runId && s.index < limit);
    const live = new Set(
      partition.slots
        .filter((s) => s.leaseUntil >= nowIso && s.runId !== run.runId)
        .map((s) => s.index),
    );
    // Runs in slots above a lowered quota count too: new runs wait until they end.
    if (own === undefined && live.size >= limit) return { kind: "full", limit };
    const free: number[] = [];
    for (let index = 0; index < limit; index++) if (!live.has(index)) free.push(index);
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
      const slot: RunSlot = {
        tenantId: run.tenantId,
        index,
        runId: run.runId,
        fence: run.fence,
        leaseUntil,
      };
      if (await takeRunSlot(engine, slot, now)) return { kind: "taken", slot };
    }
  }
  return { kind: "full", limit };
}

/**
 * Frees the slot of a start that found another start running its run under the same fence (a
 * duplicate delivery of the run's first start, or a start made again after a restore from a
 * backup), unless that start holds this very slot. A take that finds the run's slot takes that
 * slot again, and it is then the running start's to free (the slot names the run and fence
 * alone); two takes at the same moment each find none and take two, and this one's, the other
 * start's no more than anyone's, kept, would hold the tenant one run below its quota until its
 * lease lapsed. One consistent read, on this path only.
 */
export async function releaseSlotLostToStart(engine: Engine, slot: RunSlot): Promise<void> {
  const { slots } = await readQuotaPartition(engine, slot.tenantId);
  const otherTaken = slots.some(
    (s) => s.runId === slot.runId && s.fence === slot.fence && s.index !== slot.index,
  );
  if (otherTaken) await releaseRunSlot(engine, slot);
}
