/** The four shapes of a schedule: once, cron in a zone, a fixed interval, or after other jobs. */
import { z } from "@hono/zod-openapi";
import { AFTER_ON } from "../../schedule/index.js";
import { MAX_AFTER_JOBS, MAX_RUNS_PER_RUN_ABOVE } from "../../schedule/parse.js";
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

const AfterScheduleSchema = z
  .strictObject({
    after: z
      .strictObject({
        jobs: z
          .array(z.string().max(64))
          .min(1)
          .max(MAX_AFTER_JOBS)
          .openapi({
            description: `Ids of 1 to ${MAX_AFTER_JOBS} jobs of the same tenant. Each of their runs that ends as \`on\` says queues one run of this job; each upstream run triggers on its own (no fan-in: a job after A and B runs once per A run and once per B run). A job cannot depend on itself, directly or through others (400 naming the cycle). This job runs once per path of \`after\` links from a job above it, at most ${MAX_RUNS_PER_RUN_ABOVE} times per run of that job, and so does each job below it (400 naming the jobs and the count).`,
            example: ["01JD3Q6Z8Y0000000000000000"],
          }),
        on: z.enum(AFTER_ON).optional().openapi({
          description:
            "success: an upstream run SUCCEEDED; failure: it ended DEAD (failed for good, retries used up); completion: either. Default success. Skipped and cancelled upstream runs trigger nothing.",
        }),
      })
      .openapi("AfterCondition"),
  })
  .openapi("AfterSchedule", {
    description:
      "No times of its own: the job runs after other jobs. The dependent's run records its upstream run (`trigger`), and `GET /jobs/{id}` of an upstream lists its `dependents`.",
  });

export const ScheduleSchema = z
  .union([RunAtScheduleSchema, CronScheduleSchema, EveryScheduleSchema, AfterScheduleSchema])
  .openapi("Schedule", {
    description: "Exactly one of runAt, cron + timezone, every, or after.",
  });
