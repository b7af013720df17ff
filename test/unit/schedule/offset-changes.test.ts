import { describe, expect, it } from "vitest";
import { occurrences } from "../../../shared/schedule/index.js";
import { HOUR, referenceOccurrences, transitionsOf } from "./support.js";

/**
 * Every offset change of zones the property tests' list leaves out, each checked against the
 * brute-force reference (luxon's offsets, Temporal's possible instants): DST at midnight (Havana
 * forward at 00:00 and back at 01:00 to 00:00; Beirut back at 24:00 to 23:00 the same day;
 * Asuncion, Cairo), offsets changed without DST (Pyongyang 30 minutes back at midnight in 2015 and
 * forward at 23:30 in 2018, Caracas, Volgograd, Moscow's 2011 and 2014 changes, Kiritimati's
 * skipped 31 December 1994), and Casablanca's DST suspended for Ramadan (changes weeks apart).
 * The expressions are those such nights break: midnight and the minutes around it, a weekday's
 * midnight (the skipped or repeated stretch moves across the date line), the last day of the
 * month, every hour (the repeated stretch runs again), seconds at 23:59.
 */
const ZONES = [
  "America/Havana",
  "Asia/Beirut",
  "America/Asuncion",
  "Africa/Cairo",
  "Asia/Pyongyang",
  "America/Caracas",
  "Europe/Volgograd",
  "Europe/Moscow",
  "Pacific/Kiritimati",
  "Africa/Casablanca",
];
const CRONS = [
  "0 0 * * *",
  "30 0 * * *",
  "45 23 * * *",
  "*/20 * * * *",
  "0 0 * * 0",
  "30 23 * * 6",
  "15 23 L * *",
  "30 59 23 * * *",
  "*/30 0-1 * * 0,6",
];

/**
 * Kiritimati's year, and the years every other change above falls in, with their zones' yearly
 * DST around them: a year of a zone's yearly rule is checked as well as fifty are.
 */
const YEARS = [1994, 1995, ...Array.from({ length: 26 }, (_, i) => 2005 + i)];

describe("the schedule core on the offset changes of zones at the edges", () => {
  for (const zone of ZONES) {
    it(`${zone}, 1994-1995 and 2005-2030: every change, as the reference resolves it`, () => {
      let changes = 0;
      for (const year of YEARS) {
        for (const at of transitionsOf(zone, year)) {
          changes++;
          for (const cron of CRONS) {
            const from = at - 30 * HOUR;
            const to = at + 30 * HOUR;
            const got = occurrences({ cron, timezone: zone }, new Date(from), new Date(to), 10_000);
            expect(
              got.map((d) => d.getTime()),
              `${cron} near ${new Date(at).toISOString()}`,
            ).toEqual(referenceOccurrences(cron, zone, from, to));
          }
        }
      }
      expect(changes).toBeGreaterThan(0);
    });
  }
});
