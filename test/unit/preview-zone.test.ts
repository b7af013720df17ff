import { describe, expect, it } from "vitest";
import { displayZoneOf, previewOf } from "../../shared/api/preview.js";
import { parseSchedule } from "../../shared/schedule/index.js";

const NOW = new Date("2026-06-01T00:00:00Z");

describe("the zone a schedule's preview names", () => {
  it("is the cron's zone as stored, in its canonical casing, whatever casing the request used", () => {
    for (const [written, stored] of [
      ["europe/london", "Europe/London"],
      ["AMERICA/NEW_YORK", "America/New_York"],
      ["utc", "UTC"],
      ["US/Eastern", "US/Eastern"],
    ] as const) {
      const request = { cron: "0 9 * * *", timezone: written };
      const schedule = parseSchedule(request, { now: NOW });
      const preview = previewOf(schedule, displayZoneOf(request), NOW, 1);
      expect(preview.schedule, written).toEqual({ cron: "0 9 * * *", timezone: stored });
      expect(preview.timezone, written).toBe(stored);
    }
  });

  it("is the offset a runAt or startAt was written with, or UTC", () => {
    expect(displayZoneOf({ runAt: "2026-06-01T09:00:00+0530" })).toBe("+05:30");
    expect(displayZoneOf({ every: "PT1H", startAt: "2026-06-01T09:00:00-00:00" })).toBe("UTC");
    expect(displayZoneOf({ every: "PT1H" })).toBe("UTC");
  });
});
