/** A schedule's next occurrences: the preview request, its query and its answer. */
import { z } from "@hono/zod-openapi";
import { LIMITS } from "./common.js";
import { ScheduleSchema } from "./schedule.js";

const previewCount = z.coerce
  .number()
  .int()
  .min(1)
  .max(LIMITS.previewCount.max)
  .openapi({ description: "How many occurrences; default 5.", example: 5 });

export const PreviewRequestSchema = z
  .strictObject({
    schedule: ScheduleSchema,
    count: z.number().int().min(1).max(LIMITS.previewCount.max).optional(),
  })
  .openapi("PreviewRequest", {
    example: { schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" }, count: 5 },
  });

export const PreviewQuery = z.strictObject({ count: previewCount.optional() });

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
      }),
    ),
  })
  .openapi("Preview");
export type PreviewDto = z.infer<typeof PreviewSchema>;
