/**
 * Every request and response shape of the HTTP API, declared once: the routes
 * validate with these schemas and the OpenAPI document is generated from
 * them. Checks that need the clock or the settings (schedule semantics,
 * payload size, cross-field rules) live in ./requests.ts.
 */
import { z } from "@hono/zod-openapi";
import { MAX_CONCURRENT_LIMIT, MISFIRE_POLICIES, OVERLAP_POLICIES } from "../policies.js";
import { ERROR_CODES } from "./errors.js";

export const LIMITS = {
  nameChars: 200,
  idempotencyKeyChars: 200,
  timeoutSeconds: { min: 1, max: 900, default: 300 },
  maxAttempts: 100,
  /** A week: a longer backoff is a schedule, not a retry. */
  retryDelaySeconds: 7 * 86_400,
  pageSize: { default: 20, max: 100 },
  previewCount: { default: 5, max: 100 },
  targetHeaders: 50,
  headerValueChars: 4096,
  urlChars: 2048,
  cursorChars: 2048,
  instantChars: 64,
  cronChars: 256,
  zoneChars: 64,
} as const;

export const JOB_STATUSES = ["active", "paused", "cancelled", "completed"] as const;
export const RUN_STATUSES = [
  "queued",
  "running",
  "succeeded",
  "failed",
  "dead",
  "skipped",
  "cancelled",
] as const;
export const PRIORITY_VALUES = ["high", "normal", "low"] as const;
export const IN_FLIGHT_VALUES = ["skip", "complete"] as const;

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
const Priority = z.enum(PRIORITY_VALUES);

const instant = (description: string, example: string) =>
  z.string().max(LIMITS.instantChars).openapi({ description, example, format: "date-time" });

// ---------------------------------------------------------------- schedules

export const RunAtScheduleSchema = z
  .strictObject({
    runAt: instant(
      'Once, at this instant: ISO-8601 with "Z" or a UTC offset, from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z. A past instant runs at once under the misfire policy.',
      "2030-01-15T09:00:00+01:00",
    ),
  })
  .openapi("RunAtSchedule");

export const CronScheduleSchema = z
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

export const EveryScheduleSchema = z
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

// ---------------------------------------------------------------- job input

const HEADER_NAME = /^[A-Za-z0-9][A-Za-z0-9-]*$/;
// Visible ASCII, spaces and tabs: anything else would make the worker's request fail at run time.
const HEADER_VALUE = /^[\x20-\x7E\t]*$/;

export const TargetSchema = z
  .strictObject({
    url: z
      .string()
      .max(LIMITS.urlChars)
      .refine(isHttpUrl, { message: "must be an absolute http:// or https:// URL" })
      .openapi({ example: "https://example.com/hooks/report", format: "uri" }),
    headers: z
      .record(
        z.string().max(256).regex(HEADER_NAME, "must be letters, digits and hyphens"),
        z.string().max(LIMITS.headerValueChars).regex(HEADER_VALUE, "must be printable ASCII"),
      )
      .superRefine(checkHeaderNames)
      .optional()
      .openapi({
        description:
          "Sent with every delivery. The scheduler sets Content-Type, Idempotency-Key, webhook-* and X-Scheduler-* itself.",
        example: { Authorization: "Bearer receiver-token" },
      }),
    timeoutSeconds: z
      .number()
      .int()
      .min(1)
      .max(LIMITS.timeoutSeconds.max)
      .optional()
      .openapi({ description: "Per-delivery timeout; default 30." }),
  })
  .openapi("HttpTarget", { description: "Where an http job POSTs its payload." });

const RESERVED_HEADERS = new Set([
  "content-type",
  "content-length",
  "host",
  "connection",
  "transfer-encoding",
  "idempotency-key",
]);

/** Names fetch would merge or that the worker sets itself would reach the receiver garbled. */
function checkHeaderNames(headers: Record<string, string>, ctx: z.RefinementCtx): void {
  const names = Object.keys(headers);
  if (names.length > LIMITS.targetHeaders) {
    ctx.addIssue({ code: "custom", message: `at most ${LIMITS.targetHeaders} headers` });
  }
  const seen = new Set<string>();
  for (const name of names) {
    const lower = name.toLowerCase();
    if (
      RESERVED_HEADERS.has(lower) ||
      lower.startsWith("x-scheduler-") ||
      lower.startsWith("webhook-")
    ) {
      ctx.addIssue({ code: "custom", path: [name], message: "is set by the scheduler itself" });
    } else if (seen.has(lower)) {
      ctx.addIssue({
        code: "custom",
        path: [name],
        message: "is given twice (names are case-insensitive)",
      });
    }
    seen.add(lower);
  }
}

