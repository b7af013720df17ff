/** A job as created, edited and returned, and the parameters and headers of the job routes. */
import { z } from "@hono/zod-openapi";
import { boundedInt } from "../../bounded-int.js";
import type { JobTypeCatalog } from "../../job-types/registry.js";
import { MAX_BATCH_JOBS } from "../../jobs/create-batch.js";
import { PAUSE_RUNNING } from "../../model.js";
import { MAX_CONCURRENT_LIMIT, MISFIRE_POLICIES, OVERLAP_POLICIES } from "../../policies.js";
import {
  cursor,
  IdempotencyKeySchema,
  instant,
  JOB_STATUSES,
  LIMITS,
  Priority,
  pageLimit,
  RUN_STATUSES,
} from "./common.js";
import { ErrorSchema } from "./errors.js";
import { jobTypeSchema } from "./job-types.js";
import { ScheduleSchema } from "./schedule.js";
import { TargetSchema } from "./target.js";

const IN_FLIGHT_VALUES = ["skip", "complete"] as const;

const [misfire0, ...misfireRest] = MISFIRE_POLICIES;
const [overlap0, ...overlapRest] = OVERLAP_POLICIES;
if (misfire0 === undefined || overlap0 === undefined) throw new Error("policy lists are empty");
const MisfirePolicy = z.enum([misfire0, ...misfireRest]).openapi({
  description:
    "What to do with occurrences missed by more than the grace (60 s): skip them, run the latest once (default), or run them all (up to 1,000).",
});
const OverlapPolicy = z.enum([overlap0, ...overlapRest]).openapi({
  description:
    "What to do when a run is due while another run of the job is still running: skip it (default), run it right after (buffer_one), or allow up to maxConcurrent at once.",
});

const RetryInputSchema = z
  .strictObject({
    maxAttempts: boundedInt(1, LIMITS.maxAttempts)
      .optional()
      .openapi({ description: "Attempts in all, the first included; default 5." }),
    initialDelaySeconds: boundedInt(0, LIMITS.retryDelaySeconds)
      .optional()
      .openapi({ description: "Backoff ceiling after the first failure, doubling; default 30." }),
    maxDelaySeconds: boundedInt(0, LIMITS.retryDelaySeconds)
      .optional()
      .openapi({ description: "Largest backoff; default 3600. Must be ≥ initialDelaySeconds." }),
  })
  .openapi("RetryInput", { description: "Exponential backoff with full jitter." });

const maxConcurrent = boundedInt(1, MAX_CONCURRENT_LIMIT).openapi({
  description: 'Runs at once; only with overlapPolicy "allow". Default 1.',
});

const timeoutSeconds = boundedInt(LIMITS.timeoutSeconds.min, LIMITS.asyncTimeoutSeconds).openapi({
  description:
    'A run is aborted after this long; default 300. At most 900, and at most what the deployment\'s workers can finish: their Lambda timeout less 15 s (885 with the default 900 s), else 400. An http job whose target has mode "async" may take up to 86400 (24 h): its target heartbeats and completes the run.',
});

const window = z.string().max(LIMITS.windowChars).openapi({
  description:
    'Jitter: an ISO-8601 duration such as "PT5M". Each occurrence runs at a stable pseudo-random offset inside [occurrence, occurrence + window), the same for every attempt and preview (a hash of the job id and the occurrence); runs keep the occurrence as scheduledFor and show the planned time as plannedFor. Recurring schedules only, at most the period (an every interval, or the smallest gap between two of a cron\'s times), else 400 naming window.',
  example: "PT5M",
});

const MAX_RUNS_LIMIT = 1_000_000;

const endAt = instant(
  "Recurring jobs only: no occurrence after this instant runs (one at it does). Must lie in the future and not before schedule.startAt; a new job's not before its schedule's first occurrence (it would never run). The job completes once its last occurrence before it is queued.",
  "2030-06-30T23:59:59Z",
);

const maxRuns = boundedInt(1, MAX_RUNS_LIMIT).openapi({
  description:
    "Recurring jobs only: how many occurrences run in all, counted as they are queued (each occurrence once; retries, triggers and occurrences skipped by the misfire policy are not counted). The job completes with the last one queued.",
  example: 10,
});

const payload = z.unknown().openapi({
  description:
    "JSON that fits the job type's payload schema (JobPayloads lists each type's), at most 64 KiB serialized; handed to the handler (or POSTed by http jobs).",
  example: { report: "daily" },
});

const exampleType = (jobTypes: JobTypeCatalog) =>
  jobTypes.accepted.includes("noop") ? "noop" : jobTypes.accepted[0];

