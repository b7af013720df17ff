import { describe, expect, it } from "vitest";
import {
  DEFAULT_MIN_INTERVAL_MS,
  firstOccurrence,
  nextOccurrence,
  normalizeSchedule,
  occurrences,
  type ParseScheduleOptions,
  parseSchedule,
  type ScheduleSpec,
  safeParseSchedule,
} from "../../../shared/schedule/index.js";
import { ValidationError } from "../../../shared/validation.js";

const NOW = new Date("2026-05-01T12:34:56.789Z");

function issuesOf(input: unknown, options?: ParseScheduleOptions) {
  const result = safeParseSchedule(input, options);
  if (result.ok) throw new Error(`expected issues, got ${JSON.stringify(result.schedule)}`);
  return result.issues;
}

const cron = (expression: string, timezone = "UTC") => ({ cron: expression, timezone });

describe("accepted schedules and their canonical form", () => {
  it.each<[unknown, ScheduleSpec]>([
    [{ runAt: "2026-03-08T02:30:00-05:00" }, { runAt: "2026-03-08T07:30:00.000Z" }],
    [{ runAt: "2026-03-08T07:30Z" }, { runAt: "2026-03-08T07:30:00.000Z" }],
    [{ runAt: "2026-03-08T07:30:00.123456Z" }, { runAt: "2026-03-08T07:30:00.123Z" }],
    [{ runAt: "2026-03-08T13:15:00+0545" }, { runAt: "2026-03-08T07:30:00.000Z" }],
    [{ runAt: "2026-03-08T07:30:00,5+00" }, { runAt: "2026-03-08T07:30:00.500Z" }],
    [cron("  0  9 * *   MON-FRI "), cron("0 9 * * MON-FRI")],
    [cron("*/10 0 9 * * *"), cron("*/10 0 9 * * *")],
    [cron("0 9 L * *"), cron("0 9 L * *")],
    [cron("0 9 * * 5L"), cron("0 9 * * 5L")],
    [cron("0 9 * * MON#2"), cron("0 9 * * MON#2")],
    [cron("0 9 1,15 JAN-MAR,DEC *"), cron("0 9 1,15 JAN-MAR,DEC *")],
    [cron("0 0 29 2 *"), cron("0 0 29 2 *")],
    [cron("0 9 * * *", "america/new_york"), cron("0 9 * * *", "America/New_York")],
    [cron("0 9 * * *", "US/Eastern"), cron("0 9 * * *", "US/Eastern")],
    [cron("0 9 * * *", "Etc/GMT+5"), cron("0 9 * * *", "Etc/GMT+5")],
    [cron("0 9 * * *", "utc"), cron("0 9 * * *", "UTC")],
    [{ every: "PT15M" }, { every: "PT15M" }],
    [{ every: "P1W" }, { every: "P1W" }],
    [{ every: "P1DT12H" }, { every: "P1DT12H" }],
    [{ every: "PT1.5S" }, { every: "PT1.5S" }],
    [
      { every: "PT1H", startAt: "2026-03-08T02:30:00-05:00" },
      { every: "PT1H", startAt: "2026-03-08T07:30:00.000Z" },
    ],
  ])("%j → %j", (input, expected) => {
    expect(parseSchedule(input)).toEqual(expected);
  });

  it("fills startAt from `now` (truncated to the second) only when asked to normalize", () => {
    expect(parseSchedule({ every: "PT15M" })).toEqual({ every: "PT15M" });
    expect(parseSchedule({ every: "PT15M" }, { now: NOW })).toEqual({
      every: "PT15M",
      startAt: "2026-05-01T12:34:56.000Z",
    });
  });

  it("the default minimum interval is 1 s, and a deployment can raise it", () => {
    expect(DEFAULT_MIN_INTERVAL_MS).toBe(1_000);
    expect(parseSchedule({ every: "PT1S" })).toEqual({ every: "PT1S" });
    expect(parseSchedule(cron("* * * * * *"))).toEqual(cron("* * * * * *"));
    expect(parseSchedule(cron("0 * * * * *"), { minIntervalMs: 60_000 })).toEqual(
      cron("0 * * * * *"),
    );
    expect(safeParseSchedule(cron("0,30 * * * * *"), { minIntervalMs: 60_000 }).ok).toBe(false);
    expect(safeParseSchedule(cron("59 23 * * *"), { minIntervalMs: 60_000 }).ok).toBe(true);
    // 23:59 then 00:00 the next day: one minute apart across midnight.
    expect(safeParseSchedule(cron("0,59 0,23 * * *"), { minIntervalMs: 120_000 }).ok).toBe(false);
    // Only on the 1st, so 23:59 and 00:00 are never on consecutive days.
    expect(safeParseSchedule(cron("0,59 0,23 1 * *"), { minIntervalMs: 120_000 }).ok).toBe(true);
    expect(() => safeParseSchedule(cron("0 * * * *"), { minIntervalMs: 0 })).toThrow(RangeError);
  });

  it("parseSchedule throws a ValidationError carrying every issue", () => {
    const error = (() => {
      try {
        parseSchedule({ cron: "0 0 30 2 *", timezone: "Mars/Olympus" });
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(ValidationError);
    const { issues, field } = error as ValidationError;
    expect(field).toBe("schedule.cron");
    expect(issues.map((i) => i.field)).toEqual(["schedule.cron", "schedule.timezone"]);
  });
});

describe("normalizeSchedule", () => {
  it("makes every kind fully determined and is idempotent", () => {
    const specs: ScheduleSpec[] = [
      { runAt: "2026-03-08T02:30:00-05:00" },
      { cron: " 0 9  * * * ", timezone: "europe/london" },
      { every: "PT15M" },
      { every: "PT15M", startAt: "2026-01-01T00:00:00+01:00" },
    ];
    const once = specs.map((s) => normalizeSchedule(s, NOW));
    expect(once).toEqual([
      { runAt: "2026-03-08T07:30:00.000Z" },
      { cron: "0 9 * * *", timezone: "Europe/London" },
      { every: "PT15M", startAt: "2026-05-01T12:34:56.000Z" },
      { every: "PT15M", startAt: "2025-12-31T23:00:00.000Z" },
    ]);
    const later = new Date("2030-01-01T00:00:00Z");
    expect(once.map((s) => normalizeSchedule(s, later))).toEqual(once);
  });

  it("rejects a malformed field it has to read", () => {
    expect(() => normalizeSchedule({ runAt: "tomorrow" }, NOW)).toThrow(ValidationError);
    expect(() => normalizeSchedule({ cron: "0 * * * *", timezone: "EST" }, NOW)).toThrow(
      ValidationError,
    );
  });
});

/**
 * One snapshot per kind of bad input: the message must name what is wrong and how to fix it.
 * The field is part of each snapshot.
 */
describe("error messages", () => {
  describe("shape", () => {
    it("not an object", () => {
      expect(issuesOf("0 9 * * *")).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule",
            "message": "must be an object: give exactly one of {"runAt": "<ISO-8601 date-time>"}, {"cron": "<expression>", "timezone": "<IANA zone>"}, {"every": "<ISO-8601 duration>", "startAt"?: "<ISO-8601 date-time>"} or {"after": {"jobs": ["<job id>", …], "on": "success" | "failure" | "completion"}}; got a string",
          },
        ]
      `);
    });
    it("no kind", () => {
      expect(issuesOf({ timezone: "UTC" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule",
            "message": "has none of runAt, cron, every or after: give exactly one of {"runAt": "<ISO-8601 date-time>"}, {"cron": "<expression>", "timezone": "<IANA zone>"}, {"every": "<ISO-8601 duration>", "startAt"?: "<ISO-8601 date-time>"} or {"after": {"jobs": ["<job id>", …], "on": "success" | "failure" | "completion"}}",
          },
        ]
      `);
    });
    it("mixed kinds", () => {
      expect(issuesOf({ cron: "0 9 * * *", every: "PT1H" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule",
            "message": "mixes schedule kinds (cron, every): give exactly one of {"runAt": "<ISO-8601 date-time>"}, {"cron": "<expression>", "timezone": "<IANA zone>"}, {"every": "<ISO-8601 duration>", "startAt"?: "<ISO-8601 date-time>"} or {"after": {"jobs": ["<job id>", …], "on": "success" | "failure" | "completion"}}",
          },
        ]
      `);
    });
    it("unknown key", () => {
      expect(issuesOf({ cron: "0 9 * * *", tz: "UTC" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.tz",
            "message": "unknown key "tz" for a cron schedule (allowed: cron, timezone)",
          },
        ]
      `);
    });
    it("timezone on a runAt schedule", () => {
      expect(
        issuesOf({ runAt: "2026-03-08T09:00:00", timezone: "America/New_York" }),
      ).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.timezone",
            "message": "only a cron schedule takes a timezone ({"cron": "<expression>", "timezone": "<IANA zone>"}); a runAt's instant carries its own offset: "Z" for UTC, or e.g. "2026-03-08T09:00:00-05:00"",
          },
        ]
      `);
    });
    it("timezone on an every schedule", () => {
      expect(issuesOf({ every: "P1D", timezone: "Europe/London" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.timezone",
            "message": "only a cron schedule takes a timezone ({"cron": "<expression>", "timezone": "<IANA zone>"}); an every schedule counts elapsed time, which time zones and DST do not change",
          },
        ]
      `);
    });
    it("startAt on a cron schedule, timezone on an after schedule", () => {
      expect(
        issuesOf({ cron: "0 9 * * *", timezone: "UTC", startAt: "2030-01-01T00:00:00Z" }),
      ).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.startAt",
            "message": "only an every schedule takes a startAt ({"every": "<ISO-8601 duration>", "startAt"?: "<ISO-8601 date-time>"}); a cron schedule runs at the times its expression matches from its creation on",
          },
        ]
      `);
      expect(issuesOf({ after: { jobs: ["a"] }, timezone: "UTC" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.timezone",
            "message": "only a cron schedule takes a timezone ({"cron": "<expression>", "timezone": "<IANA zone>"}); an after schedule runs when its upstream runs end, at no time of its own",
          },
        ]
      `);
    });
    it("a key that is a name of Object's is unknown like any other", () => {
      expect(issuesOf({ runAt: "2030-01-01T00:00:00Z", constructor: 1 })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.constructor",
            "message": "unknown key "constructor" for a runAt schedule (allowed: runAt)",
          },
        ]
      `);
    });
    it("wrong type", () => {
      expect(issuesOf({ cron: 5, timezone: ["UTC"] })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "must be a string; got a number",
          },
          {
            "field": "schedule.timezone",
            "message": "must be a string; got an array",
          },
        ]
      `);
    });
  });

  describe("runAt / startAt", () => {
    it("not an ISO-8601 date-time", () => {
      expect(issuesOf({ runAt: "next tuesday" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.runAt",
            "message": "must be an ISO-8601 date-time with "Z" or a UTC offset, such as "2026-03-08T07:30:00Z" or "2026-03-08T02:30:00-05:00"; got "next tuesday"",
          },
        ]
      `);
    });
    it("no offset", () => {
      expect(issuesOf({ runAt: "2026-03-08T09:00:00" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.runAt",
            "message": "has no "Z" or UTC offset, so it does not name a single instant: append "Z" for UTC or an offset such as "-05:00"; got "2026-03-08T09:00:00"",
          },
        ]
      `);
    });
    it("not a real date", () => {
      expect(issuesOf({ runAt: "2026-02-30T09:00:00Z" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.runAt",
            "message": "is not a real date-time (February 2026 has 28 days); got "2026-02-30T09:00:00Z"",
          },
        ]
      `);
    });
    it("not a real time", () => {
      expect(issuesOf({ runAt: "2026-03-08T09:00:60Z" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.runAt",
            "message": "is not a real date-time (second must be 00-59; leap seconds are not supported); got "2026-03-08T09:00:60Z"",
          },
        ]
      `);
    });
    it("bad startAt", () => {
      expect(issuesOf({ every: "PT1H", startAt: "2026-03-08" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.startAt",
            "message": "must be an ISO-8601 date-time with "Z" or a UTC offset, such as "2026-03-08T07:30:00Z" or "2026-03-08T02:30:00-05:00"; got "2026-03-08"",
          },
        ]
      `);
    });
  });

  describe("every", () => {
    it("not a duration", () => {
      expect(issuesOf({ every: "15m" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.every",
            "message": "must be an ISO-8601 duration such as "PT15M", "PT1H" or "P1D"; got "15m"",
          },
        ]
      `);
    });
    it("calendar units", () => {
      expect(issuesOf({ every: "P1M" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.every",
            "message": "uses years or months, whose length varies; got "P1M": give a fixed length in weeks, days (24 h each), hours, minutes or seconds such as "P30D", or use a cron schedule for calendar dates",
          },
        ]
      `);
    });
    it("not positive", () => {
      expect(issuesOf({ every: "PT0S" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.every",
            "message": "must be a positive duration; got "PT0S"",
          },
        ]
      `);
    });
    it("finer than a millisecond", () => {
      expect(issuesOf({ every: "PT0.0001S" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.every",
            "message": "must be a whole number of milliseconds; got "PT0.0001S"",
          },
        ]
      `);
    });
    it("more often than the minimum interval", () => {
      expect(issuesOf({ every: "PT0.5S" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.every",
            "message": "fires every 500 ms, more often than the minimum interval of 1 s",
          },
        ]
      `);
    });
  });

  describe("cron", () => {
    it("empty", () => {
      expect(issuesOf(cron("  "))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "must not be empty: this scheduler takes 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field, e.g. "0 9 * * MON-FRI"",
          },
        ]
      `);
    });
    it("wrong number of fields", () => {
      expect(issuesOf(cron("0 9 * *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "has 4 fields, expected 5 (minute hour day-of-month month day-of-week) or 6 (second minute hour day-of-month month day-of-week)",
          },
        ]
      `);
    });
    it("Quartz, 7 fields with '?'", () => {
      expect(issuesOf(cron("0 0 12 ? * 2 2026"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": ""0 0 12 ? * 2 2026" looks like a Quartz/EventBridge expression (7 fields / '?'): this scheduler takes 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field; drop the year field and replace '?' with '*'; note that Quartz/EventBridge number weekdays 1-7 from Sunday while cron uses 0-6 (names such as MON mean the same in both)",
          },
        ]
      `);
    });
    it("EventBridge, 6 fields with '?'", () => {
      expect(issuesOf(cron("0 12 ? * MON-FRI *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": ""0 12 ? * MON-FRI *" looks like a Quartz/EventBridge expression ('?'): this scheduler takes 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field; drop the year field and replace '?' with '*'",
          },
        ]
      `);
    });
    it("EventBridge cron(...) wrapper", () => {
      expect(issuesOf(cron("cron(0 12 * * ? *)"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": ""cron(0 12 * * ? *)" looks like a Quartz/EventBridge expression ("cron(...)" wrapper / '?'): this scheduler takes 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field; write the fields without the cron(...) wrapper, drop the year field and replace '?' with '*'",
          },
        ]
      `);
    });
    it("EventBridge rate(...)", () => {
      expect(issuesOf(cron("rate(5 minutes)"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": ""rate(5 minutes)" is an EventBridge rate expression, not cron: use an interval schedule such as {"every": "PT5M"} instead",
          },
        ]
      `);
    });
    it("macro", () => {
      expect(issuesOf(cron("@hourly"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "macros such as "@hourly" are not accepted; write the fields out instead: "0 * * * *"",
          },
        ]
      `);
    });
    it("@every", () => {
      expect(issuesOf(cron("@every 5m"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": ""@every" is not cron: use an interval schedule such as {"every": "PT5M"} instead",
          },
        ]
      `);
    });
    it("unknown macro", () => {
      expect(issuesOf(cron("@reboot"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": ""@reboot" is not supported: this scheduler takes 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field",
          },
        ]
      `);
    });
    it("H (hashed)", () => {
      expect(issuesOf(cron("H 9 * * *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "minute field "H" uses H (a hashed, random value), which is not supported because occurrences must be reproducible: pick a fixed value",
          },
        ]
      `);
    });
    it("W (nearest weekday)", () => {
      expect(issuesOf(cron("0 9 15W * *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "day-of-month field "15W" uses W (nearest weekday), which is not supported: list the days, or combine day-of-week with a day range (OR semantics apply when both are restricted)",
          },
        ]
      `);
    });
    it("L-n (days before the last)", () => {
      expect(issuesOf(cron("0 9 L-2 * *"))).toEqual([
        {
          field: "schedule.cron",
          message:
            'day-of-month field "L-2" counts days back from the last (L-n), which is not supported: L alone is the last day',
        },
      ]);
      expect(issuesOf(cron("0 9 1,L-3 * *"))[0]?.message).toMatch(
        /^day-of-month field "1,L-3" counts days back/,
      );
    });
    it("value out of range", () => {
      expect(issuesOf(cron("60 9 * * *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "minute field "60" is invalid: 60 is out of range 0-59",
          },
        ]
      `);
    });
    it("range out of range", () => {
      expect(issuesOf(cron("0 20-25 * * *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "hour field "20-25" is invalid: range 20-25 goes outside 0-23",
          },
        ]
      `);
    });
    it("range backwards", () => {
      expect(issuesOf(cron("0 9 * * 5-1"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "day-of-week field "5-1" is invalid: range 5-1 runs backwards, and cron ranges do not wrap around: to wrap, write 5-6,0-1; otherwise write the smaller value first",
          },
        ]
      `);
    });
    it("a range that wraps past the end of its field: the advice keeps its meaning", () => {
      // "Write the smaller value first" turned 22-2 (overnight) into 2-22 (all day but the night)
      // and NOV-FEB (winter) into FEB-NOV: the very times not meant.
      const cases: readonly [string, string, string, string, string][] = [
        ["0 22-2 * * *", "hour", "22-2", "22-2", "22-23,0-2"],
        ["0 0 * NOV-FEB *", "month", "NOV-FEB", "11-2", "11-12,1-2"],
        ["0 0 25-5 * *", "day-of-month", "25-5", "25-5", "25-31,1-5"],
        ["50-10 * * * *", "minute", "50-10", "50-10", "50-59,0-10"],
        ["0 9 * * FRI-MON", "day-of-week", "FRI-MON", "5-1", "5-6,0-1"],
        ["0 9 * * 6-0", "day-of-week", "6-0", "6-0", "6,0"],
        // A step counts on from the range's start across the wrap: every other day from Friday to
        // Monday is Friday and Sunday, not the four days the range without its step names.
        ["0 9 * * 5-1/2", "day-of-week", "5-1/2", "5-1", "5,0"],
        ["0 22-2/2 * * *", "hour", "22-2/2", "22-2", "22,0,2"],
        ["0 0 * NOV-FEB/2 *", "month", "NOV-FEB/2", "11-2", "11,1"],
        ["0 9 * * 1,FRI-MON/3", "day-of-week", "1,FRI-MON/3", "5-1", "5,1"],
        ["0 9 * * 7-1/2", "day-of-week", "7-1/2", "7-1", "0-1/2"],
        ["0 9 * * 7-1", "day-of-week", "7-1", "7-1", "0-1"],
      ];
      for (const [expression, field, value, range, split] of cases) {
        expect(issuesOf(cron(expression)), expression).toEqual([
          {
            field: "schedule.cron",
            message: `${field} field "${value}" is invalid: range ${range} runs backwards, and cron ranges do not wrap around: to wrap, write ${split}; otherwise write the smaller value first`,
          },
        ]);
      }
    });
    it("unknown name", () => {
      expect(issuesOf(cron("0 9 * * MON-FRY"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "day-of-week field "MON-FRY" is invalid: unknown name "fry" (use three-letter names SUN-SAT)",
          },
        ]
      `);
    });
    it("not a value", () => {
      expect(issuesOf(cron("0 9 x * *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "day-of-month field "x" is invalid: it is not a value, list, range or step this field accepts",
          },
        ]
      `);
    });
    it("zero step", () => {
      expect(issuesOf(cron("*/0 9 * * *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "minute field "*/0" is invalid: a step must be a positive number",
          },
        ]
      `);
    });
    it("bad # occurrence", () => {
      expect(issuesOf(cron("0 9 * * MON#6"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "day-of-week field "MON#6" is invalid: # takes an occurrence from 1 to 5, e.g. MON#2",
          },
        ]
      `);
    });
    it("# with a list", () => {
      expect(issuesOf(cron("0 9 * * 1#2,3"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "day-of-week field "1#2,3" is invalid: # cannot be combined with ",": it takes a single weekday, e.g. MON#2",
          },
        ]
      `);
    });
    it("standalone L in day-of-week", () => {
      expect(issuesOf(cron("0 9 * * L"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "day-of-week field "L" is invalid: L alone is not valid here: use "5L" for the last Friday of the month, or L in day-of-month for the last day",
          },
        ]
      `);
    });
    it("never fires (rejected by the parser's own check)", () => {
      expect(issuesOf(cron("0 0 30 2 *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "never fires: no calendar day matches day-of-month "30", month "2" and day-of-week "*"",
          },
        ]
      `);
    });
    it("never fires (day in none of the listed months)", () => {
      expect(issuesOf(cron("0 0 31 2,4 *"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "never fires: no calendar day matches day-of-month "31", month "2,4" and day-of-week "*"",
          },
        ]
      `);
    });
    it("a list naming a value twice is accepted; its other mistakes are still named", () => {
      expect(safeParseSchedule(cron("0 9-17,12 * * 1-5,3"))).toEqual({
        ok: true,
        schedule: cron("0 9-17,12 * * 1-5,3"),
      });
      expect(issuesOf(cron("1,1,99 * * * *"))).toEqual([
        {
          field: "schedule.cron",
          message: 'minute field "1,1,99" is invalid: 99 is out of range 0-59',
        },
      ]);
      expect(issuesOf(cron("0 0 30,30 2 *"))).toEqual([
        {
          field: "schedule.cron",
          message:
            'never fires: no calendar day matches day-of-month "30,30", month "2" and day-of-week "*"',
        },
      ]);
      expect(issuesOf(cron("*/5,10 * * * * *"), { minIntervalMs: 10_000 })).toEqual([
        {
          field: "schedule.cron",
          message: "fires as often as every 5 s, more often than the minimum interval of 10 s",
        },
      ]);
    });
    it("a list with an empty item (a stray comma) is refused in every field, not read as *", () => {
      // "1-5," is a weekday list with a trailing comma: it must not run on weekends too.
      const cases: readonly [string, string, string][] = [
        ["0 9 * * 1-5,", "day-of-week", "1-5,"],
        ["0 9 * * ,MON", "day-of-week", ",MON"],
        ["0 9 1,15, * *", "day-of-month", "1,15,"],
        ["0 9 1,,15 * *", "day-of-month", "1,,15"],
        ["0 9 , * *", "day-of-month", ","],
        ["0,30, 9 * * *", "minute", "0,30,"],
        ["0 9, * * *", "hour", "9,"],
        ["0 9 * JAN, *", "month", "JAN,"],
        ["0,30, 0 9 * * *", "second", "0,30,"],
      ];
      for (const [expression, field, value] of cases) {
        expect(issuesOf(cron(expression)), expression).toEqual([
          {
            field: "schedule.cron",
            message: `${field} field "${value}" is invalid: its list has an empty item (a stray comma): separate values with single commas, e.g. 1,15`,
          },
        ]);
      }
      // One stored before the refusal is read without the stray comma: weekdays, not every day.
      const stored: ScheduleSpec = cron("0 9 * * 1-5,");
      const days = occurrences(
        stored,
        new Date("2026-05-01T00:00:00Z"),
        new Date("2026-05-08T00:00:00Z"),
        10,
      );
      expect(days.map((d) => d.toISOString().slice(0, 10))).toEqual([
        "2026-05-01",
        "2026-05-04",
        "2026-05-05",
        "2026-05-06",
        "2026-05-07",
      ]);
      expect(
        occurrences(
          cron("0 9 1,15, * *"),
          new Date("2026-05-01T00:00:00Z"),
          new Date("2026-06-01T00:00:00Z"),
          10,
        ),
      ).toEqual([new Date("2026-05-01T09:00:00Z"), new Date("2026-05-15T09:00:00Z")]);
    });
    it("more often than the minimum interval", () => {
      expect(issuesOf(cron("*/20 * * * * *"), { minIntervalMs: 60_000 })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.cron",
            "message": "fires as often as every 20 s, more often than the minimum interval of 1 min",
          },
        ]
      `);
    });
  });

  describe("timezone", () => {
    it("missing", () => {
      expect(issuesOf({ cron: "0 9 * * *" })).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.timezone",
            "message": "is required with cron: the expression is read in this IANA zone, e.g. "America/New_York" or "UTC"",
          },
        ]
      `);
    });
    it("unknown", () => {
      expect(issuesOf(cron("0 9 * * *", "America/New_Yrok"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.timezone",
            "message": ""America/New_Yrok" is not a known IANA time zone: use a location-based IANA name such as "America/New_York", "Europe/London" or "UTC"",
          },
        ]
      `);
    });
    it("abbreviation", () => {
      expect(issuesOf(cron("0 9 * * *", "EST"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.timezone",
            "message": ""EST" is an abbreviation or legacy zone name, not a location-based IANA zone (for example "EST" is a fixed -05:00 with no daylight-saving time): use a location-based IANA name such as "America/New_York", "Europe/London" or "UTC"",
          },
        ]
      `);
    });
    it("legacy System V zones, though Intl knows them under an Area/ name", () => {
      // ICU keeps the System V names tzdb dropped in 2020: EST5EDT and EST under another name.
      for (const zone of [
        "SystemV/EST5EDT",
        "SystemV/EST5",
        "systemv/pst8pdt",
        "SystemV/AST4ADT",
      ]) {
        expect(issuesOf(cron("0 9 * * *", zone)), zone).toEqual([
          {
            field: "schedule.timezone",
            message: `"${zone}" is an abbreviation or legacy zone name, not a location-based IANA zone (for example "EST" is a fixed -05:00 with no daylight-saving time): use a location-based IANA name such as "America/New_York", "Europe/London" or "UTC"`,
          },
        ]);
      }
      // A job stored with one before the refusal keeps computing its times.
      expect(nextOccurrence(cron("0 9 * * *", "SystemV/EST5EDT"), NOW)).toEqual(
        new Date("2026-05-01T13:00:00Z"),
      );
    });
    it("offset", () => {
      expect(issuesOf(cron("0 9 * * *", "+05:30"))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.timezone",
            "message": ""+05:30" is a UTC offset, not a time zone: offsets change with daylight-saving time, so use a location-based IANA name such as "America/New_York", "Europe/London" or "UTC"",
          },
        ]
      `);
    });
    it("empty", () => {
      expect(issuesOf(cron("0 9 * * *", ""))).toMatchInlineSnapshot(`
        [
          {
            "field": "schedule.timezone",
            "message": "must not be empty: use a location-based IANA name such as "America/New_York", "Europe/London" or "UTC"",
          },
        ]
      `);
    });
  });
});

describe("after schedules", () => {
  const A = "01JD3Q6Z8Y0000000000000000";
  const B = "01JD3Q6Z8Y0000000000000001";

  it("parses, sorting and deduplicating the upstream ids, on defaulting to success", () => {
    expect(parseSchedule({ after: { jobs: [B, A, B] } })).toEqual({
      after: { jobs: [A, B], on: "success" },
    });
    expect(parseSchedule({ after: { jobs: [A], on: "completion" } }, { now: new Date(0) })).toEqual(
      { after: { jobs: [A], on: "completion" } },
    );
  });

  it("has no occurrences of its own", () => {
    const spec = parseSchedule({ after: { jobs: [A], on: "failure" } });
    expect(firstOccurrence(spec, new Date())).toBeNull();
    expect(nextOccurrence(spec, new Date())).toBeNull();
    expect(occurrences(spec, new Date(0), new Date(), 10)).toEqual([]);
  });

  it.each([
    ["not an object", { after: [A] }, "schedule.after"],
    ["an unknown key", { after: { jobs: [A], when: "now" } }, "schedule.after"],
    ["no jobs", { after: { jobs: [] } }, "schedule.after.jobs"],
    [
      "too many jobs",
      { after: { jobs: Array.from({ length: 21 }, (_, i) => `J${i}`) } },
      "schedule.after.jobs",
    ],
    ["a job id that is not one", { after: { jobs: [A, "not an id!"] } }, "schedule.after.jobs.1"],
    ["a bad on", { after: { jobs: [A], on: "always" } }, "schedule.after.on"],
    ["mixed with another kind", { after: { jobs: [A] }, every: "PT1H" }, "schedule"],
  ])("refuses %s, naming the field", (_name, input, field) => {
    expect(issuesOf(input).map((issue) => issue.field)).toContain(field);
  });
});
