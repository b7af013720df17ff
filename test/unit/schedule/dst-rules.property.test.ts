import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { occurrences, type ScheduleSpec } from "../../../shared/schedule/index.js";
import {
  HOUR,
  luxonOffset,
  referenceResolve,
  wallLabel,
  wallOf,
  zonedInstantArb,
} from "./support.js";

const RUNS = { numRuns: 1_000 };
const ms = (ds: readonly Date[]): number[] => ds.map((d) => d.getTime());

describe("the DST rules, per local day and per local hour, 2010-2040", () => {
  it("a daily job fires once on every local day, at its time or the shifted time", () => {
    fc.assert(
      fc.property(
        zonedInstantArb,
        fc.integer({ min: 0, max: 23 }),
        fc.integer({ min: 0, max: 59 }),
        fc.integer({ min: 1, max: 5 }),
        ({ zone, instant }, hour, minute, days) => {
          const spec: ScheduleSpec = { cron: `${minute} ${hour} * * *`, timezone: zone };
          const [y = 0, m = 0, d = 0] = wallLabel(zone, instant, 10).split("-").map(Number);
          const expected = [
            ...new Set(
              Array.from({ length: days + 2 }, (_, i) =>
                referenceResolve(zone, wallOf(y, m, d - 1 + i, hour, minute)),
              ),
            ),
          ].sort((a, b) => a - b);
          const first = expected[0] ?? 0;
          const last = expected.at(-1) ?? 0;
          const got = ms(occurrences(spec, new Date(first), new Date(last), 1_000));
          expect(got).toEqual(expected);

          const localDays = got.map((t) => wallLabel(zone, t, 10));
          expect(new Set(localDays).size).toBe(localDays.length);
          if (zone === "Pacific/Apia") expect(localDays).not.toContain("2011-12-30");
        },
      ),
      RUNS,
    );
  });

  it("an hourly job fires at most once per local hour label, and in every hour whose HH:MM exists", () => {
    fc.assert(
      fc.property(zonedInstantArb, fc.integer({ min: 0, max: 59 }), ({ zone, instant }, minute) => {
        const spec: ScheduleSpec = { cron: `${minute} * * * *`, timezone: zone };
        const from = instant;
        const to = instant + 16 * HOUR;
        const got = ms(occurrences(spec, new Date(from), new Date(to), 1_000));
        const fired = got.map((t) => wallLabel(zone, t, 13));
        expect(new Set(fired).size).toBe(fired.length);

        // Walk the wall-clock hours well inside the window; an hour whose HH:MM exists must run.
        const [fy = 0, fm = 0, fd = 0, fh = 0] = wallLabel(zone, from, 13)
          .split(/[-T]/)
          .map(Number);
        const missing: string[] = [];
        for (let h = fh + 3; h <= fh + 12; h++) {
          const wall = wallOf(fy, fm, fd, h, minute);
          const hourLabel = new Date(wall).toISOString().slice(0, 13);
          const landed = referenceResolve(zone, wall);
          const exists = landed - wall === -luxonOffset(zone, landed);
          if (exists && landed >= from && landed <= to && !fired.includes(hourLabel)) {
            missing.push(hourLabel);
          }
        }
        expect(missing).toEqual([]);
      }),
      RUNS,
    );
  });
});