/** The create body; `type` is an enum of the deployment's job types, so the document lists them. */
export function createJobSchema(jobTypes: JobTypeCatalog) {
  return z
    .strictObject({
      name: z
        .string()
        .max(LIMITS.nameChars)
        .optional()
        .openapi({ description: "Default: the type." }),
      type: jobTypeSchema(jobTypes),
      schedule: ScheduleSchema,
      payload: payload.optional(),
      target: TargetSchema.optional().openapi({ description: "Required for, and only for, http." }),
      retry: RetryInputSchema.optional(),
      misfirePolicy: MisfirePolicy.optional(),
      overlapPolicy: OverlapPolicy.optional(),
      maxConcurrent: maxConcurrent.optional(),
      priority: Priority.optional().openapi({ description: "Default normal." }),
      timeoutSeconds: timeoutSeconds.optional(),
      endAt: endAt.optional(),
      maxRuns: maxRuns.optional(),
      window: window.optional(),
      idempotencyKey: IdempotencyKeySchema.optional().openapi({
        description:
          "Or the Idempotency-Key header: the same key with the same body returns the first job (200); with another body, 409.",
      }),
    })
    .openapi("CreateJobRequest", {
      example: {
        name: "weekday report",
        type: exampleType(jobTypes),
        schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" },
        payload: { report: "daily" },
        retry: { maxAttempts: 3 },
      },
    });
}
export type CreateJobBody = z.infer<ReturnType<typeof createJobSchema>>;

export const EditJobSchema = z
  .strictObject({
    name: z.string().max(LIMITS.nameChars).optional(),
    schedule: ScheduleSchema.optional(),
    payload: payload.optional(),
    target: TargetSchema.optional(),
    retry: RetryInputSchema.optional().openapi({
      description: "Merged into the current retry policy.",
    }),
    misfirePolicy: MisfirePolicy.optional(),
    overlapPolicy: OverlapPolicy.optional(),
    maxConcurrent: maxConcurrent.optional(),
    priority: Priority.optional(),
    timeoutSeconds: timeoutSeconds.optional(),
    endAt: endAt.nullable().optional().openapi({
      description:
        "A new end instant (null removes it). It applies from the pending occurrence: when it leaves nothing more to run, the job completes; queued runs of occurrences after it are skipped.",
    }),
    maxRuns: maxRuns.nullable().optional().openapi({
      description:
        "A new count (null removes it), against the occurrences queued so far (occurrencesQueued): when they reach it, the job completes; runs already queued still run.",
    }),
    window: window.nullable().optional().openapi({
      description:
        "A new jitter window, or null to run on the occurrences again; applies from the next occurrence not yet claimed (runs already queued keep their planned time).",
    }),
    inFlight: z.enum(IN_FLIGHT_VALUES).optional().openapi({
      description:
        'When the edit changes the schedule, queued first attempts of occurrences the new schedule does not have: "skip" them when they start (default) or let them "complete". Every other queued run (the schedule keeps its occurrence, a retry, a replay, a trigger) runs the edited definition. Kept on the job.',
    }),
  })
  .openapi("EditJobRequest", {
    example: {
      schedule: { cron: "30 9 * * 1-5", timezone: "Europe/Berlin" },
      inFlight: "complete",
    },
  });
export type EditJobBody = z.infer<typeof EditJobSchema>;

// ---------------------------------------------------------------- parameters

export const JobIdParams = z.object({
  id: z.string().openapi({
    param: { name: "id", in: "path" },
    example: "01J9Z3V6K8N4QX2M7R5T0W1Y3B",
  }),
});
export const ListJobsQuery = z.strictObject({
  status: z.enum(JOB_STATUSES).optional(),
  limit: pageLimit,
  cursor,
});

export const CreateHeaders = z.object({
  "Idempotency-Key": IdempotencyKeySchema.optional(),
});
export const TriggerHeaders = z.object({
  "Idempotency-Key": IdempotencyKeySchema.optional().openapi({
    description:
      "The same key on the same job within 24 hours answers the run the first trigger queued (200) and queues nothing.",
  }),
});
export const EditHeaders = z.object({
  "If-Match": z.string().optional().openapi({
    description:
      'The version the edit is based on, as returned in ETag (e.g. "3"). Required: 428 without it, 412 when stale.',
    example: '"1"',
  }),
});

export const PauseBody = z
  .strictObject({
    running: z.enum(PAUSE_RUNNING).optional().openapi({
      description:
        'What becomes of runs in progress: "finish" (default) lets them finish; "cancel" cancels them (each ends CANCELLED within a heartbeat, cancelledBy "pause"). Queued runs wait for resume either way.',
    }),
  })
  .openapi("PauseRequest", { example: { running: "finish" } });

// ---------------------------------------------------------------- responses

