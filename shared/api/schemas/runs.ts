/** A run as returned, and the parameters that name one (under its job, or as a dead letter). */
import { z } from "@hono/zod-openapi";
import { CANCEL_SOURCES } from "../../model.js";
import {
  cursor,
  IdempotencyKeySchema,
  instant,
  Priority,
  pageLimit,
  RUN_STATUSES,
} from "./common.js";

export const RunParams = z.object({
  id: z
    .string()
    .openapi({ param: { name: "id", in: "path" }, example: "01J9Z3V6K8N4QX2M7R5T0W1Y3B" }),
  runId: z.string().openapi({
    param: { name: "runId", in: "path" },
    example: "01J9Z3V6K8N4QX2M7R5T0W1Y3B-20300115T080000000-1",
  }),
});
export const DeadLetterParams = z.object({
  runId: z.string().openapi({
    param: { name: "runId", in: "path" },
    example: "01J9Z3V6K8N4QX2M7R5T0W1Y3B-20300115T080000000-1",
  }),
});

export const ReplayHeaders = z.object({
  "Idempotency-Key": IdempotencyKeySchema.optional().openapi({
    description:
      "Makes a retry harmless: a repeat with the key of the replay that was made answers that replay's run (200) and queues nothing, for as long as the dead run and that run are kept. Any other key, or none, on a dead run already replayed is 409.",
  }),
});

export const RunSchema = z
  .strictObject({
    runId: z.string(),
    jobId: z.string(),
    scheduledFor: z
      .string()
      .openapi({ description: "The occurrence; with jobId, its idempotency key." }),
    plannedFor: z.string().openapi({
      description:
        "When its occurrence was planned to run: scheduledFor plus the job's jitter offset (equal to scheduledFor without a window). Lateness and misfires count from here.",
    }),
    dueAt: z
      .string()
      .openapi({ description: "When it should start: plannedFor, or a retry's backoff time." }),
    attempt: z.number().int(),
    status: z.enum(RUN_STATUSES),
    priority: Priority,
    enqueuedAt: z.string().nullable(),
    startedAt: z.string().nullable(),
    finishedAt: z.string().nullable(),
    durationMs: z.number().min(0).nullable(),
    error: z.string().nullable(),
    reason: z
      .string()
      .nullable()
      .openapi({ description: "Why it was skipped, cancelled or dead." }),
    workerId: z.string().nullable(),
    fence: z.number().int(),
    jobVersion: z
      .number()
      .int()
      .openapi({ description: "The job's version when the run was queued." }),
    executedVersion: z.number().int().nullable().openapi({
      description:
        "The job's version whose definition (payload, target) the run executed, read when it started; null until it has run.",
    }),
    replayedBy: z
      .string()
      .nullable()
      .openapi({ description: "For a replayed dead run: the new run." }),
    trigger: z
      .strictObject({
        jobId: z.string(),
        runId: z.string(),
        scheduledFor: z.string().openapi({
          description: "The upstream run's occurrence (its idempotency key's instant).",
        }),
      })
      .nullable()
      .openapi("RunTrigger", {
        description:
          "For a run of a job with an `after` schedule: the upstream run whose ending queued it (kept on its retries and replays); null otherwise. The handler sees it as `ctx.trigger`.",
      }),
    handedOverAt: z.string().optional().openapi({
      description:
        "Async mode (long jobs): when the target answered 202 and took this start of the run over.",
    }),
    leaseUntil: z.string().nullable().optional().openapi({
      description:
        "Async mode: until when the run's lease holds; the target's heartbeats extend it, and a run whose lease lapses is started again.",
    }),
    timesOutAt: z.string().nullable().optional().openapi({
      description:
        "Async mode: when the run times out (the attempt's first start plus the job's timeoutSeconds); a heartbeat or completion after it ends the run as timed out.",
    }),
    cancelRequestedAt: z.string().nullable().openapi({
      description:
        "When a cancel of this run was asked for (a queued run ended then; a running one ends within a heartbeat); null when none was.",
    }),
    cancelledBy: z.enum(CANCEL_SOURCES).nullable().openapi({
      description:
        'What cancelled it: "api" (POST /jobs/{id}/runs/{runId}/cancel), "job-cancel" (POST /jobs/{id}/cancel or a delete), "pause" (a pause with running: cancel).',
    }),
  })
  .openapi("Run");
export type RunDto = z.infer<typeof RunSchema>;

export const RunPageSchema = z
  .strictObject({ items: z.array(RunSchema), nextCursor: z.string().nullable() })
  .openapi("RunPage");

export const RunsQuery = z.strictObject({
  limit: pageLimit,
  cursor,
  status: z
    .string()
    .max(200)
    .optional()
    .openapi({
      description: `Only runs in any of these statuses, separated by commas: ${RUN_STATUSES.join(", ")}. A filter of only running, succeeded, failed and dead reads no occurrence after now.`,
      example: "succeeded,failed",
    }),
  from: instant(
    "Only occurrences at or after this instant (scheduledFor, inclusive).",
    "2030-01-15T08:00:00Z",
  ).optional(),
  to: instant(
    "Only occurrences before this instant (scheduledFor, exclusive); after from.",
    "2030-01-15T09:00:00Z",
  ).optional(),
});
