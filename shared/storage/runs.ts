import type { EngineSettings } from "../config.js";
import { runId, runSortKey, shardOf } from "../keys.js";
import type { Priority, RetryOf, Run, RunTrigger } from "../model.js";
import { encodeRun, jobPk } from "./items.js";
import { runExpiresAt } from "./retention.js";

type Item = Record<string, unknown>;

/**
 * A QUEUED run as a put left it: no worker has started it (fence 0) and the reaper has not re-sent
 * it (no `misfireFrom`). Every condition over a run that may still be taken over or deleted as put
 * names it this way.
 */
export const UNSTARTED_UNSENT =
  "fence = :unstarted AND (attribute_not_exists(misfireFrom) OR attribute_type(misfireFrom, :null))";

export const runKey = (jobId: string, scheduledFor: string, attempt: number) => ({
  pk: jobPk(jobId),
  sk: runSortKey(scheduledFor, attempt),
});

interface NewRun {
  readonly jobId: string;
  readonly tenantId: string;
  readonly scheduledFor: Date;
  readonly dueAt: Date;
  /** The occurrence's planned time, when the job has a jitter window. */
  readonly plannedFor?: Date;
  readonly attempt: number;
  readonly priority: Priority;
  readonly jobVersion: number;
  readonly triggered?: boolean;
  readonly trigger?: RunTrigger;
  /** A failure's next attempt: the attempt whose FAILED ending it waits for. */
  readonly retryOf?: RetryOf;
  /** A one-off's occurrence claimed again at a later attempt (`Run.rerun`). */
  readonly rerun?: boolean;
}

function baseRun(spec: NewRun): Omit<Run, "status"> {
  const scheduledFor = spec.scheduledFor.toISOString();
  return {
    runId: runId(spec.jobId, scheduledFor, spec.attempt),
    jobId: spec.jobId,
    tenantId: spec.tenantId,
    scheduledFor,
    attempt: spec.attempt,
    dueAt: spec.dueAt.toISOString(),
    ...(spec.plannedFor ? { plannedFor: spec.plannedFor.toISOString() } : {}),
    priority: spec.priority,
    jobVersion: spec.jobVersion,
    executedVersion: null,
    ...(spec.triggered ? { triggered: true } : {}),
    ...(spec.trigger ? { trigger: spec.trigger } : {}),
    ...(spec.retryOf ? { retryOf: spec.retryOf } : {}),
    ...(spec.rerun ? { rerun: true as const } : {}),
    fence: 0,
    enqueuedAt: null,
    startedAt: null,
    finishedAt: null,
    durationMs: null,
    leaseUntil: null,
    workerId: null,
    error: null,
    reason: null,
    replayedBy: null,
    misfireFrom: null,
  };
}

/**
 * A claimed run waiting in its queue. Its reaper deadline is one lease after
 * it should have started: if it is still QUEUED then, its message was lost.
 * The deadline counts from `writtenAt` when given, a clock reading just before
 * the write: a dispatcher pass plans with the clock it read at its start, and
 * a deadline a lease after that can lie behind a reaper's cursor by the time a
 * long pass writes it.
 */
export function queuedRun(
  spec: NewRun,
  now: Date,
  settings: EngineSettings,
  writtenAt: Date = now,
): { run: Run; item: Item } {
  const run: Run = { ...baseRun(spec), status: "QUEUED", enqueuedAt: now.toISOString() };
  const startBy =
    Math.max(spec.dueAt.getTime(), now.getTime(), writtenAt.getTime()) + settings.leaseMs;
  const item = encodeRun(run, runSortKey(run.scheduledFor, run.attempt), {
    inflight: {
      shard: shardOf(spec.jobId, settings.shardCount),
      deadline: new Date(startBy).toISOString(),
    },
    expiresAt: runExpiresAt(now, settings),
  });
  return { run, item };
}

/** A run recorded only to say that an occurrence did not run, and why. */
export function skippedRun(
  spec: NewRun,
  reason: string,
  now: Date,
  settings: EngineSettings,
): Item {
  const run: Run = {
    ...baseRun(spec),
    status: "SKIPPED",
    reason,
    finishedAt: now.toISOString(),
  };
  return encodeRun(run, runSortKey(run.scheduledFor, run.attempt), {
    expiresAt: runExpiresAt(now, settings),
  });
}
