import type { TenantQuotas } from "../config.js";
import type { Engine } from "../engine.js";
import {
  type QuotaOverride,
  readQuotaPartition,
  writeQuotaOverride,
} from "../storage/tenant-quotas.js";
import { effectiveQuotas } from "./limits.js";

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
 * Replaces a tenant's override. The worker reads it at each start; the API's
 * creates and edits read it each time, its request buckets within
 * QUOTA_CACHE_MS (shared/quotas/request-rate.ts).
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
  return quotaView(engine, tenantId, now);
}
