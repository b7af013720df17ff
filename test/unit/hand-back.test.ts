import { describe, expect, it } from "vitest";
import {
  handBackDelayMs,
  quotaWaitedMs,
  quotaWaitStart,
} from "../../shared/execution/hand-back.js";

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

describe("quotaWaitStart", () => {
  it("counts from when the run arrived or was due, whichever is later", () => {
    expect(quotaWaitStart(message, { arrivedAt: at("2026-03-01T12:00:05.000Z") })).toBe(
      at("2026-03-01T12:00:05.000Z"),
    );
    expect(quotaWaitStart(message, { arrivedAt: at("2026-03-01T11:59:59.500Z") })).toBe(
      at("2026-03-01T12:00:00.000Z"),
    );
  });

  it("counts from when an earlier loop's gate began to hold it back, once handed back", () => {
    const handedBack = { ...message, quotaWaitSince: "2026-03-01T12:00:02.000Z" };
    // Held until 12:02:10, then out for at most a minute.
    const arrival = {
      arrivedAt: at("2026-03-01T12:03:00.000Z"),
      sentAt: at("2026-03-01T12:02:10.000Z"),
    };
    expect(quotaWaitStart(handedBack, arrival)).toBe(at("2026-03-01T12:00:02.000Z"));
  });

  it("counts its time out only up to the longest hand-back delay after it was sent", () => {
    const handedBack = { ...message, quotaWaitSince: "2026-03-01T12:00:02.000Z" };
    // Sent at 12:00:04, back on the queue by 12:01:04 at the latest, received at 12:30 (an
    // outage): 62 s of quota wait before it arrived, the rest lateness.
    const arrival = {
      arrivedAt: at("2026-03-01T12:30:00.000Z"),
      sentAt: at("2026-03-01T12:00:04.000Z"),
    };
    expect(quotaWaitStart(handedBack, arrival)).toBe(at("2026-03-01T12:30:00.000Z") - 62_000);
    // With no SentTimestamp, as if sent as its wait began: a minute at most.
    expect(quotaWaitStart(handedBack, { arrivedAt: arrival.arrivedAt })).toBe(
      at("2026-03-01T12:30:00.000Z") - 60_000,
    );
  });

  it("counts no time out before it arrived on a clock behind the loop that handed it back", () => {
    // Loop A, its clock 5 s ahead, held the message from 12:00:05 by its clock and handed it back;
    // loop B receives it at 12:00:00 by its own, before the run's due time as B reads it.
    const handedBack = {
      ...message,
      scheduledFor: "2026-03-01T12:00:10.000Z",
      dueAt: "2026-03-01T12:00:10.000Z",
      quotaWaitSince: "2026-03-01T12:00:05.000Z",
    };
    const arrival = {
      arrivedAt: at("2026-03-01T12:00:00.000Z"),
      sentAt: at("2026-03-01T12:00:06.000Z"),
    };
    expect(quotaWaitStart(handedBack, arrival)).toBeLessThanOrEqual(arrival.arrivedAt);
  });
});

describe("quotaWaitedMs", () => {
  it("is the wait either worker counts: a loop's until its gate lets it by, the Lambda worker's until it arrives", () => {
    const handedBack = { ...message, quotaWaitSince: "2026-03-01T12:00:02.000Z" };
    const arrived = at("2026-03-01T12:03:00.000Z");
    const arrival = { arrivedAt: arrived, sentAt: at("2026-03-01T12:02:10.000Z") };
    // The loop: held and out in SQS since 12:00:02, then 5 s more at its gate.
    expect(quotaWaitedMs(handedBack, arrival, arrived + 5_000)).toBe(183_000);
    // The Lambda worker, which has no gate: the wait before it arrived alone.
    expect(quotaWaitedMs(handedBack, arrival, arrived)).toBe(178_000);
    // A message no loop handed back waited for no quota before it arrived.
    expect(quotaWaitedMs(message, { arrivedAt: arrived }, arrived)).toBe(0);
    // An early one neither, up to its due time.
    const early = { arrivedAt: at("2026-03-01T11:59:59.500Z") };
    expect(quotaWaitedMs(message, early, at("2026-03-01T11:59:59.600Z"))).toBe(0);
  });

  it("leaves a workers' outage after the hand-back out of it, whichever worker receives it", () => {
    const handedBack = { ...message, quotaWaitSince: "2026-03-01T12:00:02.000Z" };
    const arrived = at("2026-03-01T12:30:00.000Z");
    const arrival = { arrivedAt: arrived, sentAt: at("2026-03-01T12:00:04.000Z") };
    // Held 2 s, out a minute at most: 62 s; at a loop, its gate's 5 s besides.
    expect(quotaWaitedMs(handedBack, arrival, arrived)).toBe(62_000);
    expect(quotaWaitedMs(handedBack, arrival, arrived + 5_000)).toBe(67_000);
  });
});
