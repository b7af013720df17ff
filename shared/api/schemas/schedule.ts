/** The three shapes of a schedule: once, cron in a zone, or a fixed interval. */
import { z } from "@hono/zod-openapi";
import { instant, LIMITS } from "./common.js";

const RunAtScheduleSchema = z
  .strictObject({
    runAt: instant(
      'Once, at this instant: ISO-8601 with "Z" or a UTC offset, from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z. A past instant runs at once under the misfire policy.',
      "2030-01-15T09:00:00+01:00",
    ),
  })
  .openapi("RunAtSchedule");

const CronScheduleSchema = z
  .strictObject({
    cron: z.string().max(LIMITS.cronChars).openapi({
      description:
        "5 fields (minute hour day-of-month month day-of-week), or 6 with leading seconds. No macros, `?`, `H` or `W`.",
      example: "0 9 * * 1-5",
    }),
    timezone: z.string().max(LIMITS.zoneChars).openapi({
      description:
        'An IANA zone such as "Europe/Berlin" or "UTC"; abbreviations (EST, CET) and bare offsets are refused. A wall time skipped by DST runs at the same offset into the new hour; one that happens twice runs once, the first time, unless the hour field covers every hour (`*`, `0-23`): then the schedule keeps firing through the repeated hour in real time. Occurrences after 9999-12-31T23:59:59.999Z are not run: the schedule ends at its last one before.',
      example: "Europe/Berlin",
    }),
  })
  .openapi("CronSchedule");

const EveryScheduleSchema = z
  .strictObject({
    every: z.string().max(LIMITS.instantChars).openapi({
      description:
        "A fixed ISO-8601 duration of elapsed time (weeks, days of 24 h, hours, minutes, seconds); DST does not move it. At most the storable range (1970-01-01 to 9999-12-31T23:59:59.999Z, about 418,985 weeks); the schedule ends at its last occurrence inside that range.",
      example: "PT15M",
    }),
    startAt: instant(
      "The first occurrence, from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z; defaults to the time of creation, and jobs always return it.",
      "2030-01-15T09:00:00Z",
    ).optional(),
  })
  .openapi("EverySchedule");

export const ScheduleSchema = z
  .union([RunAtScheduleSchema, CronScheduleSchema, EveryScheduleSchema])
  .openapi("Schedule", { description: "Exactly one of runAt, cron + timezone, or every." });
