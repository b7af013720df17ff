import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  backoffCeiling,
  backoffDelay,
  DEFAULT_RETRY_POLICY,
  decideAfterFailure,
  MAX_REASON_ERROR_CHARS,
  type RetryPolicy,
} from "../../shared/retry.js";

const RUNS = { numRuns: 1000 };
const ALMOST_ONE = 1 - 2 ** -53;
const now = new Date("2026-03-01T09:00:00.000Z");

const policyArb: fc.Arbitrary<RetryPolicy> = fc.record({
  maxAttempts: fc.integer({ min: 1, max: 100 }),
  initialDelayMs: fc.integer({ min: 0, max: 600_000 }),
  maxDelayMs: fc.integer({ min: 0, max: 7 * 24 * 3_600_000 }),
});
const attemptArb = fc.oneof(
  fc.integer({ min: 1, max: 64 }),
  fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
);
const randomValueArb = fc.double({ min: 0, max: ALMOST_ONE, noNaN: true });

describe("DEFAULT_RETRY_POLICY", () => {
  it("is the design's: 5 attempts, 30 s doubling to 1 h", () => {
    expect(DEFAULT_RETRY_POLICY).toEqual({
      maxAttempts: 5,
      initialDelayMs: 30_000,
      maxDelayMs: 3_600_000,
    });
    expect(Object.isFrozen(DEFAULT_RETRY_POLICY)).toBe(true);
  });
});

describe("backoffDelay", () => {
  it.each([
    [1, 30_000],
    [2, 60_000],
    [3, 120_000],
    [7, 1_920_000],
    [8, 3_600_000],
    [9, 3_600_000],
  ])("caps the delay after attempt %i at %i ms under the defaults", (attempt, ceiling) => {
    expect(backoffCeiling(attempt, DEFAULT_RETRY_POLICY)).toBe(ceiling);
    expect(backoffDelay(attempt, DEFAULT_RETRY_POLICY, () => 0)).toBe(0);
    expect(backoffDelay(attempt, DEFAULT_RETRY_POLICY, () => ALMOST_ONE)).toBe(ceiling);
  });

  it("draws uniformly over whole milliseconds in [0, ceiling]", () => {
    expect(backoffDelay(1, DEFAULT_RETRY_POLICY, () => 0.5)).toBe(15_000);
    expect(backoffDelay(2, DEFAULT_RETRY_POLICY, () => 0.25)).toBe(15_000);
  });

  it("is deterministic under an injected random source", () => {
    const draws = [0.1, 0.7, 0.3];
    const sequence = () => {
      let i = 0;
      return () => draws[i++ % draws.length] ?? 0;
    };
    const run = (random: () => number) =>
      [1, 2, 3].map((attempt) => backoffDelay(attempt, DEFAULT_RETRY_POLICY, random));
    expect(run(sequence())).toEqual(run(sequence()));
  });

  it("survives huge attempts without overflow", () => {
    for (const attempt of [1024, 1025, 100_000, Number.MAX_SAFE_INTEGER]) {
      expect(backoffCeiling(attempt, DEFAULT_RETRY_POLICY)).toBe(3_600_000);
      expect(backoffDelay(attempt, DEFAULT_RETRY_POLICY, () => ALMOST_ONE)).toBe(3_600_000);
    }
    const noDelay = { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 1000 };
    expect(backoffDelay(Number.MAX_SAFE_INTEGER, noDelay, () => 0.9)).toBe(0);
  });

  it.each([
    ["attempt 0", () => backoffDelay(0, DEFAULT_RETRY_POLICY, () => 0)],
    ["attempt 1.5", () => backoffDelay(1.5, DEFAULT_RETRY_POLICY, () => 0)],
    ["random() = 1", () => backoffDelay(1, DEFAULT_RETRY_POLICY, () => 1)],
    ["random() = -0.1", () => backoffDelay(1, DEFAULT_RETRY_POLICY, () => -0.1)],
    ["random() = NaN", () => backoffDelay(1, DEFAULT_RETRY_POLICY, () => Number.NaN)],
    [
      "a negative initial delay",
      () => backoffDelay(1, { ...DEFAULT_RETRY_POLICY, initialDelayMs: -1 }, () => 0),
    ],
    [
      "an infinite cap",
      () =>
        backoffDelay(1, { ...DEFAULT_RETRY_POLICY, maxDelayMs: Number.POSITIVE_INFINITY }, () => 0),
    ],
  ])("refuses %s", (_name, compute) => {
    expect(compute).toThrow(RangeError);
  });

  it("stays within [0, min(max, initial·2^(n−1))] as a whole number", () => {
    fc.assert(
      fc.property(attemptArb, policyArb, randomValueArb, (attempt, policy, draw) => {
        const delay = backoffDelay(attempt, policy, () => draw);
        // Written out independently of the implementation; 0 · 2^1024 would be NaN.
        const bound =
          policy.initialDelayMs === 0
            ? 0
            : Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** (attempt - 1));
        expect(Number.isSafeInteger(delay)).toBe(true);
        expect(delay).toBeGreaterThanOrEqual(0);
        expect(delay).toBeLessThanOrEqual(bound);
      }),
      RUNS,
    );
  });

  it("approaches the ceiling as random() approaches 1", () => {
    fc.assert(
      fc.property(
        attemptArb,
        policyArb,
        fc.double({ min: 0.999, max: ALMOST_ONE, noNaN: true }),
        (attempt, policy, draw) => {
          const ceiling = backoffCeiling(attempt, policy);
          const delay = backoffDelay(attempt, policy, () => draw);
          expect(delay).toBeGreaterThanOrEqual(Math.floor(ceiling * 0.999));
          expect(backoffDelay(attempt, policy, () => ALMOST_ONE)).toBe(ceiling);
        },
      ),
      RUNS,
    );
  });

  it("never shrinks from one attempt to the next under the same draw", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 80 }),
        policyArb,
        randomValueArb,
        (attempt, policy, draw) => {
          expect(backoffCeiling(attempt + 1, policy)).toBeGreaterThanOrEqual(
            backoffCeiling(attempt, policy),
          );
          expect(backoffDelay(attempt + 1, policy, () => draw)).toBeGreaterThanOrEqual(
            backoffDelay(attempt, policy, () => draw),
          );
        },
      ),
      RUNS,
    );
  });
});

