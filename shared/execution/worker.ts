import { sleep } from "../clock.js";
import { WORKER_RESULT_MARGIN_MS } from "../config.js";
import { dueEntryKey } from "../dispatch/claim.js";
import { needsFastPath } from "../dispatch/fast-path.js";
import type { Engine } from "../engine.js";
import { FenceLostError } from "../errors.js";
import { occurrenceKey, parseRunId } from "../keys.js";
import type { Job, Run, RunMessage } from "../model.js";
import { METRICS } from "../observability.js";
import { type ReceivedRun, sendRuns, setVisibility } from "../queue/work-queue.js";
import { decideAfterFailure } from "../retry.js";
import { occurrences, type ScheduleSpec } from "../schedule/index.js";
import { runMessageOf } from "../storage/items.js";
import { getJob } from "../storage/run-reads.js";
import { queuedRun } from "../storage/runs.js";
import { boundedText } from "../storage/stored-text.js";
import { admitRun, extendAdmission, releaseBufferSlot } from "./admission.js";
import { type HandlerRegistry, isRetryable, type JobContext } from "./handlers.js";
import { lateStartSkipReason } from "./late-start.js";
import {
  endsOneOff,
  extendLease,
  finishRun,
  parkRun,
  type RunEnding,
  repairJobAfterRun,
  requeueRun,
  startRun,
} from "./run-store.js";

export interface WorkerDeps {
  readonly engine: Engine;
  readonly handlers: HandlerRegistry;
  readonly workerId: string;
  /** Tests stretch this past the lease to play a worker that froze. Defaults to lease / 3. */
  readonly heartbeatEveryMs?: number;
  /** Fires when a long-lived worker stops: runs in progress are released to QUEUED, not failed. */
  readonly shutdown?: AbortSignal;
  /** Milliseconds this worker has left (a Lambda's remaining time): a run must end before it does. */
  readonly remainingMs?: () => number;
}

/** `ack`: delete the message. `keep`: leave it, SQS delivers it again after its visibility. */
export type Disposition = "ack" | "keep";

/** A message may arrive up to a second early (SQS delays are whole seconds); later than this it is re-sent. */
export const MAX_EARLY_WAIT_MS = 2_000;
/** The visibility a long-lived loop receives with: a lease, plus the longest wait for an early message. */
export function receiveVisibilitySeconds(leaseSeconds: number): number {
  return Math.ceil(leaseSeconds + MAX_EARLY_WAIT_MS / 1000);
}

/** How soon a run held back by its overlap policy looks again. */
const OVERLAP_RECHECK_MS = 5_000;

const isRecurring = (job: Job) => !("runAt" in job.schedule);

/**
 * Handles one delivery of a run message. Safe to call for a duplicate or late
 * delivery: the conditional start lets only one worker in, and a finished run
 * is acknowledged without running anything. Start, then decide: the job is
 * read after the fenced start write, so a cancel, pause or edit committed
 * before the start is seen, and one committed after it finds the run RUNNING.
 */
export async function processRun(deps: WorkerDeps, received: ReceivedRun): Promise<Disposition> {
  const { engine } = deps;
  const message = received.message;
  const leaseSeconds = engine.settings.leaseMs / 1000;
  // First of all, shrink the message's visibility to the lease: a delivery that throws before
  // this would stay hidden for the queue's default (the worker function's timeout, 15 min).
  // A loop that received it with about that visibility already did, and saves the request.
  if (
    (received.visibilitySeconds ?? Number.POSITIVE_INFINITY) >
    receiveVisibilitySeconds(leaseSeconds)
  )
    await setVisibility(engine.sqs, received.queueUrl, received.receiptHandle, leaseSeconds);

  const early = Date.parse(message.dueAt) - engine.clock().getTime();
  if (early > MAX_EARLY_WAIT_MS) {
    await resend(engine, message, new Date(message.dueAt));
    return "ack";
  }
  if (early > 0) await sleep(early);

  const started = await startRun(engine, message, deps.workerId, engine.clock());
  if (started.kind === "finished") {
    const job = await getJob(engine, message.jobId);
    if (job !== null) await repairJobAfterRun(engine, job, started.run);
  }
  if (started.kind !== "started") {
    engine.obs.log.info("delivery of a run that is not startable; acknowledged", {
      runId: "run" in started ? started.run.runId : null,
      state: started.kind,
    });
    return "ack";
  }
  const run = started.run;
  try {
    return await runStarted(deps, received, run);
  } catch (error) {
    if (error instanceof FenceLostError) {
      engine.obs.metrics.add(METRICS.fenceLost, 1, "Count", { component: "worker" });
      engine.obs.log.warn("another worker took the run over; this one writes nothing more", {
        runId: run.runId,
      });
      return "ack";
    }
    throw error;
  }
}

