import { describe, expect, it } from "vitest";
import {
  firstOccurrence,
  nextOccurrence,
  occurrences,
  type ScheduleSpec,
} from "../../../shared/schedule/index.js";
import { ValidationError } from "../../../shared/validation.js";
import { isoList } from "./support.js";

const at = (s: string): Date => new Date(s);
const utc = (cron: string): ScheduleSpec => ({ cron, timezone: "UTC" });
const next = (spec: ScheduleSpec, after: string) => nextOccurrence(spec, at(after))?.toISOString();
const take = (spec: ScheduleSpec, from: string, count: number) =>
  isoList(occurrences(spec, at(from), at("2200-01-01T00:00:00Z"), count));

describe("runAt", () => {
  const spec: ScheduleSpec = { runAt: "2026-03-08T07:30:00.000Z" };

  it("is next only while strictly after `after`", () => {
    expect(next(spec, "2026-03-08T07:29:59.999Z")).toBe("2026-03-08T07:30:00.000Z");
    expect(next(spec, "2026-03-08T07:30:00.000Z")).toBeUndefined();
    expect(nextOccurrence(spec, at("2027-01-01T00:00:00Z"))).toBeNull();
  });

  it("is its own first occurrence, even in the past", () => {
    expect(firstOccurrence(spec, at("2026-03-09T00:00:00Z"))?.toISOString()).toBe(
      "2026-03-08T07:30:00.000Z",
    );
  });

  it("keeps milliseconds and reads un-normalized offsets", () => {
    expect(next({ runAt: "2026-03-08T02:30:00.250-05:00" }, "2026-03-08T00:00:00Z")).toBe(
      "2026-03-08T07:30:00.250Z",
    );
  });

  it("occurrences includes both ends", () => {
    expect(isoList(occurrences(spec, at(spec.runAt), at(spec.runAt), 5))).toEqual([spec.runAt]);
  });
});

describe("every", () => {
  const spec: ScheduleSpec = { every: "PT15M", startAt: "2026-01-01T00:00:00.000Z" };

  it("fires at startAt + k·interval, strictly after `after`", () => {
    expect(next(spec, "2025-12-31T00:00:00Z")).toBe("2026-01-01T00:00:00.000Z");
    expect(next(spec, "2026-01-01T00:00:00Z")).toBe("2026-01-01T00:15:00.000Z");
    expect(next(spec, "2026-01-01T00:14:59.999Z")).toBe("2026-01-01T00:15:00.000Z");
    expect(next(spec, "2026-06-01T10:07:00Z")).toBe("2026-06-01T10:15:00.000Z");
  });

  it("first occurrence is the first one at or after now (to the second)", () => {
    expect(firstOccurrence(spec, at("2026-01-01T00:15:00.700Z"))?.toISOString()).toBe(
      "2026-01-01T00:15:00.000Z",
    );
    expect(firstOccurrence(spec, at("2026-01-01T00:15:01.000Z"))?.toISOString()).toBe(
      "2026-01-01T00:30:00.000Z",
    );
    expect(firstOccurrence(spec, at("2025-01-01T00:00:00Z"))?.toISOString()).toBe(
      "2026-01-01T00:00:00.000Z",
    );
  });

  it("without startAt: first occurrence is now (to the second); next needs a normalized spec", () => {
    expect(firstOccurrence({ every: "PT1H" }, at("2026-01-01T10:00:00.900Z"))?.toISOString()).toBe(
      "2026-01-01T10:00:00.000Z",
    );
    expect(() => nextOccurrence({ every: "PT1H" }, at("2026-01-01T00:00:00Z"))).toThrow(
      /normalizeSchedule/,
    );
  });

  it("keeps a startAt with milliseconds exactly", () => {
    const odd: ScheduleSpec = { every: "PT1.5S", startAt: "2026-01-01T00:00:00.250Z" };
    expect(
      isoList(occurrences(odd, at("2026-01-01T00:00:00Z"), at("2026-01-01T00:00:04Z"), 10)),
    ).toEqual(["2026-01-01T00:00:00.250Z", "2026-01-01T00:00:01.750Z", "2026-01-01T00:00:03.250Z"]);
  });
});

