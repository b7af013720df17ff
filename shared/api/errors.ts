import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import {
  ConcurrentUpdateError,
  IdempotencyConflictError,
  IllegalTransitionError,
  JobNotFoundError,
  NotReplayableError,
  RunNotFoundError,
  VersionMismatchError,
} from "../errors.js";
import { transactionCancellationCodes } from "../storage/dynamo-errors.js";
import { type FieldIssue, ValidationError } from "../validation.js";
import type { ErrorCode } from "./schemas/errors.js";

/**
 * Every error the API answers with, and the only place status codes of
 * domain errors are decided. The body is always
 * `{ "error": { "code", "message", "field"? } }`; validation errors also list
 * every issue, and illegal transitions name the job's current status, because
 * a client can act on both without parsing the message.
 */
export interface ErrorBody {
  readonly error: {
    readonly code: ErrorCode;
    readonly message: string;
    readonly field?: string;
    readonly currentStatus?: string;
    readonly issues?: readonly FieldIssue[];
  };
}

export interface ApiErrorDetails {
  readonly field?: string | undefined;
  readonly currentStatus?: string;
  readonly issues?: readonly FieldIssue[];
  readonly headers?: Readonly<Record<string, string>>;
}

export class ApiError extends Error {
  override readonly name = "ApiError";

  constructor(
    readonly status: ContentfulStatusCode,
    readonly code: ErrorCode,
    message: string,
    readonly details: ApiErrorDetails = {},
  ) {
    super(message);
  }

  body(): ErrorBody {
    const { field, currentStatus, issues } = this.details;
    return {
      error: {
        code: this.code,
        message: this.message,
        ...(field !== undefined ? { field } : {}),
        ...(currentStatus !== undefined ? { currentStatus } : {}),
        ...(issues !== undefined && issues.length > 0 ? { issues } : {}),
      },
    };
  }
}

export function invalid(issues: readonly FieldIssue[]): ApiError {
  const first = issues[0];
  const message = first ? `${first.field}: ${first.message}` : "the request is invalid";
  return new ApiError(400, "validation_failed", message, { field: first?.field, issues });
}

export const notFound = (what = "no such resource") => new ApiError(404, "not_found", what);

const BY_STATUS: Partial<Record<number, ErrorCode>> = {
  400: "validation_failed",
  401: "unauthorized",
  404: "not_found",
  405: "method_not_allowed",
  409: "conflict",
  412: "version_mismatch",
  413: "payload_too_large",
  415: "unsupported_media_type",
  428: "precondition_required",
  503: "busy",
};

/** Domain and framework errors as API errors; anything unforeseen is a 500 that hides its details. */
export function toApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  if (error instanceof ValidationError) return invalid(error.issues);
  if (error instanceof JobNotFoundError) return notFound(`job ${error.jobId} not found`);
  if (error instanceof RunNotFoundError) return notFound(`run ${error.runId} not found`);
  if (error instanceof VersionMismatchError) {
    return new ApiError(412, "version_mismatch", error.message, {
      field: "If-Match",
      headers: { ETag: etagOf(error.actual) },
    });
  }
  if (error instanceof IllegalTransitionError) {
    return new ApiError(409, "illegal_transition", error.message, {
      currentStatus: error.status.toLowerCase(),
    });
  }
  if (error instanceof IdempotencyConflictError) {
    return new ApiError(409, "idempotency_conflict", error.message, { field: "idempotencyKey" });
  }
  if (error instanceof NotReplayableError) {
    return new ApiError(409, "not_replayable", error.message);
  }
  if (error instanceof ConcurrentUpdateError || isContention(error)) {
    // Contention passes within moments; 409 would tell the client its request itself conflicts.
    return new ApiError(503, "busy", "the job is being changed by another request; try again", {
      headers: { "Retry-After": "1" },
    });
  }
  if (error instanceof HTTPException) {
    const code = BY_STATUS[error.status] ?? (error.status >= 500 ? "internal" : "conflict");
    return new ApiError(error.status, code, error.message || "request refused");
  }
  return new ApiError(500, "internal", "internal error");
}

function isContention(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (
    error.name === "ThrottlingException" ||
    error.name === "ProvisionedThroughputExceededException" ||
    error.name === "RequestLimitExceeded"
  ) {
    return true;
  }
  return transactionCancellationCodes(error)?.includes("TransactionConflict") ?? false;
}

export const etagOf = (version: number) => `"${version}"`;