async function runStarted(deps: WorkerDeps, received: ReceivedRun, run: Run): Promise<Disposition> {
  const { engine } = deps;
  // Read after the start write, consistently: whatever the job says now is what this run obeys.
  const job = await getJob(engine, run.jobId);
  const decision = decideStart(job, run, engine.clock(), engine.settings.misfireGraceMs);
  if (decision.action === "end") {
    await finishRun(
      engine,
      run,
      { ...decision.ending, ran: false, tracked: false },
      engine.clock(),
    );
    if (job?.bufferedRunId === run.runId) await releaseBufferSlot(engine, run.jobId, run.runId);
    return "ack";
  }
  if (decision.action === "park") {
    const parked = await parkRun(engine, run, engine.clock());
    // Resumed or cancelled meanwhile: the next delivery decides again.
    if (!parked) await resend(engine, runMessageOf(run), engine.clock());
    return "ack";
  }
  return runAdmitted(deps, received, decision.job, run);
}

async function runAdmitted(
  deps: WorkerDeps,
  received: ReceivedRun,
  job: Job,
  run: Run,
): Promise<Disposition> {
  const { engine } = deps;
  const tracked = isRecurring(job);
  if (tracked) {
    const admission = await admitRun(
      engine,
      job,
      run.runId,
      new Date(run.leaseUntil ?? engine.clock()),
    );
    const decision = admission.decision;
    if (decision.action === "skip") {
      await finishRun(
        engine,
        run,
        { status: "SKIPPED", reason: decision.reason, ran: false, tracked: false },
        engine.clock(),
      );
      if (admission.job.bufferedRunId === run.runId)
        await releaseBufferSlot(engine, job.jobId, run.runId);
      return "ack";
    }
    if (decision.action === "buffer") {
      const retryAt = new Date(engine.clock().getTime() + OVERLAP_RECHECK_MS);
      await requeueRun(engine, run, `waiting: overlap policy ${job.policies.overlap}`, retryAt);
      await resend(engine, runMessageOf({ ...run, dueAt: retryAt.toISOString() }), retryAt);
      return "ack";
    }
  }

  const outcome = await execute(deps, received, job, run, tracked);
  const now = engine.clock();
  if (outcome.kind === "fence-lost") throw outcome.error;
  if (outcome.kind === "released") {
    // Back to QUEUED for whoever runs next; its message may die with this process, the reaper re-sends.
    await requeueRun(engine, run, "released: the worker shut down mid-run", now);
    await resend(engine, runMessageOf(run), now).catch(() => undefined);
    return "ack";
  }
  const lag = Date.parse(run.startedAt ?? now.toISOString()) - Date.parse(run.dueAt);
  engine.obs.metrics.add(METRICS.schedulingLagMs, Math.max(0, lag), "Milliseconds");
  const report = (status: "SUCCEEDED" | "FAILED" | "DEAD", error?: string) => {
    engine.obs.metrics.add(METRICS.runOutcome, 1, "Count", { status });
    engine.obs.log.info("run finished", {
      jobId: run.jobId,
      runId: run.runId,
      scheduledFor: run.scheduledFor,
      attempt: run.attempt,
      status,
      lagMs: lag,
      durationMs: now.getTime() - Date.parse(run.startedAt ?? now.toISOString()),
      ...(error ? { error } : {}),
    });
  };
  const executedVersion = job.version;

  if (outcome.kind === "succeeded") {
    const completesJob = !tracked && endsOneOff(job, run, "SUCCEEDED");
    await finishRun(
      engine,
      run,
      { status: "SUCCEEDED", ran: true, tracked, completesJob, executedVersion },
      now,
    );
    report("SUCCEEDED");
  } else {
    const decision = decideAfterFailure({
      attempt: run.attempt,
      policy: job.policies.retry,
      retryable: outcome.retryable,
      error: outcome.error,
      now,
      random: engine.random,
    });
    if (decision.kind === "dead") {
      const completesJob = !tracked && endsOneOff(job, run, "DEAD");
      await finishRun(
        engine,
        run,
        {
          status: "DEAD",
          error: outcome.error,
          reason: decision.reason,
          ran: true,
          tracked,
          completesJob,
          executedVersion,
        },
        now,
      );
      report("DEAD", outcome.error);
    } else {
      const retry = nextAttempt(engine, job, run, decision.nextAttempt, decision.dueAt, now);
      await finishRun(
        engine,
        run,
        {
          status: "FAILED",
          error: outcome.error,
          ran: true,
          tracked,
          retry: retry.ending,
          executedVersion,
        },
        now,
      );
      report("FAILED", outcome.error);
      if (retry.queued) await resend(engine, runMessageOf(retry.queued), decision.dueAt);
    }
  }
  if (tracked && job.policies.overlap === "buffer_one")
    await wakeBuffered(engine, job.jobId, run.runId);
  return "ack";
}

