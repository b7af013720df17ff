import { describe, expect, it } from "vitest";
import {
  decodeRunMessage,
  delaySecondsFor,
  encodeRunMessage,
} from "../../shared/queue/work-queue.js";

const now = new Date("2026-03-01T12:00:00.000Z");
const at = (ms: number) => new Date(now.getTime() + ms);

describe("delaySecondsFor", () => {
  it("rounds down, so a message is visible at most a second early and never late", () => {
    expect(delaySecondsFor(at(4999), now)).toBe(4);
    expect(delaySecondsFor(at(5000), now)).toBe(5);
  });

  it("sends what is due or overdue at once, and caps at SQS's 900 s", () => {
    expect(delaySecondsFor(at(-30_000), now)).toBe(0);
    expect(delaySecondsFor(at(0), now)).toBe(0);
    expect(delaySecondsFor(at(3_600_000), now)).toBe(900);
  });
});

describe("run messages", () => {
  const message = {
    jobId: "job1",
    scheduledFor: "2026-03-01T12:00:00.000Z",
    dueAt: "2026-03-01T12:00:30.000Z",
    attempt: 2,
    jobVersion: 3,
    priority: "high" as const,
    tenantId: "tenant-a",
  };

  it("round-trip", () => {
    expect(decodeRunMessage(encodeRunMessage(message))).toEqual(message);
  });

  it("a message sent before messages named their tenant decodes with an empty tenant", () => {
    const { tenantId: _, ...withoutTenant } = message;
    expect(decodeRunMessage(JSON.stringify(withoutTenant))).toEqual({ ...message, tenantId: "" });
  });

  it("keeps when a worker loop's gate began to hold the run back, and drops a value that is no time", () => {
    const handedBack = { ...message, quotaWaitSince: "2026-03-01T12:00:31.000Z" };
    expect(decodeRunMessage(encodeRunMessage(handedBack))).toEqual(handedBack);
    expect(decodeRunMessage(JSON.stringify({ ...message, quotaWaitSince: "soon" }))).toEqual(
      message,
    );
    expect(decodeRunMessage(JSON.stringify({ ...message, quotaWaitSince: 5 }))).toEqual(message);
  });

  it("anything else is poison, not a crash", () => {
    for (const body of [
      undefined,
      "",
      "not json",
      "null",
      "[]",
      JSON.stringify({ ...message, priority: "urgent" }),
    ]) {
      expect(decodeRunMessage(body)).toBeNull();
    }
    const { attempt: _, ...withoutAttempt } = message;
    expect(decodeRunMessage(JSON.stringify(withoutAttempt))).toBeNull();
  });
});
