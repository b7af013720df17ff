import type { TenantQuotas } from "../config.js";
import type { Engine } from "../engine.js";
import { deleteRecountProgress } from "../storage/recount-progress.js";
import { slotsHeldPastLease } from "../storage/run-slots.js";
import {
  forgetQuotaUsage,
  type QuotaOverride,
  type RunSlot,
  readQuotaPartition,
  writeQuotaOverride,
} from "../storage/tenant-quotas.js";
import { effectiveQuotas } from "./limits.js";
import { forgetCachedQuotaOverride } from "./override-cache.js";

export interface QuotaView {
  readonly tenantId: string;
  /** What applies: the override where it sets a quota, else the deployment's default. */
  readonly quotas: TenantQuotas;
  readonly override: QuotaOverride;
  /**
   * Runs holding a concurrent-runs slot, as a take of a slot counts them: under a live lease, or
   * lapsed while its run reads RUNNING under the slot's fence and a live lease (`slotsHeldPastLease`).
   * 0 while the tenant has no limit: slots taken under a limit since lifted hold nothing back.
   */
  readonly runningRuns: number;
}

/**
 * A tenant's quotas as they apply now. Lapsed slots have their runs read (one consistent
 * BatchGetItem per 100), so that `runningRuns` is the count a start is admitted or made to wait by;
 * a tenant with no limit holds no slot that counts (its starts take none), and nothing is read.
 */
export async function quotaView(engine: Engine, tenantId: string, now: Date): Promise<QuotaView> {
  const partition = await readQuotaPartition(engine, tenantId);
  const quotas = effectiveQuotas(engine.settings.quotas, partition.override);
  return {
    tenantId,
    quotas,
    override: partition.override,
    runningRuns: quotas.concurrentRuns === null ? 0 : await slotsHeld(engine, partition.slots, now),
  };
}

/** The slots held, as a take counts them: live, or lapsed while their run runs on. */
async function slotsHeld(engine: Engine, slots: readonly RunSlot[], now: Date): Promise<number> {
  const nowIso = now.toISOString();
  const lapsed = slots.filter((s) => s.leaseUntil < nowIso);
  // Read only when a slot lapsed: most views read the partition alone.
  const heldPastLease = await slotsHeldPastLease(engine, lapsed, now);
  return slots.length - lapsed.length + heldPastLease.size;
}

/**
 * Replaces a tenant's override. Every process reads it again within
 * `quotaCacheMs` (10 s; this one at once). Its usage is dropped, so the next
 * reservation under a limit recounts the tenant's jobs, those created while
 * it had none included; and so is a recount in parts under way, which may
 * have read its pages before those jobs were created (its basis, no usage,
 * is the same after the drop).
 */
export async function setQuotaOverride(
  engine: Engine,
  tenantId: string,
  override: QuotaOverride,
): Promise<QuotaView> {
  const now = engine.clock();
  const defined = Object.fromEntries(
    Object.entries(override).filter(([, value]) => value !== undefined),
  ) as QuotaOverride;
  await writeQuotaOverride(engine, tenantId, defined, now);
  await forgetQuotaUsage(engine, tenantId);
  await deleteRecountProgress(engine, tenantId);
  forgetCachedQuotaOverride(engine, tenantId);
  return quotaView(engine, tenantId, now);
}
