import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  firstOccurrence,
  LAST_STORABLE_MS,
  nextOccurrence,
  occurrences,
  type ScheduleSpec,
  safeParseSchedule,
} from "../../../shared/schedule/index.js";
import { instantMsArb, scheduleInputArb } from "../../support/schedules.js";
import { isoList } from "./support.js";

const LAST = new Date(LAST_STORABLE_MS);
const at = (s: string): Date => new Date(s);

function issuesOf(input: unknown) {
  const result = safeParseSchedule(input);
  return result.ok ? [] : result.issues;
}

describe("the storable range (1970 to 9999-12-31T23:59:59.999Z)", () => {
  it("refuses an every longer than the whole range, naming schedule.every", () => {
    for (const every of ["P600000W", "P418986W", "P2932897D", "PT70389528H"]) {
      expect(issuesOf({ every }).map((i) => i.field)).toEqual(["schedule.every"]);
      expect(issuesOf({ every, startAt: "1970-01-01T00:00:00Z" })[0]?.message).toMatch(
        /longer than the whole storable range/,
      );
    }
    // 418,985 weeks is just inside the range: from 1970 it has a second occurrence in 9999.
    expect(issuesOf({ every: "P418985W" })).toEqual([]);
    const spec: ScheduleSpec = { every: "P418985W", startAt: "1970-01-01T00:00:00.000Z" };
    expect(isoList(occurrences(spec, at("1970-01-01T00:00:00Z"), LAST, 5))).toEqual([
      "1970-01-01T00:00:00.000Z",
      "9999-12-30T00:00:00.000Z",
    ]);
  });

  it("refuses runAt and startAt outside the range, whatever offset they are written with", () => {
    for (const instant of ["9999-12-31T23:59:59.999-00:01", "1969-12-31T23:59:59Z"]) {
      expect(issuesOf({ runAt: instant }).map((i) => i.field)).toEqual(["schedule.runAt"]);
      expect(issuesOf({ every: "PT1H", startAt: instant }).map((i) => i.field)).toEqual([
        "schedule.startAt",
      ]);
    }
    expect(issuesOf({ runAt: "9999-12-31T23:59:59.999Z" })).toEqual([]);
    expect(issuesOf({ runAt: "1970-01-01T01:00:00+01:00" })).toEqual([]);
  });

  it("an every ends at its last storable occurrence", () => {
    const spec: ScheduleSpec = { every: "P400000W", startAt: "5000-01-01T00:00:00.000Z" };
    expect(nextOccurrence(spec, at("4999-01-01T00:00:00Z"))?.toISOString()).toBe(spec.startAt);
    expect(nextOccurrence(spec, at("5000-01-01T00:00:00Z"))).toBeNull();
    const hourly: ScheduleSpec = { every: "PT1H", startAt: "9999-12-31T22:30:00.000Z" };
    expect(isoList(occurrences(hourly, at("9999-12-31T00:00:00Z"), LAST, 10))).toEqual([
      "9999-12-31T22:30:00.000Z",
      "9999-12-31T23:30:00.000Z",
    ]);
  });

  it("an every too long for the API (stored before the bound existed) still never throws", () => {
    const spec: ScheduleSpec = { every: "P14000000W", startAt: "2030-01-01T00:00:00.000Z" };
    expect(nextOccurrence(spec, at("2029-01-01T00:00:00Z"))?.toISOString()).toBe(spec.startAt);
    expect(nextOccurrence(spec, at("2030-01-01T00:00:00Z"))).toBeNull();
    expect(nextOccurrence(spec, LAST)).toBeNull();
  });

  it("a cron west of UTC stops where its local times leave year 9999; east of UTC it reaches the end", () => {
    const west: ScheduleSpec = { cron: "0 * * * *", timezone: "America/New_York" };
    expect(isoList(occurrences(west, at("9999-12-31T21:30:00Z"), LAST, 10))).toEqual([
      "9999-12-31T22:00:00.000Z",
      "9999-12-31T23:00:00.000Z",
    ]);
    expect(nextOccurrence(west, at("9999-12-31T23:00:00Z"))).toBeNull();
    // 08:59 on 10000-01-01 in Tokyo is still 9999-12-31T23:59Z.
    const east: ScheduleSpec = { cron: "59 8 * * *", timezone: "Asia/Tokyo" };
    expect(nextOccurrence(east, at("9999-12-31T12:00:00Z"))?.toISOString()).toBe(
      "9999-12-31T23:59:00.000Z",
    );
    const leap: ScheduleSpec = { cron: "0 0 29 2 *", timezone: "Pacific/Kiritimati" };
    expect(nextOccurrence(leap, at("9996-03-01T00:00:00Z"))).toBeNull();
  });

  it("a runAt or an every without startAt past the range has no first occurrence", () => {
    expect(
      firstOccurrence({ runAt: "9999-12-31T23:59:59.999Z" }, at("2030-01-01T00:00:00Z")),
    ).toEqual(LAST);
    expect(firstOccurrence({ every: "PT1S" }, new Date(LAST_STORABLE_MS + 1_000))).toBeNull();
    expect(nextOccurrence({ runAt: "9999-12-31T23:59:59.999Z" }, LAST)).toBeNull();
  });
});

describe("any accepted schedule, from any now up to the end of year 9999", () => {
  it("gives occurrences after now and inside the range, and never throws", () => {
    fc.assert(
      fc.property(
        scheduleInputArb,
        instantMsArb,
        instantMsArb,
        fc.integer({ min: 1, max: 30 }),
        (input, createdMs, nowMs, steps) => {
          const parsed = safeParseSchedule(input, { now: new Date(createdMs) });
          fc.pre(parsed.ok);
          if (!parsed.ok) return;
          const spec = parsed.schedule;
          const now = new Date(nowMs);
          const first = firstOccurrence(spec, now);
          if (first !== null) expect(first.getTime()).toBeLessThanOrEqual(LAST_STORABLE_MS);
          let previous = nowMs;
          for (let i = 0, t = nextOccurrence(spec, now); i < steps && t !== null; i++) {
            expect(t.getTime()).toBeGreaterThan(previous);
            expect(t.getTime()).toBeLessThanOrEqual(LAST_STORABLE_MS);
            previous = t.getTime();
            t = nextOccurrence(spec, t);
          }
          const listed = occurrences(spec, now, LAST, steps);
          expect(listed.every((t) => t >= now && t <= LAST)).toBe(true);
          expect(nextOccurrence(spec, LAST)).toBeNull();
        },
      ),
      { numRuns: 2_000 },
    );
  });
});
