import type { Engine } from "../engine.js";
import type { DueEntry, Run } from "../model.js";
import { dueEntryKey } from "../storage/due-entries.js";
import { queuedRun, skippedRun } from "../storage/runs.js";
import { attemptOf, planClaim } from "./plan-claim.js";

/**
 * The items a claim writes, made from `planClaim`'s plan of an entry: its QUEUED runs, its
 * SKIPPED records and the job's next due entry. Both claims write them: a due entry's
 * (`claimDueEntry`, in rounds) and a new job's first (`claimBeforeCreate`), in claim.ts.
 */

/**
 * Bounds a claim's run puts and the occurrences one claim plans (a per-second job's window, a
 * fire_all catch-up's chunk).
 */
const MAX_RUNS_PER_CLAIM = 50;

/**
 * What earlier rounds of a claim at the entry's version found: occurrences handled already (a
 * run past QUEUED, re-sent or ended), and the runs they put, which are not put again. A SKIPPED
 * record needs nothing here: one that meets an item keeps it and the claim goes on.
 */
export interface Known {
  readonly run: ReadonlySet<string>;
  readonly put: ReadonlySet<string>;
}

export const noneKnown = (): Known => ({ run: new Set(), put: new Set() });

/** The writes a claim of `entry` plans, before they are put in a transaction. */
export interface PlannedWrites {
  readonly plan: ReturnType<typeof planClaim>;
  readonly queued: readonly { readonly run: Run; readonly item: Record<string, unknown> }[];
  readonly skippedItems: readonly Record<string, unknown>[];
  readonly next: DueEntry | null;
}

/**
 * Plans the claim of `entry` at `now`, queuing what is due before `reachEnd`, without what earlier
 * rounds found handled, and makes its items.
 */
export function planWrites(
  engine: Engine,
  entry: DueEntry,
  now: Date,
  reachEnd: Date,
  known: Known,
): PlannedWrites {
  const { settings } = engine;
  const plan = planClaim({
    entry,
    now,
    horizonEnd: reachEnd,
    misfireGraceMs: settings.misfireGraceMs,
    maxRunsPerClaim: MAX_RUNS_PER_CLAIM,
    alreadyRun: known.run,
  });
  const runSpec = (scheduledFor: Date, dueAt: Date, attempt: number, plannedFor?: Date) => ({
    jobId: entry.jobId,
    tenantId: entry.tenantId,
    scheduledFor,
    dueAt,
    ...(plannedFor ? { plannedFor } : {}),
    attempt,
    priority: entry.priority,
    jobVersion: entry.jobVersion,
    ...(entry.runTrigger ? { trigger: entry.runTrigger } : {}),
    ...(entry.retryOf ? { retryOf: entry.retryOf } : {}),
    rerun: entry.kind === "occurrence" && attempt > 1 && entry.retryAgain !== true,
  });
  // Read again here, not the pass's clock: the reaper's cursor may have passed `now + lease`
  // by the time a long pass writes this claim, and a pass's `now` can be minutes old (below).
  const writtenAt = engine.clock();
  const queued = plan.runs.map((r) =>
    queuedRun(runSpec(r.scheduledFor, r.dueAt, r.attempt, r.plannedFor), now, settings, writtenAt),
  );
  // A record of an occurrence the misfire policy skipped shows its planned time, as its run would.
  const skippedItems = plan.skipped.map((s) =>
    skippedRun(
      runSpec(
        s.scheduledFor,
        s.plannedFor ?? s.scheduledFor,
        attemptOf(entry, s.scheduledFor),
        s.plannedFor,
      ),
      s.reason,
      now,
      settings,
    ),
  );

  let next: DueEntry | null = null;
  if (plan.advancesJob && plan.next) {
    // Filed at its planned time (jitter), so the pass that reads it claims it in time for that;
    // when that is past, in the minute of this write: a pass that lost its lease claims on (no
    // fence in the claim), and filed by its start it could land in a bucket the new owner has
    // read and moved `sweepFrom` past, and the job would wait on an entry no pass reads again.
    const { dueAt, scheduledFor } = plan.next;
    next = {
      ...entry,
      key: dueEntryKey(entry.jobId, dueAt, 1, writtenAt, settings.shardCount),
      kind: "occurrence",
      dueAt: dueAt.toISOString(),
      scheduledFor: scheduledFor.toISOString(),
      attempt: 1,
      catchUpCount: plan.next.catchUpCount,
      queuedBefore: queuedThrough(entry, plan),
    };
  }
  return { plan, queued, skippedItems, next };
}

/** The job's count of queued occurrences once this claim's are in. */
export function queuedThrough(entry: DueEntry, plan: ReturnType<typeof planClaim>): number {
  return (entry.queuedBefore ?? 0) + (plan.occurrencesQueued ?? 0);
}
