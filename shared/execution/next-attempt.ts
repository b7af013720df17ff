import { needsFastPath } from "../dispatch/fast-path-window.js";
import type { Engine } from "../engine.js";
import type { Job, RetryOf, Run } from "../model.js";
import { isOneOffOccurrence } from "../one-off.js";
import { dueEntryKey } from "../storage/due-entries.js";
import { queuedRun } from "../storage/runs.js";

/**
 * The next attempt of a failed run: QUEUED right away when it is due soon, else a due entry. Either
 * names the failed attempt under its start's fence (`retryOf`): it is written before that attempt's
 * FAILED ending, and runs only once the attempt says FAILED.
 */
export function nextAttempt(
  engine: Engine,
  job: Job,
  run: Run,
  attempt: number,
  dueAt: Date,
  now: Date,
) {
  const retryOf: RetryOf = {
    runId: run.runId,
    fence: run.fence,
    // A retry of the one-off's retry stays the one-off's, failing at the time it has left.
    ...(isOneOffOccurrence(job, run.scheduledFor) || run.retryOf?.oneOff === true
      ? { oneOff: true as const }
      : {}),
  };
  const spec = {
    jobId: run.jobId,
    tenantId: run.tenantId,
    scheduledFor: new Date(run.scheduledFor),
    dueAt,
    ...(run.plannedFor ? { plannedFor: new Date(run.plannedFor) } : {}),
    attempt,
    priority: job.priority,
    jobVersion: run.jobVersion,
    ...(run.trigger ? { trigger: run.trigger } : {}),
    retryOf,
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
    ...(run.plannedFor ? { plannedFor: run.plannedFor } : {}),
    attempt,
    jobVersion: run.jobVersion,
    priority: job.priority,
    schedule: job.schedule,
    misfire: job.policies.misfire,
    ...(run.trigger ? { runTrigger: run.trigger } : {}),
    retryOf,
  };
  return { ending: { dueEntry }, queued: null };
}
