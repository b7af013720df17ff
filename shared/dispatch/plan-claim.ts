import type { DueEntry } from "../model.js";
import {
  isMisfired,
  MAX_MISFIRE_CATCH_UP,
  planMisfire,
  type SkippedOccurrence,
} from "../policies.js";
import { nextOccurrence, occurrences, type ScheduleSpec } from "../schedule/index.js";

/**
 * What one claim of a due entry does, decided without I/O: which runs it
 * creates, which occurrences it records SKIPPED, and where the job's next
 * due entry goes. A claim covers every occurrence of the job due before the
 * horizon, so a per-second job costs one transaction per claim window rather
 * than one per second.
 */
interface PlannedRun {
  readonly scheduledFor: Date;
  readonly dueAt: Date;
  readonly attempt: number;
}

export interface ClaimPlan {
  readonly runs: readonly PlannedRun[];
  readonly skipped: readonly SkippedOccurrence[];
  readonly note: string | null;
  /** Occurrence entries move the job on to `next`; retry entries leave the job alone. */
  readonly advancesJob: boolean;
  /** The job's next pending occurrence, or null when its schedule has no more. */
  readonly next: { readonly scheduledFor: Date; readonly catchUpCount: number } | null;
}

export interface ClaimPlanInput {
  readonly entry: DueEntry;
  readonly now: Date;
  /** Occurrences due before this instant are claimed now; later ones are left to a later pass. */
  readonly horizonEnd: Date;
  readonly misfireGraceMs: number;
  /** Bounds the transaction: DynamoDB takes at most 100 items in one. */
  readonly maxRunsPerClaim: number;
  /** Occurrences that already have a run (found after a conflict): advanced over, not run again. */
  readonly alreadyRun?: ReadonlySet<string>;
}

export function planClaim(input: ClaimPlanInput): ClaimPlan {
  const plan = planOccurrences(input);
  const alreadyRun = input.alreadyRun;
  if (alreadyRun === undefined || alreadyRun.size === 0) return plan;
  return { ...plan, runs: plan.runs.filter((r) => !alreadyRun.has(r.scheduledFor.toISOString())) };
}

function planOccurrences(input: ClaimPlanInput): ClaimPlan {
  const { entry, now, horizonEnd, misfireGraceMs, maxRunsPerClaim } = input;
  const scheduledFor = new Date(entry.scheduledFor);
  if (entry.kind === "retry") {
    return {
      runs: [{ scheduledFor, dueAt: new Date(entry.dueAt), attempt: entry.attempt }],
      skipped: [],
      note: null,
      advancesJob: false,
      next: null,
    };
  }

  const spec = entry.schedule;
  const runs: PlannedRun[] = [];
  let skipped: SkippedOccurrence[] = [];
  let note: string | null = null;
  let cursor: Date | null = scheduledFor;
  let catchUpCount = entry.catchUpCount ?? 0;
  const onTime = (at: Date): PlannedRun => ({ scheduledFor: at, dueAt: at, attempt: 1 });

  if (isMisfired(scheduledFor, now, misfireGraceMs)) {
    const cutoff = new Date(now.getTime() - misfireGraceMs);
    if (entry.misfire === "fire_all") {
      const budget = Math.min(MAX_MISFIRE_CATCH_UP - catchUpCount, maxRunsPerClaim);
      const batch = budget > 0 ? occurrences(spec, scheduledFor, cutoff, budget) : [];
      runs.push(...batch.map(onTime));
      catchUpCount += batch.length;
      const last = batch.at(-1);
      cursor = last ? nextOccurrence(spec, last) : scheduledFor;
      if (cursor !== null && cursor <= cutoff) {
        if (catchUpCount < MAX_MISFIRE_CATCH_UP) {
          // More missed occurrences than one transaction holds: the next claim continues the catch-up.
          return {
            runs,
            skipped,
            note,
            advancesJob: true,
            next: { scheduledFor: cursor, catchUpCount },
          };
        }
        note = `misfire: fire_all ran its cap of ${MAX_MISFIRE_CATCH_UP} missed occurrences; those missed from ${cursor.toISOString()} to ${cutoff.toISOString()} were not run`;
        skipped = [{ scheduledFor: cursor, reason: note }];
        cursor = nextOccurrence(spec, cutoff);
      }
    } else {
      const { missed, truncated } = latestOccurrences(
        spec,
        scheduledFor,
        cutoff,
        MAX_MISFIRE_CATCH_UP,
      );
      const plan = planMisfire({
        policy: entry.misfire,
        missed,
        truncated,
        graceMs: misfireGraceMs,
      });
      runs.push(...plan.run.map(onTime));
      skipped = plan.skipped;
      note = plan.note;
      cursor = nextOccurrence(spec, cutoff);
    }
    catchUpCount = 0;
  }

  while (cursor !== null && cursor < horizonEnd && runs.length < maxRunsPerClaim) {
    runs.push(onTime(cursor));
    cursor = nextOccurrence(spec, cursor);
  }
  return {
    runs,
    skipped,
    note,
    advancesJob: true,
    next: cursor === null ? null : { scheduledFor: cursor, catchUpCount },
  };
}

/**
 * The latest `limit` occurrences in [from, to], and whether earlier ones were
 * left out. Searches backwards from `to` in doubling windows, since schedules
 * only iterate forwards and a long outage of a per-second job spans millions.
 */
export function latestOccurrences(
  spec: ScheduleSpec,
  from: Date,
  to: Date,
  limit: number,
): { missed: Date[]; truncated: boolean } {
  const countFrom = (startMs: number) => occurrences(spec, new Date(startMs), to, limit + 1).length;
  let fewEnoughFrom = to.getTime() + 1;
  let windowMs = 60_000;
  for (;;) {
    const startMs = Math.max(from.getTime(), to.getTime() - windowMs);
    if (countFrom(startMs) > limit) {
      // The latest `limit` begin between startMs and fewEnoughFrom: bisect down to a second.
      let tooManyFrom = startMs;
      while (fewEnoughFrom - tooManyFrom > 1000) {
        const mid = Math.floor((tooManyFrom + fewEnoughFrom) / 2);
        if (countFrom(mid) > limit) tooManyFrom = mid;
        else fewEnoughFrom = mid;
      }
      const tail = occurrences(spec, new Date(tooManyFrom), to, limit + 1000);
      return { missed: tail.slice(-limit), truncated: true };
    }
    if (startMs === from.getTime()) {
      return { missed: occurrences(spec, from, to, limit), truncated: false };
    }
    fewEnoughFrom = startMs;
    windowMs *= 2;
  }
}
