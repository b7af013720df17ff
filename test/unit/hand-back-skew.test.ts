import { describe, expect, it } from "vitest";
import { quotaWaitStart } from "../../shared/execution/hand-back.js";

const at = (iso: string) => Date.parse(iso);

describe("quotaWaitStart of a message received by a clock behind the loop that handed it back", () => {
  it("counts no time out before it arrived, rather than a wait that began after it", () => {
    // Loop A, its clock 5 s ahead, held the message from 12:00:05 by its clock and handed it back;
    // loop B receives it at 12:00:00 by its own, before the run's due time as B reads it.
    const handedBack = {
      jobId: "job1",
      scheduledFor: "2026-03-01T12:00:10.000Z",
      dueAt: "2026-03-01T12:00:10.000Z",
      attempt: 1,
      jobVersion: 1,
      priority: "normal" as const,
      tenantId: "t",
      quotaWaitSince: "2026-03-01T12:00:05.000Z",
    };
    const arrival = {
      arrivedAt: at("2026-03-01T12:00:00.000Z"),
      sentAt: at("2026-03-01T12:00:06.000Z"),
    };
    expect(quotaWaitStart(handedBack, arrival)).toBeLessThanOrEqual(arrival.arrivedAt);
  });
});
