import { NotAnIdError } from "../errors.js";
import {
  type ErrorCode,
  isSchedulerApiError,
  RequestTimeoutError,
  WaitTimeoutError,
} from "../index.js";
import { brokeOnceOpen, isRepeatableRoute } from "../retries.js";

/**
 * What `scheduler` exits with, so that scripts can tell outcomes apart
 * (docs/cli.md lists them).
 */
export const EXIT = {
  ok: 0,
  /**
   * Anything unforeseen: a 5xx, an answer not in the API's error shape, a bug; a create, trigger,
   * batch, replay or rotation that timed out after the client's retries under its key, or was
   * sent once (a batch with a job without a key): it may have been applied.
   */
  failed: 1,
  /** The command line itself: unknown command or option, a missing or malformed argument. */
  usage: 2,
  /** The API refused the input (400, 413, 415, 428): nothing was written. */
  invalid: 3,
  /** No such job or run for this caller (404). */
  notFound: 4,
  /** Not allowed in the job's status, an idempotency or replay conflict (409). */
  conflict: 5,
  /** The job changed since the version the edit was based on (412). */
  versionConflict: 6,
  /**
   * Missing or unknown credentials (401, or API Gateway's 403 for a refused signature), or no AWS
   * credentials to sign with.
   */
  unauthorized: 7,
  /**
   * Try again: the API is busy with the same job (503), over the requests per second (429), or
   * a request whose repeat answers what it did (a read, PUT, DELETE, pause, resume, cancel, edit)
   * did not finish in time (--request-timeout, or API Gateway's 502 or 504).
   */
  busy: 8,
  /** The API could not be reached. */
  unreachable: 9,
  /** A wait (`runs watch --count`) ended before what it waited for happened. */
  timedOut: 10,
  /** The API has no such operation (405): a server older than this CLI. */
  unsupported: 11,
  /** Over one of the tenant's quotas (403 quota_exceeded): nothing was written. */
  quotaExceeded: 12,
  /** Not allowed for this caller (403 forbidden: an admin command by a tenant that is not one). */
  forbidden: 13,
  /**
   * Ctrl-C (SIGINT): a read it aborted (interruptible), or a write still running 2 s later
   * (bin/scheduler.mjs), whose requests may have been applied. 128 + SIGINT's 2, as a shell reports
   * a program the signal ended.
   */
  interrupted: 130,
} as const;

/** Raised to end a command with an exit code and a message of its own. */
export class CliExit extends Error {
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}

const BY_CODE: Readonly<Record<ErrorCode, number>> = {
  validation_failed: EXIT.invalid,
  malformed_json: EXIT.invalid,
  payload_too_large: EXIT.invalid,
  unsupported_media_type: EXIT.invalid,
  precondition_required: EXIT.invalid,
  unauthorized: EXIT.unauthorized,
  not_found: EXIT.notFound,
  method_not_allowed: EXIT.unsupported,
  conflict: EXIT.conflict,
  illegal_transition: EXIT.conflict,
  idempotency_conflict: EXIT.conflict,
  not_replayable: EXIT.conflict,
  stale_run_token: EXIT.conflict,
  version_mismatch: EXIT.versionConflict,
  busy: EXIT.busy,
  // Over the tenant's requests per second: try again after Retry-After, as with busy.
  rate_limited: EXIT.busy,
  quota_exceeded: EXIT.quotaExceeded,
  forbidden: EXIT.forbidden,
  internal: EXIT.failed,
  unexpected_response: EXIT.failed,
};

/**
 * The AWS SDK's error for credentials its chain could not find or load (no profile, keys or role;
 * a profile that names none; an SSO session to sign in to again): nothing was sent.
 */
export function isMissingCredentials(error: unknown): error is Error {
  return (
    error instanceof Error &&
    (error.name === "CredentialsProviderError" || error.name === "TokenProviderError")
  );
}

/** Node's fetch fails with a TypeError whose cause names the network error. */
export function isUnreachable(error: unknown): boolean {
  return error instanceof TypeError && error.message === "fetch failed";
}

/** Whether `operation` ("POST /jobs/{id}/pause") answers, sent again, what it did sent once. */
function repeatableOperation(operation: string): boolean {
  const [method = "", path = ""] = operation.split(" ");
  return isRepeatableRoute(method, path);
}

export function exitCodeOf(error: unknown): number {
  if (isSchedulerApiError(error)) {
    // A proxy's page answered 503 (Service Unavailable) means what the API's busy does, and the
    // client retried it alike. (API Gateway's own 401, 403, 413 and 429 come with the API's codes.)
    if (error.code === "unexpected_response" && error.status === 503) return EXIT.busy;
    // API Gateway's 502 (the API's function failed) and 504 (it ran out of time): a request whose
    // repeat answers what it did (a read, PUT, DELETE, pause, resume, cancel, edit) can be run
    // again, as after a timeout; a create or trigger may have been applied, as after a 500.
    if (error.code === "unexpected_response" && (error.status === 502 || error.status === 504))
      return error.operation !== undefined && repeatableOperation(error.operation)
        ? EXIT.busy
        : EXIT.failed;
    // A code this CLI does not know is unforeseen: a batch's results pass each job's refusal on as
    // the server wrote it (a newer server's code), and an exit code of undefined exited 0. Its own
    // codes only: "constructor" or "__proto__" would find Object's, which is no exit code.
    return Object.hasOwn(BY_CODE, error.code) ? BY_CODE[error.code] : EXIT.failed;
  }
  // A timed-out request whose repeat answers what it did (a read, PUT, DELETE, pause, resume,
  // cancel, edit) can be run again as after a 503. Any other POST may have been applied, as after
  // a 500: even one the client retried under an Idempotency-Key, since the command run again sends
  // the same key only when the user gave it (create, trigger, rotate and replay make a new one each
  // run: a second create or trigger would make another; a second rotation would cut off the secret
  // receivers verify with).
  if (error instanceof RequestTimeoutError)
    return isRepeatableRoute(error.method, new URL(error.path, "http://api").pathname)
      ? EXIT.busy
      : EXIT.failed;
  if (error instanceof CliExit) return error.exitCode;
  // An id argument ("", "." or "..") the client refused to send: malformed, nothing was sent.
  if (error instanceof NotAnIdError) return EXIT.usage;
  if (isMissingCredentials(error)) return EXIT.unauthorized;
  if (error instanceof WaitTimeoutError) return EXIT.timedOut;
  if (isUnreachable(error)) return EXIT.unreachable;
  return EXIT.failed;
}

/**
 * Whether a create, trigger, replay or rotation that failed so may have been applied: it exits 1
 * (a 5xx but 503, an answer not the API's, a timeout, API Gateway's 502 or 504) or its connection
 * broke once open (exit 9). A 4xx answer (400, 401, 403, 404, 409, 422, 429…) says nothing was written, as a 503
 * does (exit 8); a request never sent (an API not reachable, a refused argument) wrote nothing.
 */
export function mayHaveBeenApplied(error: unknown): boolean {
  if (isSchedulerApiError(error) && error.status >= 400 && error.status < 500) return false;
  return exitCodeOf(error) === EXIT.failed || brokeOnceOpen(error);
}
