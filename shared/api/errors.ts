import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { DEFAULT_SETTINGS } from "../config.js";
import {
  type ErrorContexts,
  type FieldIssue,
  SchedulerError,
  type SchedulerErrorCode,
} from "../errors.js";
import type { QuotaName } from "../quotas/limits.js";
import {
  isContention,
  isThrottling,
  isTransientFailure,
  transactionCancellationCodes,
} from "../storage/dynamo-errors.js";
import type { ErrorCode } from "./schemas/errors.js";

declare module "../errors.js" {
  interface ErrorContexts {
    /** A request the API refuses itself (its body, headers, route or credentials); the context is the answer. */
    readonly request_refused: HttpAnswer;
  }
}

/**
 * The body is always `{ "error": { "code", "message", "field"? } }`;
 * validation errors also list every issue, and illegal transitions name the
 * job's current status, because a client can act on both without parsing the
 * message.
 */
interface ErrorBody {
  readonly error: {
    readonly code: ErrorCode;
    readonly message: string;
    readonly field?: string;
    readonly currentStatus?: string;
    readonly issues?: readonly FieldIssue[];
    readonly quota?: QuotaName;
  };
}

/** What the API sends for a failed request. */
export interface HttpAnswer {
  readonly status: ContentfulStatusCode;
  readonly body: ErrorBody;
  /** The headers a client acts on: Allow, ETag, Retry-After, WWW-Authenticate. */
  readonly headers?: Readonly<Record<string, string>>;
}

export interface ApiErrorDetails {
  readonly field?: string | undefined;
  readonly currentStatus?: string;
  readonly issues?: readonly FieldIssue[];
  readonly quota?: QuotaName;
  readonly headers?: Readonly<Record<string, string>>;
}

/** A refusal the API decides itself, before or beside the domain: thrown, then answered as it is. */
export class ApiError extends SchedulerError<"request_refused"> {
  override readonly name = "ApiError";

  constructor(
    status: ContentfulStatusCode,
    code: ErrorCode,
    message: string,
    details: ApiErrorDetails = {},
  ) {
    super("request_refused", message, answer(status, code, message, details));
  }
}

function answer(
  status: ContentfulStatusCode,
  code: ErrorCode,
  message: string,
  { field, currentStatus, issues, quota, headers }: ApiErrorDetails = {},
): HttpAnswer {
  return {
    status,
    body: {
      error: {
        code,
        message,
        ...(field !== undefined ? { field } : {}),
        ...(currentStatus !== undefined ? { currentStatus } : {}),
        ...(issues !== undefined && issues.length > 0 ? { issues } : {}),
        ...(quota !== undefined ? { quota } : {}),
      },
    },
    ...(headers !== undefined ? { headers } : {}),
  };
}

export function invalid(issues: readonly FieldIssue[]): ApiError {
  const first = issues[0];
  const message = first ? `${first.field}: ${first.message}` : "the request is invalid";
  return new ApiError(400, "validation_failed", message, { field: first?.field, issues });
}

export const notFound = (what = "no such resource") => new ApiError(404, "not_found", what);

// Contention passes within moments; 409 would tell the client its request itself conflicts.
const BUSY = {
  job: answer(503, "busy", "the job is being changed by another request; try again", {
    headers: { "Retry-After": "1" },
  }),
  "webhook secret": answer(503, "busy", "the webhook secret is being rotated by another request", {
    headers: { "Retry-After": "1" },
  }),
  // A recount goes on in the next request over a quota that may recount: one in 5 s
  // (DEFAULT_SETTINGS.quotaRecountMs); sooner, the request is refused from the stored usage.
  "quota recount": answer(
    503,
    "busy",
    "this tenant's quota usage is being recounted, part by part; try again to go on with it",
    { headers: { "Retry-After": String(Math.ceil(DEFAULT_SETTINGS.quotaRecountMs / 1000)) } },
  ),
} as const;

/**
 * A read whose storage failed for now (a 5xx past the SDK's retries, a timeout, a dropped
 * connection): it wrote nothing, so a retry is right. A write's such failure stays a 500: it may
 * have been applied, and "busy" tells the caller nothing of it was.
 */
const UNAVAILABLE = answer(
  503,
  "busy",
  "the scheduler's storage did not answer in time; try again",
  { headers: { "Retry-After": "1" } },
);

/**
 * Storage throttled past the SDK's retries (the table's, an index's or the account's capacity ran
 * out): answered as the job's contention is, but an outage of the API's, which the server-error
 * alarm counts and the log says as a failure with its cause.
 */
const THROTTLED = answer(503, "busy", BUSY.job.body.error.message, {
  headers: { "Retry-After": "1" },
});

/**
 * Whether an answer is a `busy` 503 for contention: the request met another request's write (its
 * tenant's own, as often as not), and a retry passes. Not a server error of the API's; storage
 * that throttled the request, or a read's storage that did not answer in time, is one.
 */
