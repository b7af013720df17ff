import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { nextOccurrence, occurrences, type ScheduleSpec } from "../../../shared/schedule/index.js";
import {
  HOUR,
  MINUTE,
  referenceOccurrences,
  sparseCronArb,
  transitionsOf,
  zonedInstantArb,
} from "./support.js";

const RUNS = { numRuns: 1_000 };
const ms = (ds: readonly Date[]): number[] => ds.map((d) => d.getTime());

describe("cron occurrences across time zones, 2010-2040", () => {
  it("match the brute-force reference, strictly increase, and chained nextOccurrence agrees", () => {
    fc.assert(
      fc.property(
        zonedInstantArb,
        sparseCronArb,
        fc.integer({ min: 1, max: 12 * 60 }),
        ({ zone, instant }, cron, minutes) => {
          const spec: ScheduleSpec = { cron, timezone: zone };
          const from = instant;
          const to = instant + minutes * MINUTE;
          const got = ms(occurrences(spec, new Date(from), new Date(to), 10_000));

          expect(got.filter((t, i) => i > 0 && t <= (got[i - 1] ?? 0))).toEqual([]);

          const chained: number[] = [];
          for (
            let t = nextOccurrence(spec, new Date(from - 1));
            t !== null && t.getTime() <= to;
            t = nextOccurrence(spec, t)
          ) {
            chained.push(t.getTime());
          }
          expect(chained).toEqual(got);

          expect(got).toEqual(referenceOccurrences(cron, zone, from, to));
        },
      ),
      RUNS,
    );
  });

  it("around the 30-minute and off-the-hour shifts, shifted and unshifted times interleave in UTC order", () => {
    // Lord Howe jumps 02:00 → 02:30 and Chatham 02:45 → 03:45: a skipped wall time can land after
    // an existing one (02:20 → 02:50 comes after 02:40), which whole-hour shifts never produce.
    fc.assert(
      fc.property(
        fc.constantFrom("Australia/Lord_Howe", "Pacific/Chatham"),
        fc.integer({ min: 2010, max: 2040 }),
        fc.nat(),
        fc.uniqueArray(fc.integer({ min: 0, max: 59 }), { minLength: 1, maxLength: 4 }),
        fc.oneof(
          fc.uniqueArray(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 3 }),
          // Every hour: the repeated stretch fires again on its second pass.
          fc.constant(["*"]),
        ),
        fc.integer({ min: -180, max: 60 }),
        (zone, year, pick, minutes, hours, startMinutes) => {
          const transitions = transitionsOf(zone, year);
          const from = (transitions[pick % transitions.length] ?? 0) + startMinutes * MINUTE;
          const to = from + 4 * HOUR;
          const cron = `${minutes.join(",")} ${hours.join(",")} * * *`;
          const spec: ScheduleSpec = { cron, timezone: zone };
          const got = ms(occurrences(spec, new Date(from), new Date(to), 1_000));
          const chained: number[] = [];
          for (
            let t = nextOccurrence(spec, new Date(from - 1));
            t !== null && t.getTime() <= to;
            t = nextOccurrence(spec, t)
          ) {
            chained.push(t.getTime());
          }
          expect(chained).toEqual(got);
          expect(got).toEqual(referenceOccurrences(cron, zone, from, to));
        },
      ),
      RUNS,
    );
  });
});
