import { describe, expect, it } from "vitest";
import { peakRunsPerMinute } from "../../shared/quotas/limits.js";

const cron = (expression: string, timezone: string, now: string) =>
  peakRunsPerMinute({ cron: expression, timezone }, new Date(now));

describe("peakRunsPerMinute", () => {
  it("counts a cron's seconds whenever in a matching minute it is measured", () => {
    expect(cron("* 0 * * * *", "UTC", "2031-03-04T05:00:58.500Z")).toBe(60);
    expect(cron("* 0 * * * *", "UTC", "2031-03-04T05:30:00Z")).toBe(60);
    expect(cron("0,30 * * * * *", "UTC", "2031-03-04T05:00:59.500Z")).toBe(2);
    expect(cron("0 * * * *", "UTC", "2031-03-04T05:00:58.500Z")).toBe(1);
  });

  it("counts a whole local minute in a zone whose offset has seconds (Monrovia, −0:44:30 until 1972)", () => {
    // 00:45:28.5Z is 00:00:58.5 there: two seconds left in the matching minute.
    expect(cron("* 0 * * * *", "Africa/Monrovia", "1971-06-01T00:45:28.500Z")).toBe(60);
  });

  it("counts an every from its next occurrence", () => {
    expect(
      peakRunsPerMinute(
        { every: "PT7S", startAt: "2031-03-04T05:00:00Z" },
        new Date("2031-03-04T05:00:58Z"),
      ),
    ).toBe(9);
  });
});