type StartDecision =
  | { readonly action: "run"; readonly job: Job }
  | { readonly action: "park" }
  | {
      readonly action: "end";
      readonly ending: Pick<RunEnding, "status" | "reason" | "completesJob">;
    };

/**
 * What a started run does, from the job as read after the start. A paused
 * job's runs are parked for resume, never skipped. An edit does not skip
 * queued runs: they run the job's current definition, except first attempts
 * whose occurrence the edited schedule no longer has (unless the edit said
 * `inFlight: complete`). Retries, replays and triggered runs are not
 * occurrences of the schedule, so a schedule change leaves them to run.
 */
export function decideStart(job: Job | null, run: Run, now: Date, graceMs: number): StartDecision {
  if (job === null)
    return { action: "end", ending: { status: "CANCELLED", reason: "job no longer exists" } };
  if (job.status === "CANCELLED")
    return { action: "end", ending: { status: "CANCELLED", reason: "job cancelled" } };
  if (job.status === "PAUSED") return { action: "park" };
  if (
    run.attempt === 1 &&
    run.triggered !== true &&
    run.jobVersion < job.version &&
    job.policies.inFlight !== "complete" &&
    !isOccurrenceOf(job.schedule, new Date(run.scheduledFor))
  ) {
    return {
      action: "end",
      ending: {
        status: "SKIPPED",
        reason: `job edited (version ${run.jobVersion} → ${job.version}): ${run.scheduledFor} is not an occurrence of its new schedule`,
      },
    };
  }
  const late = lateStartSkipReason({
    schedule: job.schedule,
    policy: job.policies.misfire,
    scheduledFor: new Date(run.scheduledFor),
    attempt: run.attempt,
    // Every start takes the fence one higher, and a queued run has fence 0. A start that parked
    // the run (paused job) held it back: from there on, lateness counts again.
    startedBefore: run.fence - 1 > (run.parkedFence ?? 0),
    misfireFrom: run.misfireFrom === null ? null : new Date(run.misfireFrom),
    now,
    graceMs,
  });
  if (late) {
    const completesJob = job.status === "ACTIVE" && endsOneOff(job, run, "SKIPPED");
    return { action: "end", ending: { status: "SKIPPED", reason: late, completesJob } };
  }
  return { action: "run", job };
}

function isOccurrenceOf(schedule: ScheduleSpec, at: Date): boolean {
  return occurrences(schedule, at, at, 1).length === 1;
}

