import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { occurrences, type ScheduleSpec } from "../../../shared/schedule/index.js";
import { DAY, HOUR, luxonOffset, MINUTE, transitionsOf } from "./support.js";

/**
 * A schedule whose hour field covers every hour keeps firing through the hour a fall-back
 * repeats, in real time, as Vixie cron does. So on the fall-back night the gap between two
 * occurrences is never longer than on an ordinary night: the real-time sequence is the ordinary
 * one, shifted by whole days. That holds whenever the minute pattern repeats with the shift: any
 * pattern for a one-hour shift, and patterns that repeat every 30 minutes for Lord Howe's
 * 30-minute shift (there the repeated stretch is only 02:00 → 01:30, so "0 * * * *" has a
 * 90-minute hour that night; dst.test.ts pins that case).
 */
const RUNS = { numRuns: 300 };

interface FallBack {
  readonly at: number;
  readonly shift: number;
}

const WHOLE_HOUR_ZONES = [
  "America/New_York",
  "Europe/Berlin",
  "Europe/London",
  "Europe/Dublin",
  "Australia/Sydney",
  "America/Santiago",
  "America/Sao_Paulo",
  "Pacific/Chatham",
  "Pacific/Auckland",
] as const;
const HALF_HOUR_ZONES = ["Australia/Lord_Howe"] as const;

const fallBackCache = new Map<string, FallBack[]>();

/** Every offset change that sets the clock back, 2010-2040. */
function fallBacks(zone: string): FallBack[] {
  const cached = fallBackCache.get(zone);
  if (cached !== undefined) return cached;
  const found: FallBack[] = [];
  for (let year = 2010; year <= 2040; year++) {
    for (const at of transitionsOf(zone, year)) {
      const shift = luxonOffset(zone, at - MINUTE) - luxonOffset(zone, at);
      if (shift > 0) found.push({ at, shift });
    }
  }
  fallBackCache.set(zone, found);
  return found;
}

const stepOrList = (values: fc.Arbitrary<number[]>, steps: readonly number[]) =>
  fc.oneof(
    values.map((xs) => [...new Set(xs)].sort((a, b) => a - b).join(",")),
    fc.constantFrom(...steps).map((n) => (n === 1 ? "*" : `*/${n}`)),
  );

const secondsArb = fc.option(
  stepOrList(
    fc.array(fc.integer({ min: 0, max: 59 }), { minLength: 1, maxLength: 3 }),
    [10, 15, 20, 30],
  ),
  { nil: undefined },
);
const hoursArb = fc.constantFrom("*", "0-23", "*/1");

/** Any minute pattern: a one-hour shift repeats all of them. */
const anyMinutes = stepOrList(
  fc.array(fc.integer({ min: 0, max: 59 }), { minLength: 1, maxLength: 4 }),
  [1, 2, 5, 7, 10, 13, 15, 20, 25, 30, 45],
);
/** Minute patterns that repeat every 30 minutes, as a 30-minute shift repeats them. */
const halfHourMinutes = stepOrList(
  fc
    .array(fc.integer({ min: 0, max: 29 }), { minLength: 1, maxLength: 3 })
    .map((xs) => [...xs, ...xs.map((x) => x + 30)]),
  [1, 2, 3, 5, 6, 10, 15, 30],
);

const caseArb = fc.oneof(
  fc.record({ zone: fc.constantFrom(...WHOLE_HOUR_ZONES), minutes: anyMinutes }),
  fc.record({ zone: fc.constantFrom(...HALF_HOUR_ZONES), minutes: halfHourMinutes }),
);

const ms = (ds: readonly Date[]): number[] => ds.map((d) => d.getTime());

function maxGap(times: readonly number[]): number {
  let gap = 0;
  for (let i = 1; i < times.length; i++) gap = Math.max(gap, (times[i] ?? 0) - (times[i - 1] ?? 0));
  return gap;
}

describe("fall back, for a schedule whose hour field covers every hour", () => {
  it("never leaves a longer gap than an ordinary night, and fires as it would on one", () => {
    fc.assert(
      fc.property(
        caseArb,
        secondsArb,
        hoursArb,
        fc.nat(),
        ({ zone, minutes }, seconds, hours, pick) => {
          const all = fallBacks(zone);
          expect(all.length).toBeGreaterThan(0);
          const night = all[pick % all.length] ?? { at: 0, shift: 0 };
          const cron = [seconds, minutes, hours, "*", "*", "*"]
            .filter((f) => f !== undefined)
            .join(" ");
          const spec: ScheduleSpec = { cron, timezone: zone };
          const lo = night.at - night.shift - 2 * HOUR;
          const hi = night.at + night.shift + 2 * HOUR;
          const fallBackNight = ms(occurrences(spec, new Date(lo), new Date(hi), 100_000));
          // A week earlier the clock is at the offset in force before the transition all night.
          const ordinary = ms(
            occurrences(spec, new Date(lo - 7 * DAY), new Date(hi - 7 * DAY), 100_000),
          );

          expect(maxGap(fallBackNight)).toBeLessThanOrEqual(maxGap(ordinary));
          expect(fallBackNight).toEqual(ordinary.map((t) => t + 7 * DAY));
        },
      ),
      RUNS,
    );
  });
});
