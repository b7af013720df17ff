import { describe, expect, it } from "vitest";
import { RateLimitedError } from "../../shared/quotas/limits.js";
import {
  FREE_READ_UNITS,
  FREE_WRITE_UNITS,
  READ_UNITS_PER_TOKEN,
  TenantBuckets,
  tokensOwed,
  WRITE_UNITS_PER_TOKEN,
} from "../../shared/quotas/request-rate.js";

const read = (reads: number) => ({ reads, writes: 0 });

/** Buckets on a clock the test moves by hand. */
function bucketsAt() {
  let now = 0;
  const buckets = new TenantBuckets(() => now);
  const retryAfterOf = (tenantId: string, perSecond: number): number | null => {
    try {
      buckets.take(tenantId, perSecond);
      return null;
    } catch (error) {
      if (!(error instanceof RateLimitedError)) throw error;
      return error.context.retryAfterSeconds;
    }
  };
  return {
    buckets,
    retryAfterOf,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

describe("requests charged by what they read", () => {
  it("owes nothing within the free units, then a token per 100 units past them", () => {
    expect(FREE_READ_UNITS).toBe(100);
    expect(READ_UNITS_PER_TOKEN).toBe(100);
    expect([0, 0.5, 100, 150, 200, 10_100].map((units) => tokensOwed(read(units)))).toEqual([
      0, 0, 0, 0.5, 1, 100,
    ]);
  });

  it("owes for writes as for reads, each past its own free units, the two added", () => {
    expect(FREE_WRITE_UNITS).toBe(100);
    expect(WRITE_UNITS_PER_TOKEN).toBe(100);
    const written = (writes: number) => tokensOwed({ reads: 0, writes });
    expect([0, 13, 100, 150, 1_209].map(written)).toEqual([0, 0, 0, 0.5, 11.09]);
    // A request within the free units of each owes nothing; past both, the sum.
    expect(tokensOwed({ reads: 100, writes: 100 })).toBe(0);
    expect(tokensOwed({ reads: 300, writes: 600 })).toBe(7);
  });

  it("costs a request that reads within the free units its one token, as before", () => {
    const { buckets, retryAfterOf } = bucketsAt();
    // Two requests a second: a bucket of four.
    for (let i = 0; i < 4; i++) {
      expect(retryAfterOf("t", 2)).toBeNull();
      buckets.charge("t", read(FREE_READ_UNITS));
    }
    expect(retryAfterOf("t", 2)).toBe(1);
  });

  it("takes the bucket below zero for a request that read much, and refuses the next ones until the debt is refilled", () => {
    const { buckets, retryAfterOf, advance } = bucketsAt();
    expect(retryAfterOf("t", 2)).toBeNull(); // 4 → 3
    buckets.charge("t", read(1_100)); // 10 tokens owed: 3 → −7
    // One token needs 8 more: 4 s at two a second.
    expect(retryAfterOf("t", 2)).toBe(4);
    advance(3_500); // −7 → 0
    expect(retryAfterOf("t", 2)).toBe(1);
    advance(500); // 0 → 1
    expect(retryAfterOf("t", 2)).toBeNull();
    // Another tenant's bucket is untouched.
    expect(retryAfterOf("u", 2)).toBeNull();
  });

  it("charges nothing to a tenant with no bucket, and a charge does not refill past the burst", () => {
    const { buckets, retryAfterOf, advance } = bucketsAt();
    buckets.charge("never-took", read(10_000));
    expect(retryAfterOf("never-took", 1)).toBeNull();
    expect(retryAfterOf("never-took", 1)).toBeNull();
    expect(retryAfterOf("never-took", 1)).toBe(1);
    advance(60_000);
    buckets.charge("never-took", read(200)); // refilled to 2, then 1 owed
    expect(retryAfterOf("never-took", 1)).toBeNull();
    expect(retryAfterOf("never-took", 1)).toBe(1);
  });

  it("bounds what a tenant sending as fast as it may reads to 100 units a token: 100 × its rate a second, past its first burst", () => {
    const { buckets, retryAfterOf, advance } = bucketsAt();
    const perSecond = 50;
    const seconds = 60;
    const unitsPerRequest = 10_640; // a page of large jobs and one of many runs under way
    let units = 0;
    for (let ms = 0; ms < seconds * 1000; ms += 10) {
      while (retryAfterOf("greedy", perSecond) === null) {
        units += unitsPerRequest;
        buckets.charge("greedy", read(unitsPerRequest));
      }
      advance(10);
    }
    // The tokens the bucket held and gained, 100 units each, and the one request that took the last.
    const bound = READ_UNITS_PER_TOKEN * perSecond * (seconds + 2) + unitsPerRequest;
    expect(units).toBeGreaterThan(0);
    expect(units).toBeLessThanOrEqual(bound);
    // Without the charge it would have read a request's units for each of 3,100 tokens.
    expect(units).toBeLessThan(unitsPerRequest * perSecond * (seconds + 2) * 0.02);
  });
});