describe("decideAfterFailure", () => {
  const base = {
    policy: DEFAULT_RETRY_POLICY,
    error: "HTTP 503",
    now,
    random: () => 0.5,
  };

  it("retries a retryable failure with attempts left, at now + backoff", () => {
    expect(decideAfterFailure({ ...base, attempt: 1, retryable: true })).toEqual({
      kind: "retry",
      nextAttempt: 2,
      delayMs: 15_000,
      dueAt: new Date("2026-03-01T09:00:15.000Z"),
    });
  });

  it("waits at least the Retry-After a failure asked, within the policy's maxDelayMs", () => {
    const decide = (retryAfterMs: number) =>
      decideAfterFailure({ ...base, attempt: 1, retryable: true, retryAfterMs });
    // Backoff's draw is 15 s here: a shorter ask changes nothing, a longer one is the wait.
    expect(decide(5_000)).toMatchObject({ delayMs: 15_000 });
    expect(decide(120_000)).toEqual({
      kind: "retry",
      nextAttempt: 2,
      delayMs: 120_000,
      dueAt: new Date("2026-03-01T09:02:00.000Z"),
    });
    expect(decide(Number.MAX_SAFE_INTEGER)).toMatchObject({ delayMs: 3_600_000 });
    expect(decide(Number.POSITIVE_INFINITY)).toMatchObject({ delayMs: 3_600_000 });
    expect(decide(20_000.2)).toMatchObject({ delayMs: 20_001 });
    // A handler's ask that is no wait (negative, NaN) leaves backoff's.
    for (const none of [-1, Number.NaN, Number.NEGATIVE_INFINITY])
      expect(decide(none)).toMatchObject({ delayMs: 15_000 });
    // A failure not retried, or out of attempts, is dead whatever it asked.
    expect(
      decideAfterFailure({ ...base, attempt: 1, retryable: false, retryAfterMs: 60_000 }).kind,
    ).toBe("dead");
    expect(
      decideAfterFailure({ ...base, attempt: 5, retryable: true, retryAfterMs: 60_000 }).kind,
    ).toBe("dead");
  });

  it("keeps every retry's wait between the asked (capped) and the larger of it and backoff's ceiling", () => {
    fc.assert(
      fc.property(
        policyArb,
        fc.integer({ min: 1, max: 64 }),
        fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
        randomValueArb,
        (policy, attempt, retryAfterMs, draw) => {
          const decision = decideAfterFailure({
            ...base,
            policy: { ...policy, maxAttempts: 100 },
            attempt,
            retryable: true,
            retryAfterMs,
            random: () => draw,
          });
          if (decision.kind !== "retry") throw new Error("expected a retry");
          const asked = Math.min(retryAfterMs, policy.maxDelayMs);
          expect(decision.delayMs).toBeGreaterThanOrEqual(asked);
          expect(decision.delayMs).toBeLessThanOrEqual(
            Math.max(asked, backoffCeiling(attempt, policy)),
          );
        },
      ),
      RUNS,
    );
  });

  it("gives up on the last attempt and says so with the last error", () => {
    expect(decideAfterFailure({ ...base, attempt: 5, retryable: true })).toEqual({
      kind: "dead",
      reason: "gave up after 5 attempts: HTTP 503",
    });
    const single = { ...DEFAULT_RETRY_POLICY, maxAttempts: 1 };
    expect(decideAfterFailure({ ...base, policy: single, attempt: 1, retryable: true })).toEqual({
      kind: "dead",
      reason: "gave up after 1 attempt: HTTP 503",
    });
  });

  it("gives up past the last attempt too (the policy was lowered meanwhile)", () => {
    expect(decideAfterFailure({ ...base, attempt: 7, retryable: true })).toEqual({
      kind: "dead",
      reason: "gave up after 7 attempts: HTTP 503",
    });
  });

  it("gives up at attempt 9999 whatever the policy allows: there is no attempt 10000 to store", () => {
    // The API caps maxAttempts at 100, but a replayed run is the next attempt of its occurrence.
    const generous = { ...DEFAULT_RETRY_POLICY, maxAttempts: 20_000 };
    expect(
      decideAfterFailure({ ...base, policy: generous, attempt: 9998, retryable: true }),
    ).toMatchObject({ kind: "retry", nextAttempt: 9999 });
    expect(
      decideAfterFailure({ ...base, policy: generous, attempt: 9999, retryable: true }),
    ).toEqual({ kind: "dead", reason: "gave up after 9999 attempts: HTTP 503" });
  });

  it("never retries a non-retryable error, whatever the attempt", () => {
    for (const attempt of [1, 5]) {
      expect(decideAfterFailure({ ...base, attempt, retryable: false, error: "HTTP 404" })).toEqual(
        { kind: "dead", reason: "non-retryable error: HTTP 404" },
      );
    }
  });

  it("shortens a huge error in the reason", () => {
    const decision = decideAfterFailure({
      ...base,
      attempt: 1,
      retryable: false,
      error: "x".repeat(10_000),
    });
    expect(decision.kind).toBe("dead");
    if (decision.kind === "dead") {
      expect(decision.reason).toBe(
        `non-retryable error: ${"x".repeat(MAX_REASON_ERROR_CHARS - 1)}…`,
      );
    }
  });

  it("shortens an error to whole characters: one its cut would halve is left out", () => {
    // 498 units, then a character outside the BMP (two UTF-16 units) across the cut at 499: half
    // of it, an unpaired surrogate, is no Unicode text to store on the run or answer in its JSON.
    const decision = decideAfterFailure({
      ...base,
      attempt: 1,
      retryable: false,
      error: `${"x".repeat(MAX_REASON_ERROR_CHARS - 2)}\u{1F600}${"y".repeat(100)}`,
    });
    expect(decision).toEqual({
      kind: "dead",
      reason: `non-retryable error: ${"x".repeat(MAX_REASON_ERROR_CHARS - 2)}…`,
    });
  });

  it.each([
    ["attempt 0", { ...base, attempt: 0, retryable: false }],
    ["an invalid now", { ...base, attempt: 1, retryable: true, now: new Date(Number.NaN) }],
    [
      "maxAttempts 0",
      { ...base, attempt: 1, retryable: true, policy: { ...DEFAULT_RETRY_POLICY, maxAttempts: 0 } },
    ],
  ])("refuses %s", (_name, input) => {
    expect(() => decideAfterFailure(input)).toThrow(RangeError);
  });

  it("retries exactly when retryable with attempts left, due at now + a bounded delay", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 120 }),
        policyArb,
        fc.boolean(),
        randomValueArb,
        (attempt, policy, retryable, draw) => {
          const decision = decideAfterFailure({
            attempt,
            policy,
            retryable,
            error: "boom",
            now,
            random: () => draw,
          });
          const shouldRetry = retryable && attempt < policy.maxAttempts;
          expect(decision.kind).toBe(shouldRetry ? "retry" : "dead");
          if (decision.kind === "retry") {
            expect(decision.nextAttempt).toBe(attempt + 1);
            expect(decision.dueAt.getTime() - now.getTime()).toBe(decision.delayMs);
            expect(decision.delayMs).toBeLessThanOrEqual(backoffCeiling(attempt, policy));
          } else {
            expect(decision.reason).toMatch(
              retryable ? /^gave up after \d+ attempts?: boom$/ : /^non-retryable error: boom$/,
            );
          }
        },
      ),
      RUNS,
    );
  });
});
