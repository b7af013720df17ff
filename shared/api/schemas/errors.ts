/** The one error shape every failed request is answered with. */
import { z } from "@hono/zod-openapi";
import { JOB_STATUSES, QUOTA_NAMES, RUN_STATUSES } from "./common.js";

/** Every `error.code` the API answers with; ../errors.ts decides which error gets which. */
const ERROR_CODES = [
  "validation_failed",
  "malformed_json",
  "unauthorized",
  "not_found",
  "method_not_allowed",
  "conflict",
  "illegal_transition",
  "idempotency_conflict",
  "not_replayable",
  "stale_run_token",
  "version_mismatch",
  "precondition_required",
  "payload_too_large",
  "unsupported_media_type",
  "busy",
  "quota_exceeded",
  "rate_limited",
  "forbidden",
  "internal",
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

type JobStatus = (typeof JOB_STATUSES)[number];
type RunStatus = (typeof RUN_STATUSES)[number];
/** A job's status (a lifecycle change refused) or a run's (a cancel of a run that has ended). */
const CURRENT_STATUSES: readonly (JobStatus | RunStatus)[] = [
  ...JOB_STATUSES,
  ...RUN_STATUSES.filter(
    (status): status is Exclude<RunStatus, JobStatus> =>
      !(JOB_STATUSES as readonly string[]).includes(status),
  ),
];

const FieldIssueSchema = z.strictObject({ field: z.string(), message: z.string() });

export const ErrorSchema = z
  .strictObject({
    error: z.strictObject({
      code: z.enum(ERROR_CODES),
      message: z.string(),
      field: z
        .string()
        .optional()
        .openapi({ description: "The offending input, e.g. schedule.cron." }),
      currentStatus: z.enum(CURRENT_STATUSES).optional().openapi({
        description:
          "With illegal_transition: the job's status now, or for a run's cancel the status the run ended in.",
      }),
      issues: z
        .array(FieldIssueSchema)
        .optional()
        .openapi({ description: "Every validation issue." }),
      quota: z.enum(QUOTA_NAMES).optional().openapi({
        description:
          "With quota_exceeded and rate_limited: the tenant's quota the request is over.",
      }),
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
