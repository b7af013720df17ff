import { describe, expect, it } from "vitest";
import { handBackDelayMs, quotaWaitStart } from "../../shared/execution/hand-back.js";

describe("handBackDelayMs", () => {
  it("keeps a message out whole seconds, at least one, at most as long as its run has waited, up to a minute", () => {
    for (const random of [0, 0.5, 0.999]) {
      expect(handBackDelayMs(0, () => random)).toBe(1_000);
      expect(handBackDelayMs(1_500, () => random)).toBeLessThanOrEqual(2_000);
      const delay = handBackDelayMs(10_000, () => random);
      expect(delay % 1_000).toBe(0);
      expect(delay).toBeGreaterThanOrEqual(5_000);
      expect(delay).toBeLessThanOrEqual(10_000);
      expect(handBackDelayMs(3_600_000, () => random)).toBeLessThanOrEqual(60_000);
      expect(handBackDelayMs(3_600_000, () => random)).toBeGreaterThanOrEqual(30_000);
    }
  });
});

describe("quotaWaitStart", () => {
  const message = {
    jobId: "job1",
    scheduledFor: "2026-03-01T12:00:00.000Z",
    dueAt: "2026-03-01T12:00:00.000Z",
    attempt: 1,
    jobVersion: 1,
    priority: "normal" as const,
    tenantId: "t",
  };
  const at = (iso: string) => Date.parse(iso);

  it("counts from when the run arrived or was due, whichever is later", () => {
    expect(quotaWaitStart(message, at("2026-03-01T12:00:05.000Z"))).toBe(
      at("2026-03-01T12:00:05.000Z"),
    );
    expect(quotaWaitStart(message, at("2026-03-01T11:59:59.500Z"))).toBe(
      at("2026-03-01T12:00:00.000Z"),
    );
  });

  it("counts from when an earlier loop's gate began to hold it back, once handed back", () => {
    const handedBack = { ...message, quotaWaitSince: "2026-03-01T12:00:02.000Z" };
    expect(quotaWaitStart(handedBack, at("2026-03-01T12:03:00.000Z"))).toBe(
      at("2026-03-01T12:00:02.000Z"),
    );
  });
});
