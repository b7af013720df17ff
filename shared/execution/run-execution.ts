import { performance } from "node:perf_hooks";
import { sleep } from "../clock.js";
import { WORKER_RESULT_MARGIN_MS } from "../config.js";
import type { Engine } from "../engine.js";
import { FenceLostError, RunCancelledError, SchedulerError } from "../errors.js";
import { occurrenceKey } from "../keys.js";
import type { Job } from "../model.js";
import { runLogKeys } from "../observability.js";
import { type ReceivedRun, setVisibility } from "../queue/work-queue.js";
import { extendAdmission } from "../storage/admission.js";
import type { HeldRun } from "../storage/run-fence.js";
import { extendLease } from "../storage/run-heartbeat.js";
import { extendRunSlot } from "../storage/run-slots.js";
import { boundedText, textHead } from "../storage/stored-text.js";
import type { RunSlot } from "../storage/tenant-quotas.js";
import {
  type HandlerRegistry,
  isRetryable,
  type JobContext,
  JobError,
  RunHandedOver,
} from "./job-contract.js";
import { LeaseLapsedError, watchLease } from "./lease-watch.js";
import { refusalIn } from "./outbound.js";
import type { RunResult } from "./run-outcome.js";

/** What running a job's handler needs from the worker. */
export interface RunExecutionDeps {
  readonly engine: Engine;
  readonly handlers: HandlerRegistry;
  /**
   * Tests stretch this past the lease to play a worker that froze (its lease's end, as it last
   * wrote it, then stops its handler first). Defaults to lease / 3, at most `MAX_HEARTBEAT_MS`: a
   * heartbeat is also how the worker learns its run was cancelled.
   */
  readonly heartbeatEveryMs?: number;
  /** Fires when a long-lived worker stops: runs in progress are released to QUEUED, not failed. */
  readonly shutdown?: AbortSignal;
  /** Milliseconds this worker has left (a Lambda's remaining time): a run must end before it does. */
  readonly remainingMs?: () => number;
}

/** The longest wait between heartbeats, so a cancel request is seen within it. */
export const MAX_HEARTBEAT_MS = 10_000;

/** How often a run's heartbeat beats: lease / 3, at most `MAX_HEARTBEAT_MS`, unless a test says otherwise. */
export function heartbeatEveryMs(
  deps: Pick<RunExecutionDeps, "engine" | "heartbeatEveryMs">,
): number {
  return deps.heartbeatEveryMs ?? Math.min(deps.engine.settings.leaseMs / 3, MAX_HEARTBEAT_MS);
}

type Outcome =
  | { readonly kind: "succeeded" }
  | { readonly kind: "handed-over" }
  | { readonly kind: "cancelled"; readonly error: RunCancelledError }
  | { readonly kind: "released"; readonly reason: string }
  | Extract<RunResult, { kind: "failed" }>
  | { readonly kind: "fence-lost"; readonly error: FenceLostError }
  | { readonly kind: "lease-lapsed"; readonly error: LeaseLapsedError };

declare module "../errors.js" {
  interface ErrorContexts {
    /** A run stopped at its timeout, or before the worker's own time limit: retried like a failure. */
    readonly run_timed_out: { readonly timeoutMs: number };
    /** A run stopped because its worker is shutting down: released to another worker. */
    readonly worker_shutdown: Readonly<Record<string, never>>;
    /** A run whose start, held unwritten, failed its first write twice: released, to run again. */
    readonly start_unwritten: Readonly<Record<string, never>>;
  }
}

class RunTimeoutError extends SchedulerError<"run_timed_out"> {
  override readonly name = "RunTimeoutError";

  constructor(message: string, timeoutMs: number) {
    super("run_timed_out", message, { timeoutMs });
  }
}

class WorkerShutdownError extends SchedulerError<"worker_shutdown"> {
  override readonly name = "WorkerShutdownError";

  constructor() {
    super("worker_shutdown", "worker shutting down", {});
  }
}

class StartUnwrittenError extends SchedulerError<"start_unwritten"> {
  override readonly name = "StartUnwrittenError";

  constructor() {
    super(
      "start_unwritten",
      "released: its start, held unwritten, failed its first write twice",
      {},
    );
  }
}

/**
 * Runs the job's handler while a heartbeat extends the message's visibility,
 * the run's lease and its tenant's concurrent-runs slot every lease/3 (at most
 * every 10 s). A heartbeat that fails its fence aborts the handler's signal:
 * another worker owns the run now, or (RunCancelledError, the signal's reason)
 * a cancel of the run was requested. So does the lease, as the heartbeats last
 * wrote it, running out (LeaseLapsedError: they failed since, and another worker
 * may take the run over). In each case the outcome no longer
 * waits for the handler.
 */
