import { CronExpressionParser } from "cron-parser";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  nextOccurrence,
  occurrences,
  type ScheduleSpec,
  safeParseSchedule,
} from "../../../shared/schedule/index.js";
import { zoneRules } from "../../../shared/schedule/zone.js";
import { luxonOffset, MINUTE, zonedInstantArb } from "./support.js";

const RUNS = { numRuns: 1_000 };
const YEARS_2010_2040 = { min: Date.UTC(2010, 0, 1), max: Date.UTC(2040, 11, 31) };

describe("every", () => {
  const intervalArb = fc.oneof(
    fc.constantFrom(
      ["PT1S", 1_000],
      ["PT1.5S", 1_500],
      ["PT15M", 900_000],
      ["PT90M", 5_400_000],
      ["PT1H", 3_600_000],
      ["P1D", 86_400_000],
      ["P1DT1H", 90_000_000],
      ["P1W", 604_800_000],
    ),
    fc.integer({ min: 1, max: 200_000 }).map((s): [string, number] => [`PT${s}S`, s * 1_000]),
  );

  it("every occurrence is startAt + k·interval, none skipped, none before from", () => {
    fc.assert(
      fc.property(
        fc.integer(YEARS_2010_2040),
        intervalArb,
        fc.integer({ min: -10 * 86_400_000, max: 10 * 86_400_000 }),
        fc.integer({ min: 0, max: 3 * 86_400_000 }),
        (start, [every, interval], offset, span) => {
          const parsed = safeParseSchedule({ every, startAt: new Date(start).toISOString() });
          expect(parsed.ok).toBe(true);
          const spec: ScheduleSpec = { every, startAt: new Date(start).toISOString() };
          const from = start + offset;
          const to = from + span;
          const got = occurrences(spec, new Date(from), new Date(to), 50).map((d) => d.getTime());
          const bad = got.filter(
            (t, i) =>
              (t - start) % interval !== 0 ||
              t < Math.max(start, from) ||
              t > to ||
              (i > 0 && t - (got[i - 1] ?? 0) !== interval),
          );
          expect(bad).toEqual([]);
          const first = got[0];
          if (first !== undefined) expect(first - interval < Math.max(start, from)).toBe(true);
          const after = nextOccurrence(spec, new Date(from - 1))?.getTime();
          if (after !== undefined && after <= to) expect(after).toBe(first);
        },
      ),
      RUNS,
    );
  });
});

/**
 * Field semantics are cron-parser's (names, ranges, lists, steps, L, #, the day-of-month /
 * day-of-week OR). In UTC there is no DST to disagree about, so our search must return exactly
 * what cron-parser's own iterator returns.
 */
describe("cron fields agree with cron-parser in UTC", () => {
  const list = (min: number, max: number, size: number) =>
    fc
      .uniqueArray(fc.integer({ min, max }), { minLength: 1, maxLength: size })
      .map((xs) => xs.join(","));
  const range = (min: number, max: number) =>
    fc
      .tuple(fc.integer({ min, max }), fc.integer({ min, max }))
      .map(([a, b]) => `${Math.min(a, b)}-${Math.max(a, b)}`);
  const step = (min: number, max: number) =>
    fc
      .tuple(
        fc.oneof(fc.constant("*"), fc.integer({ min, max }).map(String), range(min, max)),
        fc.integer({ min: 1, max }),
      )
      .map(([base, by]) => `${base}/${by}`);
  const field = (min: number, max: number, size: number) =>
    fc.oneof(fc.constant("*"), list(min, max, size), range(min, max), step(min, max));

  const cronArb = fc
    .record({
      seconds: fc.option(fc.oneof(fc.constant("0"), list(0, 59, 3), step(0, 59)), {
        nil: undefined,
      }),
      minute: fc.oneof(fc.constant("0"), field(0, 59, 3)),
      hour: field(0, 23, 4),
      dayOfMonth: fc.oneof(field(1, 31, 4), fc.constantFrom("L", "L,15", "1-7")),
      month: fc.oneof(field(1, 12, 3), fc.constantFrom("JAN-MAR", "feb,Aug", "*")),
      dayOfWeek: fc.oneof(
        field(0, 7, 3),
        fc.constantFrom("MON-FRI", "sun,sat", "5L", "1,3L", "MON#2", "0#5", "7#1", "*"),
      ),
    })
    .map(({ seconds, minute, hour, dayOfMonth, month, dayOfWeek }) =>
      [seconds, minute, hour, dayOfMonth, month, dayOfWeek]
        .filter((f) => f !== undefined)
        .join(" "),
    )
    .filter((cron) => safeParseSchedule({ cron, timezone: "UTC" }, { minIntervalMs: 1 }).ok)
    // A list naming a value twice (`0,7`) is the union of its items to us and refused by
    // cron-parser, so it has no reference here: occurrences.test checks those.
    .filter((cron) => {
      try {
        CronExpressionParser.parse(cron);
        return true;
      } catch {
        return false;
      }
    });

  it("the next 6 occurrences are cron-parser's", () => {
    fc.assert(
      fc.property(
        cronArb,
        fc.integer({ min: YEARS_2010_2040.min / MINUTE, max: YEARS_2010_2040.max / MINUTE }),
        (cron, startMinute) => {
          const start = new Date(startMinute * MINUTE);
          const end = new Date(Date.UTC(2100, 0, 1));
          const ours = occurrences(
            { cron, timezone: "UTC" },
            new Date(start.getTime() + 1),
            end,
            6,
          ).map((d) => d.toISOString());
          // Ours are asked for those before `end`: a rare cron (a fifth Sunday in February, one
          // every 28 years) has fewer than 6 there, where cron-parser's run on past it.
          const theirs = CronExpressionParser.parse(cron, { tz: "UTC", currentDate: start })
            .take(6)
            .filter((d) => d.getTime() < end.getTime())
            .map((d) => d.toISOString());
          expect(ours).toEqual(theirs);
        },
      ),
      RUNS,
    );
  });
});

describe("zone offsets", () => {
  it("the core's transition tables give luxon's offset at every instant", () => {
    fc.assert(
      fc.property(
        zonedInstantArb,
        fc.integer({ min: -600, max: 600 }),
        ({ zone, instant }, seconds) => {
          const t = instant + seconds * 1_000;
          expect(zoneRules(zone).offsetAt(t)).toBe(luxonOffset(zone, t));
        },
      ),
      RUNS,
    );
  });
});

describe("dense cron near transitions", () => {
  const denseArb = fc.constantFrom(
    "* * * * * *",
    "*/7 * * * * *",
    "0,30 * * * * *",
    "* * * * *",
    "*/5 * * * *",
    "0-10 * * * * *",
  );

  it("occurrences strictly increase, match chained nextOccurrence, and sit on whole seconds", () => {
    fc.assert(
      fc.property(zonedInstantArb, denseArb, ({ zone, instant }, cron) => {
        const spec: ScheduleSpec = { cron, timezone: zone };
        const from = new Date(instant - 10 * MINUTE);
        const to = new Date(instant + 10 * MINUTE);
        const got = occurrences(spec, from, to, 150).map((d) => d.getTime());
        const chained: number[] = [];
        for (
          let t = nextOccurrence(spec, new Date(from.getTime() - 1));
          t !== null && chained.length < got.length;
          t = nextOccurrence(spec, t)
        ) {
          chained.push(t.getTime());
        }
        expect(chained).toEqual(got);
        expect(got.filter((t, i) => t % 1_000 !== 0 || (i > 0 && t <= (got[i - 1] ?? 0)))).toEqual(
          [],
        );
      }),
      RUNS,
    );
  });
});