describe("cron", () => {
  it("next is strictly after `after`, to the second", () => {
    expect(next(utc("0 9 * * *"), "2026-05-01T09:00:00.000Z")).toBe("2026-05-02T09:00:00.000Z");
    expect(next(utc("0 9 * * *"), "2026-05-01T08:59:59.999Z")).toBe("2026-05-01T09:00:00.000Z");
    expect(next(utc("* * * * * *"), "2026-05-01T09:00:00.500Z")).toBe("2026-05-01T09:00:01.000Z");
  });

  it("first occurrence is at or after now truncated to the second", () => {
    // Created 400 ms after 09:00:00: today's 09:00 still counts.
    expect(firstOccurrence(utc("0 9 * * *"), at("2026-05-01T09:00:00.400Z"))?.toISOString()).toBe(
      "2026-05-01T09:00:00.000Z",
    );
    expect(firstOccurrence(utc("0 9 * * *"), at("2026-05-01T09:00:01.000Z"))?.toISOString()).toBe(
      "2026-05-02T09:00:00.000Z",
    );
  });

  it("occurrences: from and to are inclusive, ascending, capped by limit", () => {
    const spec = utc("*/10 * * * *");
    expect(
      isoList(occurrences(spec, at("2026-05-01T09:00:00Z"), at("2026-05-01T09:30:00Z"), 10)),
    ).toEqual([
      "2026-05-01T09:00:00.000Z",
      "2026-05-01T09:10:00.000Z",
      "2026-05-01T09:20:00.000Z",
      "2026-05-01T09:30:00.000Z",
    ]);
    expect(
      occurrences(spec, at("2026-05-01T09:00:00Z"), at("2026-05-01T09:30:00Z"), 2),
    ).toHaveLength(2);
    expect(occurrences(spec, at("2026-05-01T09:00:00Z"), at("2026-05-01T09:30:00Z"), 0)).toEqual(
      [],
    );
    expect(occurrences(spec, at("2026-05-01T10:00:00Z"), at("2026-05-01T09:00:00Z"), 10)).toEqual(
      [],
    );
  });

  it("6 fields: the first is seconds", () => {
    expect(take(utc("15,45 30 9 * * *"), "2026-05-01T00:00:00Z", 3)).toEqual([
      "2026-05-01T09:30:15.000Z",
      "2026-05-01T09:30:45.000Z",
      "2026-05-02T09:30:15.000Z",
    ]);
  });

  it("names, ranges, lists and steps", () => {
    // 2026-05-01 is a Friday.
    expect(take(utc("0 9-17/4 * JAN,MAY mon-wed,FRI"), "2026-05-01T00:00:00Z", 5)).toEqual([
      "2026-05-01T09:00:00.000Z",
      "2026-05-01T13:00:00.000Z",
      "2026-05-01T17:00:00.000Z",
      "2026-05-04T09:00:00.000Z",
      "2026-05-04T13:00:00.000Z",
    ]);
    expect(take(utc("0 0 * * 7"), "2026-05-01T00:00:00Z", 1)).toEqual(["2026-05-03T00:00:00.000Z"]);
  });

  it("a list whose items overlap is their union, as crontab reads it", () => {
    // 2026-05-03 is a Sunday: 0 and 7 both name it.
    expect(take(utc("0 0 * * 0,7"), "2026-05-01T00:00:00Z", 2)).toEqual([
      "2026-05-03T00:00:00.000Z",
      "2026-05-10T00:00:00.000Z",
    ]);
    expect(take(utc("0 9-11,10 * * *"), "2026-05-01T00:00:00Z", 4)).toEqual([
      "2026-05-01T09:00:00.000Z",
      "2026-05-01T10:00:00.000Z",
      "2026-05-01T11:00:00.000Z",
      "2026-05-02T09:00:00.000Z",
    ]);
    expect(take(utc("*/20,40 0 1 JAN,1 *"), "2026-05-01T00:00:00Z", 4)).toEqual([
      "2027-01-01T00:00:00.000Z",
      "2027-01-01T00:20:00.000Z",
      "2027-01-01T00:40:00.000Z",
      "2028-01-01T00:00:00.000Z",
    ]);
    // JUL is a month's name, not a last-day L: the summer months named both ways are June to
    // August, each once.
    for (const expression of ["0 0 1 JUN-AUG,JUL *", "0 0 1 jul,7 *", "0 0 1 JUL,6-8 *"]) {
      expect(take(utc(expression), "2026-05-01T00:00:00Z", 4)).toEqual(
        expression === "0 0 1 jul,7 *"
          ? [
              "2026-07-01T00:00:00.000Z",
              "2027-07-01T00:00:00.000Z",
              "2028-07-01T00:00:00.000Z",
              "2029-07-01T00:00:00.000Z",
            ]
          : [
              "2026-06-01T00:00:00.000Z",
              "2026-07-01T00:00:00.000Z",
              "2026-08-01T00:00:00.000Z",
              "2027-06-01T00:00:00.000Z",
            ],
      );
    }
    // With L kept as written: the 31st and the last day are one day in a 31-day month.
    expect(take(utc("0 0 31,L,31 * *"), "2026-05-01T00:00:00Z", 3)).toEqual([
      "2026-05-31T00:00:00.000Z",
      "2026-06-30T00:00:00.000Z",
      "2026-07-31T00:00:00.000Z",
    ]);
    // Still both restricted, so still OR: the 1st, or a Sunday.
    expect(take(utc("0 0 1,1 * 0,7"), "2026-05-01T00:00:00Z", 3)).toEqual([
      "2026-05-01T00:00:00.000Z",
      "2026-05-03T00:00:00.000Z",
      "2026-05-10T00:00:00.000Z",
    ]);
  });

  it("L in day-of-month is the last day, leap years included", () => {
    expect(take(utc("0 0 L * *"), "2028-01-15T00:00:00Z", 3)).toEqual([
      "2028-01-31T00:00:00.000Z",
      "2028-02-29T00:00:00.000Z",
      "2028-03-31T00:00:00.000Z",
    ]);
  });

  it("5L is the last Friday, MON#2 the second Monday", () => {
    expect(take(utc("0 0 * * 5L"), "2026-05-01T00:00:00Z", 2)).toEqual([
      "2026-05-29T00:00:00.000Z",
      "2026-06-26T00:00:00.000Z",
    ]);
    expect(take(utc("0 0 * * MON#2"), "2026-05-01T00:00:00Z", 2)).toEqual([
      "2026-05-11T00:00:00.000Z",
      "2026-06-08T00:00:00.000Z",
    ]);
  });

  it("day-of-month and day-of-week both restricted: either matches (standard cron OR)", () => {
    // The 13th, or any Friday.
    expect(take(utc("0 0 13 * FRI"), "2026-05-01T00:00:00Z", 4)).toEqual([
      "2026-05-01T00:00:00.000Z",
      "2026-05-08T00:00:00.000Z",
      "2026-05-13T00:00:00.000Z",
      "2026-05-15T00:00:00.000Z",
    ]);
    // Only a bare * is unrestricted: 1-31 makes the OR apply, so this is every day.
    expect(take(utc("0 0 1-31 * FRI"), "2026-05-01T00:00:00Z", 2)).toEqual([
      "2026-05-01T00:00:00.000Z",
      "2026-05-02T00:00:00.000Z",
    ]);
  });

  it("Feb 29 skips 2100, which is not a leap year", () => {
    expect(take(utc("0 0 29 2 *"), "2096-03-01T00:00:00Z", 1)).toEqual([
      "2104-02-29T00:00:00.000Z",
    ]);
  });

  it("rejects an invalid spec with a ValidationError", () => {
    expect(() => nextOccurrence(utc("0 0 30 2 *"), at("2026-01-01T00:00:00Z"))).toThrow(
      ValidationError,
    );
    expect(() =>
      nextOccurrence({ cron: "0 * * * *", timezone: "Nowhere/Atall" }, at("2026-01-01T00:00:00Z")),
    ).toThrow(ValidationError);
    expect(() => nextOccurrence(utc("0 * * * *"), new Date(Number.NaN))).toThrow(RangeError);
  });
});

