/** A schedule's next occurrences: the preview request, its query and its answer. */
import { z } from "@hono/zod-openapi";
import { boundedInt } from "../../bounded-int.js";
import { instant, LIMITS } from "./common.js";
import { ScheduleSchema } from "./schedule.js";

const previewCount = boundedInt(1, LIMITS.previewCount.max, { fromQuery: true }).openapi({
  description: "How many occurrences; default 5.",
  example: 5,
});

const previewFrom = instant(
  "Occurrences at or after this instant (to the second); default now. A DST night months ahead can be checked. One before now shows only what still runs: a job's preview starts at its earliest occurrence not yet run (a queued run not started, its pending occurrence), a schedule's at the first occurrence a job created now would have (a `runAt` a little in the past runs at once).",
  "2030-03-31T00:00:00Z",
);

export const PreviewRequestSchema = z
  .strictObject({
    schedule: ScheduleSchema,
    count: boundedInt(1, LIMITS.previewCount.max).optional(),
    from: previewFrom.optional(),
    endAt: instant(
      "As on a job: the preview stops at this instant (recurring schedules only; in the future).",
      "2030-06-30T23:59:59Z",
    ).optional(),
    maxRuns: boundedInt(1, 1_000_000).optional().openapi({
      description:
        "As on a job: the preview stops after this many occurrences, counted from the first one a job created now would have (recurring schedules only).",
    }),
  })
  .openapi("PreviewRequest", {
    example: { schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" }, count: 5 },
  });

export const PreviewQuery = z.strictObject({
  count: previewCount.optional(),
  from: previewFrom.optional(),
});

export const PreviewSchema = z
  .strictObject({
    schedule: ScheduleSchema.openapi({ description: "The schedule as it would be stored." }),
    timezone: z.string().openapi({
      description:
        "The zone of `local`: the cron zone, or the offset a runAt/startAt was written with, else UTC.",
      example: "Europe/Berlin",
    }),
    occurrences: z.array(
      z.strictObject({
        utc: z.string().openapi({ example: "2030-01-15T08:00:00.000Z" }),
        local: z.string().openapi({ example: "2030-01-15T09:00:00.000+01:00" }),
        plannedFor: z.string().optional().openapi({
          description:
            "A job with a jitter window: when this occurrence is planned to run (UTC). Only a job's preview has it: the offset depends on the job id.",
          example: "2030-01-15T08:03:17.412Z",
        }),
      }),
    ),
  })
  .openapi("Preview");
export type PreviewDto = z.infer<typeof PreviewSchema>;
