import type { TenantQuotas } from "../config.js";
import type { Engine } from "../engine.js";
import { deleteRecountProgress } from "../storage/recount-progress.js";
import {
  forgetQuotaUsage,
  type QuotaOverride,
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
  /** Runs holding a concurrent-runs slot under a live lease. */
  readonly runningRuns: number;
}

/** A tenant's quotas as they apply now. */
export async function quotaView(engine: Engine, tenantId: string, now: Date): Promise<QuotaView> {
  const partition = await readQuotaPartition(engine, tenantId);
  const nowIso = now.toISOString();
  return {
    tenantId,
    quotas: effectiveQuotas(engine.settings.quotas, partition.override),
    override: partition.override,
    runningRuns: partition.slots.filter((s) => s.leaseUntil >= nowIso).length,
  };
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
