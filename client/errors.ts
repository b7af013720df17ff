import { isRecord } from "./answers.js";
import type { components } from "./generated/api.js";

type ErrorBody = components["schemas"]["Error"]["error"];

/** The `code` of every error the API answers with (docs/api.md, "Errors"). */
export type ApiErrorCode = ErrorBody["code"];

/**
 * `unexpected_response`: an answer not in the API's error shape (a proxy's page, a redirect), or a
 * success without what the method relies on. API Gateway's own 401, 403, 413 and 429 take the
 * API's codes instead (errorOf).
 */
export type ErrorCode = ApiErrorCode | "unexpected_response";

export type FieldIssue = NonNullable<ErrorBody["issues"]>[number];

/** `timeout`: the client gave up on a request that had not finished in time (no answer to read). */
export type ClientErrorCode = ErrorCode | "timeout";

/**
 * Every error the client raises about a request, by `code`: an answer the API refused or that is
 * not the API's ({@link SchedulerApiError}), or no whole answer in time ({@link RequestTimeoutError}).
 */
export class SchedulerClientError<C extends ClientErrorCode = ClientErrorCode> extends Error {
  override readonly name: string = "SchedulerClientError";
  readonly code: C;

  constructor(code: C, message: string) {
    super(message);
    this.code = code;
  }
}

/**
 * An id the client refused to put in a request's path ("", "." or "..": a URL reads a dot segment
 * as a path), before anything was sent. A RangeError, as it was before it had a class of its own,
 * which the CLI tells apart from its other RangeErrors (a bug) as a malformed argument.
 */
export class NotAnIdError extends RangeError {}

/**
 * The request (the answer's body included) did not finish within the client's `timeoutMs`. A
 * request that is not safe to repeat (`repeatable` false: a create, batch or trigger without an
 * Idempotency-Key, whose repeat would do it again) may still have been applied, so it is not
 * retried: read before sending it again.
 */
export class RequestTimeoutError extends SchedulerClientError<"timeout"> {
  override readonly name = "RequestTimeoutError";

  constructor(
    readonly method: string,
    /** The request's path and query. */
    readonly path: string,
    readonly timeoutMs: number,
    /** Whether sending it again does what sending it once does (the client retried it if so). */
    readonly repeatable: boolean,
    /**
     * Whether it may have been applied, and sent again differently would do it again: a POST that
     * is safe to repeat only under its Idempotency-Key (a create, trigger, batch, replay or
     * rotation), even when the client retried it under the key; not a read, pause or edit.
     */
    mayHaveApplied = !repeatable,
  ) {
    super(
      "timeout",
      `${method} ${path} did not finish within ${timeoutMs} ms${mayHaveApplied ? ": it may have been applied" : ""}`,
    );
  }
}

/**
 * A request the API refused, typed by its `code`: `error.is("not_found")`
 * narrows it, and a stale `If-Match` is a {@link VersionConflictError}.
 */
export class SchedulerApiError<C extends ErrorCode = ErrorCode> extends SchedulerClientError<C> {
  override readonly name: string = "SchedulerApiError";
  readonly status: number;
  /** The offending input, e.g. `schedule.cron`. */
  readonly field: string | undefined;
  /** With `illegal_transition`: the job's status now, or the status a run ended in (a refused run cancel). */
  readonly currentStatus: ErrorBody["currentStatus"];
  /** With `validation_failed`: every issue. */
  readonly issues: readonly FieldIssue[];
  /**
   * With `busy` and `rate_limited`: the seconds the API asks to wait (Retry-After: its whole
   * seconds, or those to its HTTP date by the client's clock); undefined for one that is neither.
   */
  readonly retryAfterSeconds: number | undefined;
  /** With `quota_exceeded` and `rate_limited`: the tenant's quota the request is over. */
  readonly quota: ErrorBody["quota"];
  /** With `version_mismatch`: the job's version now (the answer's ETag). */
  readonly currentVersion: number | undefined;
  /** The refused request's method, where the client knows it (a GET can be sent again, a POST may have been applied). */
  readonly method: string | undefined;
  /**
   * The refused request as the API reference names it (`POST /jobs/{id}/pause`), where the client
   * knows it: with `method`, whether sending it again answers what it did (isRepeatableRoute).
   */
  readonly operation: string | undefined;

  constructor(
    status: number,
    code: C,
    message: string,
    details: {
      field?: string | undefined;
      currentStatus?: ErrorBody["currentStatus"];
      issues?: readonly FieldIssue[] | undefined;
      retryAfterSeconds?: number | undefined;
      currentVersion?: number | undefined;
      quota?: ErrorBody["quota"];
      method?: string | undefined;
      operation?: string | undefined;
    } = {},
  ) {
    super(code, message);
    this.status = status;
    this.field = details.field;
    this.currentStatus = details.currentStatus;
    this.issues = details.issues ?? [];
    this.retryAfterSeconds = details.retryAfterSeconds;
    this.currentVersion = details.currentVersion;
    this.quota = details.quota;
    this.method = details.method;
    this.operation = details.operation;
  }

  is<K extends C>(code: K): this is SchedulerApiError<K> {
    return (this.code as ErrorCode) === code;
  }
}

/** 412: the job changed since the version the edit was based on. */
export class VersionConflictError extends SchedulerApiError<"version_mismatch"> {
  override readonly name = "VersionConflictError";

  constructor(
    message: string,
    /** The version the edit was based on. */
    readonly expectedVersion: number,
    currentVersion: number | undefined,
  ) {
    super(412, "version_mismatch", message, { field: "If-Match", currentVersion });
  }
}