const RetryPolicySchema = z
  .strictObject({
    maxAttempts: z.number().int(),
    initialDelaySeconds: z.number(),
    maxDelaySeconds: z.number(),
  })
  .openapi("RetryPolicy");

const PoliciesSchema = z
  .strictObject({
    retry: RetryPolicySchema,
    misfirePolicy: MisfirePolicy,
    overlapPolicy: OverlapPolicy,
    maxConcurrent: z.number().int(),
    inFlight: z.enum(IN_FLIGHT_VALUES),
  })
  .openapi("Policies");

const RunSummarySchema = z
  .strictObject({
    runId: z.string(),
    status: z.enum(RUN_STATUSES),
    scheduledFor: z.string(),
    attempt: z.number().int(),
    finishedAt: z.string(),
  })
  .openapi("RunSummary", {
    description:
      "The newest run whose handler ran to an end: succeeded, failed, dead (a run whose every delivery crashed its worker too) or cancelled while running; a skipped run, or one cancelled before it started, is not.",
  });

export const JobSchema = z
  .strictObject({
    id: z.string(),
    name: z.string(),
    type: z.string(),
    status: z.enum(JOB_STATUSES),
    schedule: ScheduleSchema,
    payload: z.unknown(),
    target: TargetSchema.nullable(),
    priority: Priority,
    timeoutSeconds: z.number().int(),
    window: z
      .string()
      .nullable()
      .openapi({ description: "The jitter window, or null: runs start on their occurrences." }),
    nextRunAt: z.string().nullable().openapi({ description: "The pending occurrence, if any." }),
    version: z.number().int().openapi({ description: "Send it back as If-Match to edit." }),
    policies: PoliciesSchema,
    createdAt: z.string(),
    updatedAt: z.string(),
    lastRun: RunSummarySchema.nullable(),
    endAt: z
      .string()
      .nullable()
      .openapi({ description: "No occurrence after it runs; null: none." }),
    maxRuns: z.number().int().nullable().openapi({
      description: "Occurrences queued in all before the job completes; null: no limit.",
    }),
    occurrencesQueued: z.number().int().openapi({
      description: "Occurrences of the schedule queued so far: what maxRuns counts.",
    }),
    dependents: z.array(z.string()).openapi({
      description:
        "Ids of the jobs whose `after` schedule names this one (sorted): each of this job's runs that ends as a dependent's `on` says queues one run of it.",
    }),
  })
  .openapi("Job");
export type JobDto = z.infer<typeof JobSchema>;

export const JobPageSchema = z
  .strictObject({ items: z.array(JobSchema), nextCursor: z.string().nullable() })
  .openapi("JobPage", {
    description:
      "A page may hold fewer items than the limit; the list ends when nextCursor is null.",
  });

// ---------------------------------------------------------------- batch create

/** The batch body as documented; each item is checked on its own (shared/api/jobs-batch-router.ts). */
export function createJobsBatchSchema(jobTypes: JobTypeCatalog) {
  return z
    .strictObject({
      jobs: z
        .array(createJobSchema(jobTypes))
        .min(1)
        .max(MAX_BATCH_JOBS)
        .openapi({
          description: `1 to ${MAX_BATCH_JOBS} jobs, each exactly a POST /jobs body, its idempotencyKey in the body. Each is answered on its own: one job's bad input does not refuse the others.`,
        }),
    })
    .openapi("CreateJobsBatchRequest", {
      example: {
        jobs: [
          { type: exampleType(jobTypes), schedule: { runAt: "2030-01-15T09:00:00Z" } },
          {
            name: "weekday report",
            type: exampleType(jobTypes),
            schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" },
            idempotencyKey: "report-2030-01-15",
          },
        ],
      },
    });
}

/** The envelope every batch body must have before its items are read. */
export const BatchEnvelope = z.strictObject({
  jobs: z.array(z.unknown()).min(1).max(MAX_BATCH_JOBS),
});

const BatchResultSchema = z
  .strictObject({
    index: z.number().int().openapi({ description: "The job's place in the request's jobs." }),
    status: z.number().int().openapi({
      description:
        "What POST /jobs would have answered for this job alone: 201 created, 200 the job an earlier request with its idempotencyKey created, or its 4xx/5xx.",
    }),
    job: JobSchema.optional().openapi({ description: "With 201 and 200: the job." }),
    error: ErrorSchema.shape.error.optional().openapi({
      description:
        "Otherwise: the error POST /jobs would have answered (its `field` names the job's own field, e.g. schedule.cron).",
    }),
  })
  .openapi("CreateJobsBatchResult");

export const BatchResultsSchema = z
  .strictObject({ results: z.array(BatchResultSchema) })
  .openapi("CreateJobsBatchResponse", {
    description: "One result per job, in the request's order.",
  });
