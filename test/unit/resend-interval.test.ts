import { describe, expect, it } from "vitest";
import { MAX_RESEND_INTERVAL_MS } from "../../shared/dispatch/reaper.js";
import { resendInterval } from "../../shared/dispatch/reaper-resend.js";

describe("resendInterval", () => {
  it("is a lease after the first re-send, doubling with each, up to 15 minutes", () => {
    const lease = 60_000;
    expect([1, 2, 3, 4, 5, 6, 50].map((n) => resendInterval(n, lease))).toEqual([
      60_000, 120_000, 240_000, 480_000, 900_000, 900_000, 900_000,
    ]);
    expect(MAX_RESEND_INTERVAL_MS).toBe(900_000);
  });

  it("is never shorter than a lease, however long the lease", () => {
    expect(resendInterval(1, 6_000)).toBe(6_000);
    expect(resendInterval(3, 900_000)).toBe(900_000);
    expect(resendInterval(10_000, 6_000)).toBe(900_000);
  });
});