describe("efficiency", () => {
  // Generous bounds: these catch minute-by-minute scans over years (seconds), not small drifts.
  it("a rare expression skips by month and day, not by minute", () => {
    // The fifth Monday of February: a leap year whose February starts on a Monday (2016, 2044).
    const spec: ScheduleSpec = { cron: "0 0 * 2 MON#5", timezone: "Europe/London" };
    const started = performance.now();
    for (let i = 0; i < 200; i++) {
      expect(next(spec, `${2017 + (i % 20)}-01-01T00:00:00Z`)).toBe("2044-02-29T00:00:00.000Z");
    }
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it("a yearly expression", () => {
    const spec: ScheduleSpec = { cron: "0 0 1 1 *", timezone: "Pacific/Chatham" };
    const started = performance.now();
    expect(take(spec, "2026-01-02T00:00:00Z", 50)).toHaveLength(50);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it("a per-second expression over 20 minutes, 1 000 at a time", () => {
    const spec: ScheduleSpec = { cron: "* * * * * *", timezone: "America/New_York" };
    const started = performance.now();
    for (let i = 0; i < 5; i++) {
      const from = at("2026-03-08T06:50:00Z").getTime() + i * 3_600_000;
      const got = occurrences(spec, new Date(from), new Date(from + 20 * 60_000), 1_000);
      expect(got).toHaveLength(1_000);
    }
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});