export async function execute(
  deps: RunExecutionDeps,
  received: ReceivedRun,
  job: Job,
  run: HeldRun,
  tracked: boolean,
  /** The tenant's concurrent-runs slot, or null when it has no limit. */
  slot: RunSlot | null,
  /** An async delivery's run token (`issueRunToken`); undefined for any other run. */
  runToken?: string,
): Promise<Outcome> {
  const { engine } = deps;
  const handler = deps.handlers.get(job.type);
  if (!handler)
    return {
      kind: "failed",
      error: `no handler registered for job type "${job.type}"`,
      retryable: false,
    };

  const controller = new AbortController();
  const onShutdown = () => controller.abort(new WorkerShutdownError());
  deps.shutdown?.addEventListener("abort", onShutdown, { once: true });
  // The job's timeout, or less when the worker itself (a Lambda) would be stopped first.
  const jobTimeoutMs = job.timeoutSeconds * 1000;
  const workerLeftMs = deps.remainingMs
    ? deps.remainingMs() - WORKER_RESULT_MARGIN_MS
    : Number.POSITIVE_INFINITY;
  const timeoutMs = Math.max(0, Math.min(jobTimeoutMs, workerLeftMs));
  const timeout = setTimeout(
    () =>
      controller.abort(
        new RunTimeoutError(
          timeoutMs < jobTimeoutMs
            ? `stopped after ${Math.round(timeoutMs / 1000)} s: the worker's own time limit was near`
            : `timed out after ${job.timeoutSeconds} s`,
          timeoutMs,
        ),
      ),
    timeoutMs,
  );
  const lease = watchLease(
    engine,
    controller,
    new Date(run.leaseUntil ?? engine.clock().getTime() + engine.settings.leaseMs),
  );
  const stopHeartbeat = new AbortController();
  const heartbeat = (async () => {
    const every = heartbeatEveryMs(deps);
    // A start still unwritten is written by the first beat, before the reaper would re-send the run.
    const unwritten = run.unwrittenStart?.written === false ? run.unwrittenStart : null;
    // Failed writes of the start while it is unwritten (see the catch below).
    let unwrittenFailures = 0;
    let wait =
      unwritten === null
        ? every
        : Math.max(0, Math.min(every, unwritten.writeBy.getTime() - engine.clock().getTime()));
    // Once the handler's signal aborted (the lease lapsed, say), this worker writes nothing more.
    while (!stopHeartbeat.signal.aborted && !controller.signal.aborted) {
      await sleep(wait, stopHeartbeat.signal);
      // The next beat is due `every` after this one began, however long its requests take: a slow
      // answer (an SQS call takes up to its 5 s request timeout) must not push the next lease
      // write past the lease's end, which the lease watch would take for a lapse.
      const beganAt = performance.now();
      wait = every;
      if (stopHeartbeat.signal.aborted || lease.lapsed()) return;
      try {
        const readAt = engine.clock();
        const leaseUntil = await extendLease(engine, run, readAt);
        lease.extendTo(leaseUntil, readAt, beganAt);
        // Lapsed while the write was under way: the run may be another's now, nothing more is written.
        if (controller.signal.aborted) return;
        // Side by side, each best effort or its own: SQS refuses a receipt handle for good once the
        // message was received again (by a worker that found the run held and acknowledged it), and
        // were that to skip the others, the run's admission and its concurrent-runs slot would lapse
        // while it runs, letting a run past its overlap policy and the tenant past its quota. The
        // run's own lease is what keeps it; the reaper covers the rest.
        await Promise.all([
          setVisibility(
            engine.sqs,
            received.queueUrl,
            received.receiptHandle,
            engine.settings.leaseMs / 1000,
          ).catch((error: unknown) => {
            engine.obs.log.warn("heartbeat could not extend the message's visibility", {
              ...runLogKeys(run),
              error: String(error),
            });
          }),
          tracked ? extendAdmission(engine, run.jobId, run.runId, leaseUntil) : undefined,
          slot !== null ? extendRunSlot(engine, slot, leaseUntil) : undefined,
        ]);
        wait = Math.max(0, every - (performance.now() - beganAt));
      } catch (error) {
        if (error instanceof FenceLostError || error instanceof RunCancelledError) {
          controller.abort(error);
          return;
        }
        // Nothing tells the others that a start held unwritten holds its run: a cancel ends it
        // CANCELLED at once, and a one-off's occurrence filed after it starts once the first
        // write it owed has passed (`heldStartLearnsBy`). Failed, the write is made once more at
        // once (one whose answer was lost finds its start written, `ownStartWritten`); failed
        // again, the handler stops rather than run on to a later beat beside that attempt, and
        // the run is released, to run again.
        if (unwritten !== null && !unwritten.written) {
          unwrittenFailures++;
          if (unwrittenFailures > 1) {
            controller.abort(new StartUnwrittenError());
            return;
          }
          wait = 0;
        }
        engine.obs.log.warn("heartbeat failed; will try again", {
          ...runLogKeys(run),
          error: String(error),
        });
      }
    }
  })();

  const ctx: JobContext = {
    jobId: job.jobId,
    tenantId: job.tenantId,
    runId: run.runId,
    type: job.type,
    scheduledFor: run.scheduledFor,
    attempt: run.attempt,
    idempotencyKey: occurrenceKey(job.jobId, run.scheduledFor),
    payload: job.payload,
    target: job.target,
    ...(run.trigger ? { trigger: run.trigger } : {}),
    signal: controller.signal,
    fence: run.fence,
    ...(runToken !== undefined ? { runToken } : {}),
  };
  try {
    const result = await Promise.race([handler(ctx), rejectOnAbort(controller.signal)]);
    if (controller.signal.reason instanceof FenceLostError)
      return { kind: "fence-lost", error: controller.signal.reason };
    if (controller.signal.reason instanceof RunCancelledError)
      return { kind: "cancelled", error: controller.signal.reason };
    if (controller.signal.reason instanceof LeaseLapsedError)
      return { kind: "lease-lapsed", error: controller.signal.reason };
    return result instanceof RunHandedOver ? { kind: "handed-over" } : { kind: "succeeded" };
  } catch (error) {
    const reason: unknown = controller.signal.reason;
    if (reason instanceof FenceLostError) return { kind: "fence-lost", error: reason };
    if (reason instanceof RunCancelledError) return { kind: "cancelled", error: reason };
    if (reason instanceof LeaseLapsedError) return { kind: "lease-lapsed", error: reason };
    if (reason instanceof WorkerShutdownError)
      return { kind: "released", reason: "released: the worker shut down mid-run" };
    if (reason instanceof StartUnwrittenError) return { kind: "released", reason: reason.message };
    if (reason instanceof RunTimeoutError)
      return { kind: "failed", error: reason.message, retryable: true };
    const retryAfterMs = error instanceof JobError ? error.retryAfterMs : undefined;
    return {
      kind: "failed",
      error: failureText(engine, ctx, error),
      retryable: isRetryable(error),
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    };
  } finally {
    deps.shutdown?.removeEventListener("abort", onShutdown);
    clearTimeout(timeout);
    lease.stop();
    stopHeartbeat.abort();
    await heartbeat;
  }
}

