import type { Engine } from "../engine.js";
import { type QuotaOverride, readQuotaOverride } from "../storage/tenant-quotas.js";

/** Overrides kept per process; past it, the cache starts over. */
const MAX_CACHED_TENANTS = 10_000;

interface Cached {
  /** A read still in flight is shared: a burst of starts for one tenant makes one read. */
  readonly override: Promise<QuotaOverride>;
  readonly readAt: number;
}

const caches = new WeakMap<Engine, Map<string, Cached>>();

/**
 * A tenant's override as this process last read it, read again once it is
 * `settings.quotaCacheMs` old (10 s): the worker's starts, the API's creates,
 * edits and request buckets read it here, so a quota that cannot bind costs no
 * request per run or per create, and a changed override applies everywhere
 * within that time. It is read consistently (`readQuotaOverride`): an eventually
 * consistent read just after a change may still answer the override before it,
 * which would then be kept 10 s more (in the process that made the change,
 * too). The age is measured on a monotonic clock, not the engine's: a test's
 * fixed or shifted scheduling clock does not measure the time that passes for
 * the process.
 */
export async function cachedQuotaOverride(
  engine: Engine,
  tenantId: string,
  elapsedMs: () => number = () => performance.now(),
): Promise<QuotaOverride> {
  let cache = caches.get(engine);
  if (cache === undefined) {
    cache = new Map();
    caches.set(engine, cache);
  }
  const now = elapsedMs();
  const cached = cache.get(tenantId);
  if (cached && now - cached.readAt < engine.settings.quotaCacheMs) return cached.override;
  const override = readQuotaOverride(engine, tenantId);
  if (cache.size >= MAX_CACHED_TENANTS) cache.clear();
  const entry = { override, readAt: now };
  cache.set(tenantId, entry);
  // A failed read is not kept: the next caller reads again.
  override.catch(() => {
    if (cache.get(tenantId) === entry) cache.delete(tenantId);
  });
  return override;
}

/** This process's own change applies here at once (other processes: within the cache time). */
export function forgetCachedQuotaOverride(engine: Engine, tenantId: string): void {
  caches.get(engine)?.delete(tenantId);
}
