import type { Engine } from "../engine.js";
import { effectiveQuotas, RateLimitedError } from "./limits.js";
import { cachedQuotaOverride } from "./override-cache.js";

/** A bucket holds this many seconds' worth of requests: the burst a quiet tenant may send at once. */
const BURST_SECONDS = 2;
/** Buckets kept per process; past it, the full ones (idle tenants) are dropped. */
const MAX_BUCKETS = 10_000;

interface Bucket {
  tokens: number;
  refilledAt: number;
  perSecond: number;
}

/**
 * The requestsPerSecond quota: one token bucket per tenant in this API
 * process, refilled at the tenant's rate and holding two seconds' worth. A
 * request with no token left is refused (429, `Retry-After` the seconds
 * until the next token). Buckets are per process: on Lambda each warm
 * instance of the API function keeps its own, so a tenant spread over n
 * instances can reach up to n times its rate; the stage's throttle bounds the
 * sum (docs/api.md "Quotas").
 */
export class RequestRateLimiter {
  private readonly buckets = new Map<string, Bucket>();

  /**
   * `elapsedMs` is a monotonic clock, not the engine's: a bucket refills with the time that
   * passes for the caller, which a test's fixed or shifted scheduling clock does not measure.
   */
  constructor(
    private readonly engine: Engine,
    private readonly elapsedMs: () => number = () => performance.now(),
  ) {}

  /** Takes one token of the tenant's bucket, or throws RateLimitedError. */
  async take(tenantId: string): Promise<void> {
    const override = await cachedQuotaOverride(this.engine, tenantId, this.elapsedMs);
    const perSecond = effectiveQuotas(this.engine.settings.quotas, override).requestsPerSecond;
    const now = this.elapsedMs();
    const capacity = perSecond * BURST_SECONDS;
    const bucket = this.buckets.get(tenantId) ?? { tokens: capacity, refilledAt: now, perSecond };
    bucket.perSecond = perSecond;
    bucket.tokens = Math.min(
      capacity,
      bucket.tokens + (Math.max(0, now - bucket.refilledAt) * perSecond) / 1000,
    );
    bucket.refilledAt = now;
    if (bucket.tokens < 1) {
      this.buckets.set(tenantId, bucket);
      throw new RateLimitedError(
        perSecond,
        Math.max(1, Math.ceil((1 - bucket.tokens) / perSecond)),
      );
    }
    bucket.tokens -= 1;
    if (!this.buckets.has(tenantId) && this.buckets.size >= MAX_BUCKETS) this.dropIdle(now);
    this.buckets.set(tenantId, bucket);
  }

  /** A bucket refilled to its capacity is the same as no bucket. */
  private dropIdle(now: number): void {
    for (const [tenantId, bucket] of this.buckets) {
      if (
        bucket.tokens + ((now - bucket.refilledAt) * bucket.perSecond) / 1000 >=
        bucket.perSecond * BURST_SECONDS
      )
        this.buckets.delete(tenantId);
    }
  }
}