function isHttpUrl(value: string): boolean {
  if (!URL.canParse(value)) return false;
  const url = new URL(value);
  return (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== "";
}

export const RetryInputSchema = z
  .strictObject({
    maxAttempts: z
      .number()
      .int()
      .min(1)
      .max(LIMITS.maxAttempts)
      .optional()
      .openapi({ description: "Attempts in all, the first included; default 5." }),
    initialDelaySeconds: z
      .number()
      .int()
      .min(0)
      .max(LIMITS.retryDelaySeconds)
      .optional()
      .openapi({ description: "Backoff ceiling after the first failure, doubling; default 30." }),
    maxDelaySeconds: z
      .number()
      .int()
      .min(0)
      .max(LIMITS.retryDelaySeconds)
      .optional()
      .openapi({ description: "Largest backoff; default 3600. Must be ≥ initialDelaySeconds." }),
  })
  .openapi("RetryInput", { description: "Exponential backoff with full jitter." });

const maxConcurrent = z
  .number()
  .int()
  .min(1)
  .max(MAX_CONCURRENT_LIMIT)
  .openapi({ description: 'Runs at once; only with overlapPolicy "allow". Default 1.' });

const timeoutSeconds = z
  .number()
  .int()
  .min(LIMITS.timeoutSeconds.min)
  .max(LIMITS.timeoutSeconds.max)
  .openapi({
    description:
      "A run is aborted after this long; default 300. At most 900, and at most what the deployment's workers can finish: their Lambda timeout less 15 s (885 with the default 900 s), else 400.",
  });

export const IdempotencyKeySchema = z
  .string()
  .min(1)
  .max(LIMITS.idempotencyKeyChars)
  .regex(/^[\x21-\x7E]+$/, "must be visible ASCII characters")
  .openapi({ example: "report-2030-01-15" });

const payload = z.unknown().openapi({
  description:
    "Any JSON, at most 64 KiB serialized; handed to the handler (or POSTed by http jobs).",
  example: { report: "daily" },
});

/** The create body; `type` is an enum of the deployment's job types, so the document lists them. */
export function createJobSchema(jobTypes: readonly [string, ...string[]]) {
  return z
    .strictObject({
      name: z
        .string()
        .max(LIMITS.nameChars)
        .optional()
        .openapi({ description: "Default: the type." }),
      type: z.enum(jobTypes).openapi({ description: "A built-in or registered job type." }),
      schedule: ScheduleSchema,
      payload: payload.optional(),
      target: TargetSchema.optional().openapi({ description: "Required for, and only for, http." }),
      retry: RetryInputSchema.optional(),
      misfirePolicy: MisfirePolicy.optional(),
      overlapPolicy: OverlapPolicy.optional(),
      maxConcurrent: maxConcurrent.optional(),
      priority: Priority.optional().openapi({ description: "Default normal." }),
      timeoutSeconds: timeoutSeconds.optional(),
      idempotencyKey: IdempotencyKeySchema.optional().openapi({
        description:
          "Or the Idempotency-Key header: the same key with the same body returns the first job (200); with another body, 409.",
      }),
    })
    .openapi("CreateJobRequest", {
      example: {
        name: "weekday report",
        type: jobTypes.includes("noop") ? "noop" : jobTypes[0],
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
export type PreviewRequestBody = z.infer<typeof PreviewRequestSchema>;

// ---------------------------------------------------------------- parameters

export const JobIdParams = z.object({
  id: z.string().openapi({
    param: { name: "id", in: "path" },
    example: "01J9Z3V6K8N4QX2M7R5T0W1Y3B",
  }),
});
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

const pageLimit = z.coerce
  .number()
  .int()
  .min(1)
  .max(LIMITS.pageSize.max)
  .optional()
  .openapi({ description: "Page size; default 20." });
const cursor = z
  .string()
  .max(LIMITS.cursorChars)
  .optional()
  .openapi({ description: "The nextCursor of the previous page." });

export const ListJobsQuery = z.strictObject({
  status: z.enum(JOB_STATUSES).optional(),
  limit: pageLimit,
  cursor,
});
export const PageQuery = z.strictObject({ limit: pageLimit, cursor });
export const PreviewQuery = z.strictObject({ count: previewCount.optional() });

export const CreateHeaders = z.object({
  "Idempotency-Key": IdempotencyKeySchema.optional(),
});
export const EditHeaders = z.object({
  "If-Match": z.string().optional().openapi({
    description:
      'The version the edit is based on, as returned in ETag (e.g. "3"). Required: 428 without it, 412 when stale.',
    example: '"1"',
  }),
});

// ---------------------------------------------------------------- responses

export const RetryPolicySchema = z
  .strictObject({
    maxAttempts: z.number().int(),
    initialDelaySeconds: z.number(),
    maxDelaySeconds: z.number(),
  })
  .openapi("RetryPolicy");

export const PoliciesSchema = z
  .strictObject({
    retry: RetryPolicySchema,
    misfirePolicy: MisfirePolicy,
    overlapPolicy: OverlapPolicy,
    maxConcurrent: z.number().int(),
    inFlight: z.enum(IN_FLIGHT_VALUES),
  })
  .openapi("Policies");

export const RunSummarySchema = z
  .strictObject({
    runId: z.string(),
    status: z.enum(RUN_STATUSES),
    scheduledFor: z.string(),
    attempt: z.number().int(),
    finishedAt: z.string(),
  })
  .openapi("RunSummary", { description: "The newest run that finished." });

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
    nextRunAt: z.string().nullable().openapi({ description: "The pending occurrence, if any." }),
    version: z.number().int().openapi({ description: "Send it back as If-Match to edit." }),
    policies: PoliciesSchema,
    createdAt: z.string(),
    updatedAt: z.string(),
    lastRun: RunSummarySchema.nullable(),
  })
  .openapi("Job");
export type JobDto = z.infer<typeof JobSchema>;

export const RunSchema = z
  .strictObject({
    runId: z.string(),
    jobId: z.string(),
    scheduledFor: z
      .string()
      .openapi({ description: "The occurrence; with jobId, its idempotency key." }),
    dueAt: z.string().openapi({ description: "When it should start (a retry's backoff time)." }),
    attempt: z.number().int(),
    status: z.enum(RUN_STATUSES),
    priority: Priority,
    enqueuedAt: z.string().nullable(),
    startedAt: z.string().nullable(),
    finishedAt: z.string().nullable(),
    durationMs: z.number().nullable(),
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
  })
  .openapi("Run");
export type RunDto = z.infer<typeof RunSchema>;

export const JobPageSchema = z
  .strictObject({ items: z.array(JobSchema), nextCursor: z.string().nullable() })
  .openapi("JobPage", {
    description:
      "A page may hold fewer items than the limit; the list ends when nextCursor is null.",
  });
export const RunPageSchema = z
  .strictObject({ items: z.array(RunSchema), nextCursor: z.string().nullable() })
  .openapi("RunPage");

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

export const FieldIssueSchema = z.strictObject({ field: z.string(), message: z.string() });

export const ErrorSchema = z
  .strictObject({
    error: z.strictObject({
      code: z.enum(ERROR_CODES),
      message: z.string(),
      field: z
        .string()
        .optional()
        .openapi({ description: "The offending input, e.g. schedule.cron." }),
      currentStatus: z
        .enum(JOB_STATUSES)
        .optional()
        .openapi({ description: "With illegal_transition: the job's status now." }),
      issues: z
        .array(FieldIssueSchema)
        .optional()
        .openapi({ description: "Every validation issue." }),
    }),
  })
  .openapi("Error", {
    example: {
      error: {
        code: "validation_failed",
        message: "schedule.cron: expected 5 or 6 fields",
        field: "schedule.cron",
      },
    },
  });

export const HealthSchema = z.strictObject({ status: z.literal("ok") }).openapi("Health");

export const WebhookSecretSchema = z
  .strictObject({
    secret: z
      .string()
      .regex(/^whsec_[A-Za-z0-9+/]+=*$/)
      .openapi({
        description:
          'The caller\'s webhook signing secret: `whsec_` + base64 of 32 random bytes. Deliveries carry `webhook-signature: v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">` keyed with the bytes after `whsec_` (Standard Webhooks).',
        example: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
      }),
  })
  .openapi("WebhookSecret");
