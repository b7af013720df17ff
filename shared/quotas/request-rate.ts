import type { Engine } from "../engine.js";
import type { ConsumedUnits } from "../storage/capacity-meter.js";
import { effectiveQuotas, RateLimitedError } from "./limits.js";
import { cachedQuotaOverride } from "./override-cache.js";

/** A bucket holds this many seconds' worth of requests: the burst a quiet tenant may send at once. */
const BURST_SECONDS = 2;
/** Buckets kept per process; past it, the full ones (idle tenants) are dropped. */
const MAX_BUCKETS = 10_000;
/**
 * The read units a request reads within its one token: a job or run with its few runs under way,
 * a create, a page of 100 small jobs (eventually consistent, 0.5 unit each) all read less, so
 * ordinary requests cost one token as before.
 */
export const FREE_READ_UNITS = 100;
/**
 * Beyond them, one token per this many read units. Equal to FREE_READ_UNITS, so no request buys
 * more than this many units per token: a tenant at its quota reads at most
 * READ_UNITS_PER_TOKEN × requestsPerSecond units a second per API process (5,000 at the default
 * 50), an eighth of an on-demand table's default maximum (40,000).
 */
export const READ_UNITS_PER_TOKEN = 100;
/**
 * The write units a request writes within its one token: a create (up to 13 units with its key and
 * entry), an edit, pause or cancel of a job of a few KB, a trigger all write less. A write of a
 * large item is billed by the item's size (an UpdateItem of a 60 KB job: 60 units, twice that in a
 * transaction), so a request that writes many large items (the delete of a job after 20 jobs of
 * 60 KB takes itself off each: 1,200 units) pays for them as a listing pays for its reads.
 */
export const FREE_WRITE_UNITS = 100;
/**
 * Beyond them, one token per this many write units: a tenant at its quota writes at most
 * WRITE_UNITS_PER_TOKEN × requestsPerSecond units a second per API process (5,000 at the default
 * 50), as it reads.
 */
export const WRITE_UNITS_PER_TOKEN = 100;

/** The tokens a request that consumed `units` owes beyond the one it took, for reads and writes. */
export function tokensOwed({ reads, writes }: ConsumedUnits): number {
  return (
    Math.max(0, reads - FREE_READ_UNITS) / READ_UNITS_PER_TOKEN +
    Math.max(0, writes - FREE_WRITE_UNITS) / WRITE_UNITS_PER_TOKEN
  );
}

interface Bucket {
  tokens: number;
  refilledAt: number;
  perSecond: number;
}

/**
 * One token bucket per tenant, refilled at its rate and holding two seconds' worth. A request
 * takes a token before it runs, or is refused (429, `Retry-After` the seconds until the bucket
 * holds a token again); once it has run, it is charged for what it read past FREE_READ_UNITS
 * and wrote past FREE_WRITE_UNITS. The charge can take the bucket below zero: the request has
 * already read and written and is answered, and the tenant's next requests are refused until
 * the debt is refilled.
 */
export class TenantBuckets {
  private readonly buckets = new Map<string, Bucket>();

  /** `elapsedMs` is a monotonic clock (see RequestRateLimiter). */
  constructor(private readonly elapsedMs: () => number) {}

  /** Takes one token of the tenant's bucket, or throws RateLimitedError. */
  take(tenantId: string, perSecond: number): void {
    const now = this.elapsedMs();
    const bucket = this.refilled(tenantId, perSecond, now);
    if (bucket.tokens < 1) {
      this.buckets.set(tenantId, bucket);
      throw new RateLimitedError(
        perSecond,
        Math.max(1, Math.ceil((1 - bucket.tokens) / perSecond)),
        bucket.tokens < 0,
      );
    }
    bucket.tokens -= 1;
    if (!this.buckets.has(tenantId) && this.buckets.size >= MAX_BUCKETS) this.dropIdle(now);
    this.buckets.set(tenantId, bucket);
  }

  /**
   * Debits the tenant's bucket for the read and write units a request it took a token for
   * consumed, at the rate that take applied. Without a bucket (dropped as idle while the request
   * ran, which only a process holding 10,000 tenants' buckets does) the charge is let go.
   */
  charge(tenantId: string, units: ConsumedUnits): void {
    const owed = tokensOwed(units);
    const held = this.buckets.get(tenantId);
    if (owed === 0 || held === undefined) return;
    const bucket = this.refilled(tenantId, held.perSecond, this.elapsedMs());
    bucket.tokens -= owed;
  }

  /** The tenant's bucket refilled up to `now` at its current rate (a new one starts full). */
  private refilled(tenantId: string, perSecond: number, now: number): Bucket {
    const capacity = perSecond * BURST_SECONDS;
    const bucket = this.buckets.get(tenantId) ?? { tokens: capacity, refilledAt: now, perSecond };
    bucket.perSecond = perSecond;
    bucket.tokens = Math.min(
      capacity,
      bucket.tokens + (Math.max(0, now - bucket.refilledAt) * perSecond) / 1000,
    );
    bucket.refilledAt = now;
    return bucket;
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

/**
 * The requestsPerSecond quota: the tenant's TenantBuckets in this API process, at the tenant's
 * rate. Buckets are per process: on Lambda each warm instance of the API function keeps its own,
 * so a tenant spread over n instances can reach up to n times its rate; the stage's throttle
 * bounds the sum (docs/api.md "Quotas").
 */
export class RequestRateLimiter {
  private readonly buckets: TenantBuckets;

  /**
   * `elapsedMs` is a monotonic clock, not the engine's: a bucket refills with the time that
   * passes for the caller, which a test's fixed or shifted scheduling clock does not measure.
   */
  constructor(
    private readonly engine: Engine,
    private readonly elapsedMs: () => number = () => performance.now(),
  ) {
    this.buckets = new TenantBuckets(elapsedMs);
  }

  /** Takes one token of the tenant's bucket, or throws RateLimitedError. */
  async take(tenantId: string): Promise<void> {
    this.buckets.take(tenantId, await this.perSecond(tenantId));
  }

  /** Charges the tenant's bucket for what a request it took a token for read and wrote (TenantBuckets). */
  charge(tenantId: string, units: ConsumedUnits): void {
    this.buckets.charge(tenantId, units);
  }

  private async perSecond(tenantId: string): Promise<number> {
    const override = await cachedQuotaOverride(this.engine, tenantId, this.elapsedMs);
    return effectiveQuotas(this.engine.settings.quotas, override).requestsPerSecond;
  }
}