export function isBusyAnswer(reply: HttpAnswer): boolean {
  return Object.values(BUSY).some((busy) => busy === reply);
}

const INTERNAL = answer(500, "internal", "internal error");
// The worker's failures and storage's unmapped conditions never describe a request: if one
// reaches the API it is a fault of the API's own, answered without its details.
const internal = () => INTERNAL;

/**
 * The input an idempotency key came as: the `Idempotency-Key` header, or a create's body field
 * (a batch's only way). A 409 names the one the request used, for its client to change.
 */
type KeyField = "Idempotency-Key" | "idempotencyKey";

/** What an answer depends on of the request besides its error. */
interface RequestSeen {
  /** Whether it may write: a read's transient storage failure is "busy", a write's a 500. */
  readonly writes: boolean;
  readonly keyField: KeyField;
}

type Answers = {
  readonly [Code in SchedulerErrorCode]: (
    context: ErrorContexts[Code],
    error: SchedulerError<Code>,
    request: RequestSeen,
  ) => HttpAnswer;
};

/** The HTTP answer to each SchedulerError, by code: the one place status codes are decided. */
const ANSWERS: Answers = {
  request_refused: (context) => context,
  validation_failed: ({ issues }) => invalid(issues).context,
  job_not_found: ({ jobId }) => notFound(`job ${jobId} not found`).context,
  run_not_found: ({ runId }) => notFound(`run ${runId} not found`).context,
  version_mismatch: ({ actual }, { message }) =>
    answer(412, "version_mismatch", message, {
      field: "If-Match",
      headers: { ETag: etagOf(actual) },
    }),
  illegal_transition: ({ status }, { message }) =>
    answer(409, "illegal_transition", message, { currentStatus: status.toLowerCase() }),
  idempotency_conflict: (_, { message }, { keyField }) =>
    answer(409, "idempotency_conflict", message, { field: keyField }),
  not_replayable: (_, { message }) => answer(409, "not_replayable", message),
  run_ended: ({ status }, { message }) =>
    answer(409, "illegal_transition", message, { currentStatus: status.toLowerCase() }),
  concurrent_update: ({ subject }) => BUSY[subject],
  quota_exceeded: ({ quota, field }, { message }) =>
    answer(403, "quota_exceeded", message, { quota, field }),
  rate_limited: ({ quota, retryAfterSeconds }, { message }) =>
    answer(429, "rate_limited", message, {
      quota,
      headers: { "Retry-After": String(retryAfterSeconds) },
    }),
  idempotency_key_taken: internal,
  conditions_failed: internal,
  fence_lost: internal,
  run_cancelled: internal,
  job_failed: internal,
  target_refused: internal,
  run_timed_out: internal,
  worker_shutdown: internal,
  start_unwritten: internal,
  lease_lapsed: internal,
  run_token_invalid: (_, { message }) =>
    answer(401, "unauthorized", message, {
      headers: { "WWW-Authenticate": 'Bearer realm="scheduler-run"' },
    }),
  run_token_stale: (_, { message }) => answer(409, "stale_run_token", message),
};

function answerTo<Code extends SchedulerErrorCode>(
  error: SchedulerError<Code>,
  request: RequestSeen,
): HttpAnswer {
  const answerOf: Answers[Code] = ANSWERS[error.code];
  return answerOf(error.context, error, request);
}

const BY_STATUS: Partial<Record<number, ErrorCode>> = {
  400: "validation_failed",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  409: "conflict",
  412: "version_mismatch",
  413: "payload_too_large",
  415: "unsupported_media_type",
  428: "precondition_required",
  503: "busy",
};

/**
 * Every failure of a request as its HTTP answer: a SchedulerError by its code,
 * DynamoDB contention as "busy", a read's transient storage failure as "busy" too, the framework's own refusals by status, and
 * anything unforeseen as a 500 that hides its details.
 */
export function httpAnswerOf(
  error: unknown,
  request: RequestSeen = { writes: true, keyField: "Idempotency-Key" },
): HttpAnswer {
  if (error instanceof SchedulerError) return answerTo(error, request);
  if (isBusy(error)) return isThrottling(error) ? THROTTLED : BUSY.job;
  if (!request.writes && isTransientFailure(error)) return UNAVAILABLE;
  if (error instanceof HTTPException) {
    const code = BY_STATUS[error.status] ?? (error.status >= 500 ? "internal" : "conflict");
    return answer(error.status, code, error.message || "request refused");
  }
  return INTERNAL;
}

/**
 * Contention as storage judges it, and also a transaction that met a conflict while a condition
 * failed: the condition may have failed on the conflicting writer's change, so it is worth a retry.
 */
function isBusy(error: unknown): boolean {
  return (
    isContention(error) ||
    (transactionCancellationCodes(error)?.includes("TransactionConflict") ?? false)
  );
}

export const etagOf = (version: number) => `"${version}"`;
