/**
 * Domain errors, one class per case. Storage turns DynamoDB's
 * ConditionalCheckFailed / TransactionCanceled into these so that callers
 * (the API, the worker) decide on meaning, not on SDK exception names.
 */
export class SchedulerError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

export class JobNotFoundError extends SchedulerError {
  constructor(readonly jobId: string) {
    super(`job ${jobId} not found`);
  }
}

export class RunNotFoundError extends SchedulerError {
  constructor(readonly runId: string) {
    super(`run ${runId} not found`);
  }
}

/** An edit carried a version that is no longer current (HTTP 412). */
export class VersionMismatchError extends SchedulerError {
  constructor(
    readonly expected: number,
    readonly actual: number,
  ) {
    super(`job is at version ${actual}, not ${expected}`);
  }
}

/** A lifecycle change that the job's status does not allow (HTTP 409). */
export class IllegalTransitionError extends SchedulerError {
  constructor(
    readonly action: string,
    readonly status: string,
  ) {
    super(`cannot ${action} a job that is ${status.toLowerCase()}`);
  }
}

/** The same idempotency key was used with a different request body (HTTP 409). */
export class IdempotencyConflictError extends SchedulerError {
  constructor(readonly key: string) {
    super(`idempotency key "${key}" was already used with a different request`);
  }
}

/** Another writer changed the item between our read and our conditional write; retry from a fresh read. */
export class ConcurrentUpdateError extends SchedulerError {}

/** A write conditioned on our fence failed: another worker or dispatcher owns the run or shard now. */
export class FenceLostError extends SchedulerError {
  constructor(
    readonly resource: string,
    readonly fence: number,
    options?: { cause?: unknown },
  ) {
    super(`lost ${resource} (fence ${fence}) to another owner`, options);
  }
}

/** A dead-letter replay of a run that is not dead, or was replayed already (HTTP 409). */
export class NotReplayableError extends SchedulerError {
  constructor(
    readonly runId: string,
    readonly why: string,
  ) {
    super(`run ${runId} cannot be replayed: ${why}`);
  }
}

/**
 * A create found its idempotency key taken: the request may repeat an earlier
 * one (the caller reads that one's record), or use the key with another body.
 */
export class IdempotencyKeyTakenError extends SchedulerError {
  constructor(
    readonly key: string,
    options?: { cause?: unknown },
  ) {
    super(`idempotency key "${key}" is taken`, options);
  }
}
