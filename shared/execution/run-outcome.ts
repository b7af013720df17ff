import { runDurationMs } from "../clock.js";
import { fanOutTrigger } from "../dispatch/trigger-fan-out.js";
import type { Engine } from "../engine.js";
import type { DueEntry, Job, Run } from "../model.js";
import { METRICS, type RunLogKeys, runLogKeys, TENANT_LOG_EVENTS } from "../observability.js";
import type { RunMessage } from "../queue/run-message.js";
import { sendRuns } from "../queue/work-queue.js";
import { decideAfterFailure } from "../retry.js";
import { recordShardCount } from "../shard-count.js";
import { runMessageOf } from "../storage/items.js";
import { keepCompletedJobForDeadLetter } from "../storage/job-status.js";
import { finishRun } from "../storage/run-finish.js";
import { triggerEntryOf } from "../storage/trigger.js";
import { nextAttempt } from "./next-attempt.js";
import { endsOneOff, nextAdmissionSoon, wakeBuffered } from "./run-endings.js";

/** How a handler's run came out: it succeeded, or it failed (retried or dead by `retryable`). */
export type RunResult =
  | { readonly kind: "succeeded" }
  | {
      readonly kind: "failed";
      readonly error: string;
      readonly retryable: boolean;
      /** The least wait its retry was asked (a receiver's `Retry-After`). */
      readonly retryAfterMs?: number;
    };

export const isRecurring = (job: Job) => !("runAt" in job.schedule);

/** How late the run started: its start write's time less its due time (a run not started: `now`). */
export function startLagMs(run: Pick<Run, "startedAt" | "dueAt">, now: Date): number {
  return Date.parse(run.startedAt ?? now.toISOString()) - Date.parse(run.dueAt);
}

/**
 * Records a run's result as its worker (or, for an async run, its target) reports it, conditioned
 * on the run's fence: SUCCEEDED, or a failure with the job's retry policy applied (the next
 * attempt put, then FAILED; or DEAD). A failure whose job was deleted meanwhile ends FAILED, and
 * its next attempt finds no job (its worker ends it CANCELLED; a retry entry's claim removes it).
 * Throws FenceLostError when the run is no longer held under `run.fence`.
 */
/**
 * Counts a run's ending (`RunOutcome`) and writes its tenant's `run finished` line, with its lag
 * (from its last start) and, for a worker's ending, how long the handler ran. The line names the
 * run, not its error: that is the tenant's text (a delivery's names the target's URL, whose path
 * may be its credential, and quotes the receiver's answer, which may echo the request's
 * Authorization header; an async target reports its own). The run keeps it.
 */
export function reportRunFinished(
  engine: Engine,
  run: Run,
  status: "SUCCEEDED" | "FAILED" | "DEAD",
  now: Date,
  { durationMs }: { readonly durationMs?: number } = {},
): void {
  engine.obs.metrics.add(METRICS.runOutcome, 1, "Count", { status });
  engine.obs.log.info(TENANT_LOG_EVENTS.runFinished, {
    tenantId: run.tenantId,
    jobId: run.jobId,
    runId: run.runId,
    scheduledFor: run.scheduledFor,
    attempt: run.attempt,
    status,
    lagMs: startLagMs(run, now),
    ...(durationMs === undefined ? {} : { durationMs }),
  });
}

export async function recordResult(
  engine: Engine,
  job: Job,
  run: Run,
  result: RunResult,
  now: Date,
  executedVersion: number,
): Promise<void> {
  // An outcome may file the next attempt's run and due entry, or its dependents' trigger entry.
  await recordShardCount(engine);
  const tracked = isRecurring(job);
  const jobWriteDeferred = tracked && nextAdmissionSoon(job, run, now);
  const report = (status: "SUCCEEDED" | "FAILED" | "DEAD") =>
    reportRunFinished(engine, run, status, now, {
      durationMs: runDurationMs(run.startedAt ?? now.toISOString(), now),
    });

  // The job's dependents as read (at start, or at an async completion): the ending writes their
  // trigger with itself.
  const triggerOf = (status: "SUCCEEDED" | "DEAD") =>
    job.dependents.length > 0 ? { trigger: triggerEntryOf(engine, job, run, status, now) } : {};

  if (result.kind === "succeeded") {
    const completesJob = !tracked && endsOneOff(job, run, "SUCCEEDED");
    const trigger = triggerOf("SUCCEEDED");
    await finishRun(
      engine,
      run,
      {
        status: "SUCCEEDED",
        ran: true,
        tracked,
        jobWriteDeferred,
        completesJob,
        executedVersion,
        ...trigger,
      },
      now,
    );
    report("SUCCEEDED");
    await fanOutNow(engine, run, trigger.trigger);
  } else {
    const decision = decideAfterFailure({
      attempt: run.attempt,
      policy: job.policies.retry,
      retryable: result.retryable,
      error: result.error,
      now,
      random: engine.random,
      ...(result.retryAfterMs === undefined ? {} : { retryAfterMs: result.retryAfterMs }),
    });
    if (decision.kind === "dead") {
      const completesJob = !tracked && endsOneOff(job, run, "DEAD");
      const trigger = triggerOf("DEAD");
      await keepCompletedJobForDeadLetter(engine, job, run, now);
      await finishRun(
        engine,
        run,
        {
          status: "DEAD",
          error: result.error,
          reason: decision.reason,
          ran: true,
          tracked,
          jobWriteDeferred,
          completesJob,
          executedVersion,
          ...trigger,
        },
        now,
      );
      report("DEAD");
      await fanOutNow(engine, run, trigger.trigger);
    } else {
      const retry = nextAttempt(engine, job, run, decision.nextAttempt, decision.dueAt, now);
      await finishRun(
        engine,
        run,
        {
          status: "FAILED",
          error: result.error,
          ran: true,
          tracked,
          retry: retry.ending,
          executedVersion,
        },
        now,
      );
      report("FAILED");
      if (retry.queued) await resend(engine, runMessageOf(retry.queued), decision.dueAt);
    }
  }
  if (tracked && job.policies.overlap === "buffer_one")
    await wakeBuffered(engine, job.jobId, run.runId);
}

/**
 * Queues the dependents' runs right after the ending that wrote their trigger entry, so they do
 * not wait for the next dispatcher pass; a failure here leaves the entry to that pass.
 */
async function fanOutNow(
  engine: Engine,
  ended: RunLogKeys,
  trigger: DueEntry | undefined,
): Promise<void> {
  if (trigger === undefined) return;
  try {
    await fanOutTrigger(engine, trigger);
  } catch (error) {
    engine.obs.log.warn("could not fan a trigger out; the next dispatcher pass will", {
      ...runLogKeys(ended),
      error: String(error),
    });
  }
}

/**
 * Ends a started run whose job was deleted: CANCELLED, with no next attempt
 * and no write of the job (its item is gone).
 */
export async function endForDeletedJob(
  engine: Engine,
  run: Run,
  ending: { ran: boolean; reason: string; error?: string; executedVersion?: number },
): Promise<void> {
  await finishRun(engine, run, { status: "CANCELLED", tracked: false, ...ending }, engine.clock());
  engine.obs.log.info("run of a deleted job cancelled", { ...runLogKeys(run) });
}

export async function resend(engine: Engine, message: RunMessage, dueAt: Date): Promise<void> {
  await sendRuns(
    engine.sqs,
    engine.queues,
    [{ message: { ...message, dueAt: dueAt.toISOString() }, dueAt }],
    engine.clock(),
  );
}