/** The next attempt of a failed run: QUEUED right away when it is due soon, else a due entry. */
function nextAttempt(engine: Engine, job: Job, run: Run, attempt: number, dueAt: Date, now: Date) {
  const spec = {
    jobId: run.jobId,
    tenantId: run.tenantId,
    scheduledFor: new Date(run.scheduledFor),
    dueAt,
    attempt,
    priority: job.priority,
    jobVersion: run.jobVersion,
  };
  if (needsFastPath(dueAt, now, engine.settings.lookaheadMs)) {
    const { run: queued, item } = queuedRun(spec, now, engine.settings);
    return { ending: { runItem: item }, queued };
  }
  const dueEntry = {
    key: dueEntryKey(run.jobId, dueAt, attempt, now, engine.settings.shardCount),
    kind: "retry" as const,
    jobId: run.jobId,
    tenantId: run.tenantId,
    dueAt: dueAt.toISOString(),
    scheduledFor: run.scheduledFor,
    attempt,
    jobVersion: run.jobVersion,
    priority: job.priority,
    schedule: job.schedule,
    misfire: job.policies.misfire,
  };
  return { ending: { dueEntry }, queued: null };
}

type Outcome =
  | { readonly kind: "succeeded" }
  | { readonly kind: "released" }
  | { readonly kind: "failed"; readonly error: string; readonly retryable: boolean }
  | { readonly kind: "fence-lost"; readonly error: FenceLostError };

class RunTimeoutError extends Error {
  override readonly name = "RunTimeoutError";
}

class WorkerShutdownError extends Error {
  override readonly name = "WorkerShutdownError";
}

/**
 * Runs the job's handler while a heartbeat extends both the message's
 * visibility and the run's lease every lease/3. A heartbeat that fails its
 * fence aborts the handler's signal: another worker owns the run now.
 */
async function execute(
  deps: WorkerDeps,
  received: ReceivedRun,
  job: Job,
  run: Run,
  tracked: boolean,
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
  const onShutdown = () => controller.abort(new WorkerShutdownError("worker shutting down"));
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
        ),
      ),
    timeoutMs,
  );
  const stopHeartbeat = new AbortController();
  const heartbeat = (async () => {
    const every = deps.heartbeatEveryMs ?? engine.settings.leaseMs / 3;
    while (!stopHeartbeat.signal.aborted) {
      await sleep(every, stopHeartbeat.signal);
      if (stopHeartbeat.signal.aborted) return;
      try {
        const leaseUntil = await extendLease(engine, run, engine.clock());
        await setVisibility(
          engine.sqs,
          received.queueUrl,
          received.receiptHandle,
          engine.settings.leaseMs / 1000,
        );
        if (tracked) await extendAdmission(engine, run.jobId, run.runId, leaseUntil);
      } catch (error) {
        if (error instanceof FenceLostError) {
          controller.abort(error);
          return;
        }
        engine.obs.log.warn("heartbeat failed; will try again", {
          runId: run.runId,
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
    signal: controller.signal,
  };
  try {
    await Promise.race([handler(ctx), rejectOnAbort(controller.signal)]);
    if (controller.signal.reason instanceof FenceLostError)
      return { kind: "fence-lost", error: controller.signal.reason };
    return { kind: "succeeded" };
  } catch (error) {
    const reason: unknown = controller.signal.reason;
    if (reason instanceof FenceLostError) return { kind: "fence-lost", error: reason };
    if (reason instanceof WorkerShutdownError) return { kind: "released" };
    if (reason instanceof RunTimeoutError)
      return { kind: "failed", error: reason.message, retryable: true };
    return { kind: "failed", error: errorText(error), retryable: isRetryable(error) };
  } finally {
    deps.shutdown?.removeEventListener("abort", onShutdown);
    clearTimeout(timeout);
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

function errorText(error: unknown): string {
  return boundedText(error instanceof Error ? error.message || error.name : String(error));
}

async function resend(engine: Engine, message: RunMessage, dueAt: Date): Promise<void> {
  await sendRuns(
    engine.sqs,
    engine.queues,
    [{ message: { ...message, dueAt: dueAt.toISOString() }, dueAt }],
    engine.clock(),
  );
}

/** A buffer_one job's waiting run starts as soon as the run ahead of it ends, not at its next recheck. */
async function wakeBuffered(engine: Engine, jobId: string, finishedRunId: string): Promise<void> {
  const job = await getJob(engine, jobId);
  const buffered = job?.bufferedRunId ? parseRunId(job.bufferedRunId) : null;
  if (!job || !buffered || job.bufferedRunId === finishedRunId) return;
  const now = engine.clock();
  await resend(
    engine,
    { ...buffered, dueAt: now.toISOString(), jobVersion: job.version, priority: job.priority },
    now,
  );
}
