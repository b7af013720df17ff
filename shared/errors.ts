/**
 * Every failure the scheduler names has one root, as in Powertools'
 * idempotency errors: a `SchedulerError` carries a stable `code` (what logs,
 * the worker and the API's one mapping to HTTP, shared/api/errors.ts, decide
 * on), the `cause` it wraps (standard ErrorOptions), and a typed `context`: the
 * facts of the case, whose shape its code declares in `ErrorContexts`. Storage
 * turns DynamoDB's ConditionalCheckFailed / TransactionCanceled into these, so
 * callers decide on meaning, not on SDK exception names.
 *
 * A module that defines an error elsewhere (the worker's, the API's) declares
 * its code next to it by adding to `ErrorContexts`
 * (`declare module "…/errors.js" { interface ErrorContexts { … } }`).
 */
export interface ErrorContexts {
  /** A job that does not exist, or is another tenant's (HTTP 404). */
  readonly job_not_found: { readonly jobId: string };
  /** A run that does not exist, or is another tenant's (HTTP 404). */
  readonly run_not_found: { readonly runId: string };
  /** An edit carried a version that is no longer current (HTTP 412). */
  readonly version_mismatch: { readonly expected: number; readonly actual: number };
  /** A lifecycle change that the job's status, or what it would have to run, does not allow (HTTP 409). */
  readonly illegal_transition: { readonly action: string; readonly status: string };
  /** A create found its idempotency key taken; the create reads the earlier request's record. */
  readonly idempotency_key_taken: { readonly key: string };
  /** The same idempotency key was used with a different request body, or its job was deleted (HTTP 409). */
  readonly idempotency_conflict: { readonly key: string };
  /** A dead-letter replay of a run that is not dead, or was replayed already (HTTP 409). */
  readonly not_replayable: { readonly runId: string; readonly why: string };
  /** Another writer kept changing the item between our read and our conditional write (HTTP 503). */
  readonly concurrent_update: { readonly subject: "job" | "webhook secret" | "quota recount" };
  /**
   * A write conditioned on our fence failed: another worker or dispatcher owns the run or shard
   * now, or the run ended without this worker (`found`: the run as the failed write found it).
   */
  readonly fence_lost: {
    readonly resource: string;
    readonly fence: number;
    readonly found?: { readonly status: string; readonly fence: number };
  };
  /** A run cancel asked of a run that has already ended (HTTP 409, naming its status). */
  readonly run_ended: { readonly runId: string; readonly status: string };
  /**
   * A worker's write found a cancel requested on the run it still holds: it ends the run
   * CANCELLED instead. Also the reason of the handler's AbortSignal.
   */
  readonly run_cancelled: {
    readonly runId: string;
    readonly cancelledBy: string;
    readonly cancelRequestedAt: string;
  };
  /** Input that cannot be accepted, every problem by field (HTTP 400). */
  readonly validation_failed: { readonly issues: readonly FieldIssue[] };
}

export type SchedulerErrorCode = keyof ErrorContexts;

/** One problem with one input field. */
export interface FieldIssue {
  /** Dotted path of the offending input, e.g. `schedule.cron` or `retry.maxAttempts`. */
  readonly field: string;
  readonly message: string;
}

export class SchedulerError<Code extends SchedulerErrorCode = SchedulerErrorCode> extends Error {
  readonly code: Code;
  readonly context: ErrorContexts[Code];

  constructor(code: Code, message: string, context: ErrorContexts[Code], options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.context = context;
  }
}

export class JobNotFoundError extends SchedulerError<"job_not_found"> {
  constructor(jobId: string, options?: ErrorOptions) {
    super("job_not_found", `job ${jobId} not found`, { jobId }, options);
  }
}

export class RunNotFoundError extends SchedulerError<"run_not_found"> {
  constructor(runId: string) {
    super("run_not_found", `run ${runId} not found`, { runId });
  }
}

export class VersionMismatchError extends SchedulerError<"version_mismatch"> {
  constructor(expected: number, actual: number) {
    super("version_mismatch", `job is at version ${actual}, not ${expected}`, {
      expected,
      actual,
    });
  }
}

export class IllegalTransitionError extends SchedulerError<"illegal_transition"> {
  /** `why`, when given, says what other than the job's status stands in the way. */
  constructor(action: string, status: string, why?: string) {
    super(
      "illegal_transition",
      why === undefined
        ? `cannot ${action} a job that is ${status.toLowerCase()}`
        : `cannot ${action} the job: ${why}`,
      { action, status },
    );
  }
}

export class RunEndedError extends SchedulerError<"run_ended"> {
  constructor(runId: string, status: string) {
    super("run_ended", `run ${runId} has already ended: it is ${status.toLowerCase()}`, {
      runId,
      status,
    });
  }
}

/** The run was cancelled (by `cancelledBy`) while this worker held it: it ends CANCELLED, no retry. */
export class RunCancelledError extends SchedulerError<"run_cancelled"> {
  override readonly name = "RunCancelledError";

  constructor(
    runId: string,
    cancelledBy: string,
    cancelRequestedAt: string,
    options?: ErrorOptions,
  ) {
    super(
      "run_cancelled",
      `run cancelled (by ${cancelledBy} at ${cancelRequestedAt})`,
      { runId, cancelledBy, cancelRequestedAt },
      options,
    );
  }
}

export class IdempotencyConflictError extends SchedulerError<"idempotency_conflict"> {
  constructor(key: string, why = "was already used with a different request") {
    super("idempotency_conflict", `idempotency key "${key}" ${why}`, { key });
  }
}

export class NotReplayableError extends SchedulerError<"not_replayable"> {
  constructor(runId: string, why: string) {
    super("not_replayable", `run ${runId} cannot be replayed: ${why}`, { runId, why });
  }
}

/** Retry from a fresh read, or answer "busy": contention passes within moments. */
export class ConcurrentUpdateError extends SchedulerError<"concurrent_update"> {
  constructor(
    message: string,
    {
      subject = "job",
      ...options
    }: ErrorOptions & Partial<ErrorContexts["concurrent_update"]> = {},
  ) {
    super("concurrent_update", message, { subject }, options);
  }
}

export class FenceLostError extends SchedulerError<"fence_lost"> {
  constructor(
    resource: string,
    fence: number,
    options?: ErrorOptions,
    found?: { readonly status: string; readonly fence: number },
  ) {
    super(
      "fence_lost",
      found
        ? `lost ${resource} (fence ${fence}): it is ${found.status} under fence ${found.fence}`
        : `lost ${resource} (fence ${fence}) to another owner`,
      { resource, fence, ...(found ? { found } : {}) },
      options,
    );
  }
}

/**
 * A create found its idempotency key taken: the request may repeat an earlier
 * one (the caller reads that one's record), or use the key with another body.
 */
export class IdempotencyKeyTakenError extends SchedulerError<"idempotency_key_taken"> {
  constructor(key: string, options?: ErrorOptions) {
    super("idempotency_key_taken", `idempotency key "${key}" is taken`, { key }, options);
  }
}