function rejectOnAbort(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    const fail = () => reject(signal.reason);
    if (signal.aborted) fail();
    else signal.addEventListener("abort", fail, { once: true });
  });
}

/**
 * The run's error for a handler's failure. A JobError is the handler's report, written for the
 * run's tenant: its message is stored (a refused target's facts the tenant is not told are
 * logged, logRefusal). Any other exception is a failure the handler did not
 * foresee (its own bug; a service of the deployment's refusing it, as the webhook handler's read
 * of the tenant's signing secret can be), and its text is the deployment's: AWS's errors name the
 * account, roles, keys and tables. The tenant reads the run's error in its history and dead
 * letters, so it is told the error's name only; the operator's log has the whole error under the
 * run's keys.
 */
function failureText(engine: Engine, ctx: JobContext, error: unknown): string {
  if (error instanceof JobError) {
    logRefusal(engine, ctx, error);
    return boundedText(error.message || error.name);
  }
  engine.obs.log.error("a job's handler failed unexpectedly", {
    ...runLogKeys(ctx),
    type: ctx.type,
    error: error instanceof Error ? (error.stack ?? error.message) : String(error),
  });
  const name = error instanceof Error ? textHead(error.name, 100) : typeof error;
  return `the job's handler failed unexpectedly (${name}); the operator's worker log has the details`;
}

/**
 * A delivery's refused target, for the operator: the address its name resolved to is in this line
 * only, since the run's error, which the tenant reads, must not map names the worker's resolver
 * answers and the tenant's cannot (RefusedTargetError).
 */
function logRefusal(engine: Engine, ctx: JobContext, error: JobError): void {
  const refusal = refusalIn(error);
  if (refusal === undefined) return;
  engine.obs.log.warn("a delivery's target was refused", {
    ...runLogKeys(ctx),
    type: ctx.type,
    ...refusal.context,
    refusal: refusal.message,
  });
}