/** Whether `error` is an API error, with that code when one is given. */
export function isSchedulerApiError<K extends ErrorCode = ErrorCode>(
  error: unknown,
  code?: K,
): error is SchedulerApiError<K> {
  return error instanceof SchedulerApiError && (code === undefined || error.code === code);
}

const API_CODES: ReadonlySet<string> = new Set<ApiErrorCode>([
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
]);

function isErrorBody(body: unknown): body is { error: ErrorBody } {
  if (!isRecord(body)) return false;
  const inner = body.error;
  return (
    isRecord(inner) &&
    typeof inner.code === "string" &&
    API_CODES.has(inner.code) &&
    typeof inner.message === "string"
  );
}

/**
 * The issues of an error answer that are what FieldIssue says, a `field` and a `message` of text;
 * none for anything but a list. The rest of the shape is checked (isErrorBody) but not each issue,
 * and the CLI prints every issue as text: a server that is not the API (a newer one, a proxy, a
 * hostile host at the URL) sending `[5]` made the CLI's report of the error throw, and the bin end
 * with a stack trace instead of the error.
 */
function wellFormedIssues(issues: unknown): FieldIssue[] {
  if (!Array.isArray(issues)) return [];
  return issues.filter(
    (issue): issue is FieldIssue =>
      isRecord(issue) && typeof issue.field === "string" && typeof issue.message === "string",
  );
}

/** Parses `"3"` or `W/"3"`. */
function versionOfEtag(etag: string | null): number | null {
  const match = /^(?:W\/)?"(\d+)"$/.exec(etag?.trim() ?? "");
  return match?.[1] === undefined ? null : Number(match[1]);
}

/**
 * The API's code for an answer of these statuses that is not in its error shape: API Gateway's
 * own refusals, `{"message": "Unauthorized"}` from a JWT authorizer (401), a signature or token it
 * refused with IAM authorization (403, for every such failure: missing, wrong or expired), a body
 * over the function's payload limit (413), the stage's throttle (429), or a page of a proxy in
 * front. Each means what the API's answer of that status and code does. A 403 from API Gateway is
 * about credentials (the API's own 403s are in its shape), so it is `unauthorized`, as the API's
 * 401 for missing or unknown credentials, rather than `forbidden`, which the API keeps for a known
 * caller not allowed an admin route.
 */
const GATEWAY_CODES: Readonly<Partial<Record<number, ApiErrorCode>>> = {
  401: "unauthorized",
  403: "unauthorized",
  413: "payload_too_large",
  429: "rate_limited",
};

/** API Gateway's `{"message": "…"}`: its message, or null for any other body. */
function gatewayMessage(body: unknown): string | null {
  return isRecord(body) && typeof body.message === "string" ? body.message : null;
}

/**
 * The wait a `Retry-After` asks for, in ms from `now` (ms since the epoch): its delay-seconds
 * (digits only, RFC 9110 10.2.3), or the time to its HTTP date (0 once past; a date names its day
 * and month, so a number is never read as one: Date.parse takes "-3" and "1.5" for days of 2001).
 * Undefined without one, and for anything else: a negative, fractional, exponent or hex number is
 * no delay. However many digits, a whole number of ms.
 */
export function retryAfterMsOf(header: string | null, now: number): number | undefined {
  const value = header?.trim() ?? "";
  if (/^\d+$/.test(value)) return Math.min(Number(value) * 1000, Number.MAX_SAFE_INTEGER);
  if (!/[a-z]/i.test(value)) return undefined;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * The seconds a `Retry-After` asks to wait (retryAfterMsOf), a date's part of a second rounded
 * up: it is not due before then.
 */
export function retryAfterSecondsOf(header: string | null, now: number): number | undefined {
  const ms = retryAfterMsOf(header, now);
  return ms === undefined ? undefined : Math.ceil(ms / 1000);
}

/**
 * The error an answer that is not a success, to `operation` (its method and path template,
 * `POST /jobs/{id}/pause`), stands for; a `Retry-After` date's wait is counted from `now`.
 */
export function errorOf(
  response: Response,
  body: unknown,
  operation: string,
  now: () => number,
): SchedulerApiError {
  const method = operation.slice(0, operation.indexOf(" "));
  const retryAfterSeconds = retryAfterSecondsOf(response.headers.get("retry-after"), now());
  const gatewayCode = isErrorBody(body) ? undefined : GATEWAY_CODES[response.status];
  if (gatewayCode !== undefined) {
    const text = gatewayMessage(body) ?? (typeof body === "string" ? body : JSON.stringify(body));
    return new SchedulerApiError(response.status, gatewayCode, (text ?? "").slice(0, 300), {
      retryAfterSeconds,
      method,
      operation,
    });
  }
  if (!isErrorBody(body)) {
    const location = response.headers.get("location");
    const text =
      response.status >= 300 && response.status < 400
        ? `a redirect to ${location ?? "nowhere"}, which the API never answers: is the base URL the API's?`
        : typeof body === "string"
          ? body
          : JSON.stringify(body);
    return new SchedulerApiError(
      response.status,
      "unexpected_response",
      `${response.status} ${response.statusText}: ${text?.slice(0, 300) ?? ""}`,
      { retryAfterSeconds, method, operation },
    );
  }
  const { code, message, field, currentStatus, issues, quota } = body.error;
  return new SchedulerApiError(response.status, code, message, {
    field,
    currentStatus,
    issues: wellFormedIssues(issues),
    quota,
    retryAfterSeconds,
    currentVersion: versionOfEtag(response.headers.get("etag")) ?? undefined,
    method,
    operation,
  });
}
