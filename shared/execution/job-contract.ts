import { SchedulerError } from "../errors.js";
import { asDoubles } from "../exact-json.js";
import { fieldIssuesOf, type JobTypeDefinition, type PayloadOf } from "../job-types/registry.js";
import type { HttpTarget, RunTrigger } from "../model.js";

/** What a job handler is given for one run; `payload` is typed by the job type's declaration. */
export interface JobContext<T extends string = string> {
  readonly jobId: string;
  readonly tenantId: string;
  readonly runId: string;
  readonly type: T;
  readonly scheduledFor: string;
  readonly attempt: number;
  /** `<jobId>@<scheduledFor>`: the same for every attempt of an occurrence. */
  readonly idempotencyKey: string;
  readonly payload: PayloadOf<T>;
  readonly target: HttpTarget | undefined;
  /**
   * For a job with an `after` schedule: the upstream run whose ending queued this run (its job,
   * run id and occurrence); absent for a run of the schedule's own times, a trigger or a replay.
   */
  readonly trigger?: RunTrigger;
  /**
   * Fires at the job's timeout, on a cancel request, when another worker has taken the run over,
   * or once the run's lease, as this worker last wrote it, has run out while its heartbeats
   * failed (`reason`: a LeaseLapsedError; the worker writes nothing more).
   */
  readonly signal: AbortSignal;
  /** The fence of this start: a later start of the run (its lease lapsed) has a higher one. */
  readonly fence: number;
  /**
   * An async (`target.mode: "async"`) run's token for this delivery, made by the worker, which
   * wrote its hash to the run first; absent for any other run.
   */
  readonly runToken?: string;
}

/**
 * What a handler returns when the run goes on elsewhere (an async target answered 202): the worker
 * records the hand-over, acknowledges the message and stops heartbeating; the run stays RUNNING
 * under a lease the target extends until it completes the run.
 */
export class RunHandedOver {
  readonly handedOver = true;
}

/** Resolves: the run SUCCEEDED. Throws: it failed (see JobError). */
export type JobHandler<T extends string = string> = (ctx: JobContext<T>) => Promise<unknown>;

declare module "../errors.js" {
  interface ErrorContexts {
    /**
     * A handler's failure, reported on purpose; the run is retried or dead by `retryable`, its
     * retry no sooner than `retryAfterMs` (within the job's `maxDelaySeconds`).
     */
    readonly job_failed: { readonly retryable: boolean; readonly retryAfterMs?: number };
  }
}

/** A failure a handler reports on purpose; `retryable: false` sends the run to the dead letters at once. */
export class JobError extends SchedulerError<"job_failed"> {
  override readonly name = "JobError";

  constructor(
    message: string,
    options: { retryable: boolean; retryAfterMs?: number; cause?: unknown },
  ) {
    const { retryable, retryAfterMs } = options;
    super(
      "job_failed",
      message,
      { retryable, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) },
      { cause: options.cause },
    );
  }

  get retryable(): boolean {
    return this.context.retryable;
  }

  /** How long the failure asked its retry to wait at the least (a receiver's `Retry-After`). */
  get retryAfterMs(): number | undefined {
    return this.context.retryAfterMs;
  }
}

/** Any other exception is treated as retryable: a crash is more often transient than permanent. */
export function isRetryable(error: unknown): boolean {
  return error instanceof JobError ? error.retryable : true;
}

/** The handler of each type name, as the worker looks them up. */
export type HandlerRegistry = ReadonlyMap<string, JobHandler>;

/** A job type with its handler, ready for a HandlerRegistry. */
export interface RegisteredJobType {
  readonly definition: JobTypeDefinition;
  readonly handler: JobHandler;
}

/**
 * A type's definition and its handler, typed together: `handle` gets the
 * payload its schema produces. The payload is parsed again before each run
 * (a job stored before its type's schema changed may not match it): a payload
 * that does not parse fails the run without a retry, naming the field. A number a
 * double would change is handed over as its digits (lossless-json's `LosslessNumber`,
 * `String()` gives them) wherever the schema takes it so (`z.unknown()`); a schema that
 * asks for a number there gets it as JSON.parse reads it, as the API checked it.
 */
export function jobType<T extends string>(
  definition: JobTypeDefinition<T>,
  handle: JobHandler<T>,
): RegisteredJobType {
  const handler: JobHandler = async (ctx) => {
    const exact = definition.payload.safeParse(ctx.payload);
    const parsed = exact.success ? exact : definition.payload.safeParse(asDoubles(ctx.payload));
    if (!parsed.success) {
      const issues = fieldIssuesOf(parsed.error.issues, "payload");
      const text = issues.map((issue) => `${issue.field}: ${issue.message}`).join("; ");
      throw new JobError(`the payload does not fit type "${definition.name}": ${text}`, {
        retryable: false,
      });
    }
    return handle({ ...ctx, type: definition.name, payload: parsed.data });
  };
  return { definition, handler };
}

/** The worker's registry: each type's name to its handler. */
export function handlerRegistry(types: readonly RegisteredJobType[]): Map<string, JobHandler> {
  return new Map(types.map((t) => [t.definition.name, t.handler]));
}
