import type { DueEntry } from "../model.js";
import {
  isMisfired,
  MAX_MISFIRE_CATCH_UP,
  misfireCutoff,
  planMisfire,
  type SkippedOccurrence,
} from "../policies.js";
import {
  nextOccurrence,
  occurrences,
  plannedTime,
  type ScheduleSpec,
  windowMsOf,
} from "../schedule/index.js";

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
  /** The occurrence's planned time (jitter); absent when the job has no window. */
  readonly plannedFor?: Date;
  readonly attempt: number;
}

/** An occurrence the misfire policy skipped, with its planned time as its run would have had. */
interface PlannedSkip extends SkippedOccurrence {
  /** Absent when the job has no window. */
  readonly plannedFor?: Date;
}

export interface ClaimPlan {
  readonly runs: readonly PlannedRun[];
  readonly skipped: readonly PlannedSkip[];
  readonly note: string | null;
  /** Occurrence entries move the job on to `next`; retry entries leave the job alone. */
  readonly advancesJob: boolean;
  /** The job's next pending occurrence and its planned time, or null when its schedule has no more. */
  readonly next: {
    readonly scheduledFor: Date;
    readonly dueAt: Date;
    readonly catchUpCount: number;
  } | null;
  /**
   * The job's end condition (endAt, maxRuns) stopped it in this claim: no occurrence follows,
   * and the job completes.
   */
  readonly ended?: boolean;
  /** Occurrences this claim queued (those already run included), counted against maxRuns. */
  readonly occurrencesQueued?: number;
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
  const plan = withinEnd(planOccurrences(input), input.entry);
  const alreadyRun = input.alreadyRun;
  if (alreadyRun === undefined || alreadyRun.size === 0) return plan;
  return { ...plan, runs: plan.runs.filter((r) => !alreadyRun.has(r.scheduledFor.toISOString())) };
}

/**
 * The plan cut at the job's end condition: no occurrence after `endAt` runs or is recorded, and
 * no more than `maxRuns` occurrences are queued in all (the entry carries how many were before
 * it). The job ends when the cut leaves it nothing more: its next occurrence lies after `endAt`,
 * or the count is reached.
 */
function withinEnd(plan: ClaimPlan, entry: DueEntry): ClaimPlan {
  if (!plan.advancesJob) return plan;
  const endAt = entry.end?.endAt ? new Date(entry.end.endAt) : null;
  const maxRuns = entry.end?.maxRuns ?? null;
  if (endAt === null && maxRuns === null) return { ...plan, occurrencesQueued: plan.runs.length };
  const before = entry.queuedBefore ?? 0;
  const remaining = maxRuns === null ? Number.POSITIVE_INFINITY : Math.max(0, maxRuns - before);
  const inTime = plan.runs.filter((r) => endAt === null || r.scheduledFor <= endAt);
  const runs = inTime.slice(0, remaining);
  const countReached = runs.length === remaining;
  const last = runs.at(-1);
  const skipped = plan.skipped.filter(
    (s) =>
      (endAt === null || s.scheduledFor <= endAt) &&
      (!countReached || (last !== undefined && s.scheduledFor < last.scheduledFor)),
  );
  const ended =
    countReached ||
    runs.length < plan.runs.length ||
    (plan.next !== null && endAt !== null && plan.next.scheduledFor > endAt);
  return {
    ...plan,
    runs,
    skipped,
    next: ended ? null : plan.next,
    ended,
    occurrencesQueued: runs.length,
  };
}

function planOccurrences(input: ClaimPlanInput): ClaimPlan {
  const { entry, now, horizonEnd, misfireGraceMs, maxRunsPerClaim } = input;
  const scheduledFor = new Date(entry.scheduledFor);
  if (entry.kind === "retry") {
    const plannedFor =
      entry.plannedFor === undefined ? {} : { plannedFor: new Date(entry.plannedFor) };
    return {
      runs: [{ scheduledFor, dueAt: new Date(entry.dueAt), ...plannedFor, attempt: entry.attempt }],
      skipped: [],
      note: null,
      advancesJob: false,
      next: null,
    };
  }

  const spec = entry.schedule;
  // Jitter: each occurrence is due at its planned time, and every bound below (the misfire
  // cutoff, the horizon) is compared with that. A planned time comes before the next occurrence
  // (the window is at most the period, and cut to the time until the next occurrence on a night
  // a DST shift makes that shorter), so planned times keep the occurrences' order, and those
  // before a bound are a prefix of them.
  const windowMs = windowMsOf(entry.window);
  const plannedTimes = new Map<number, Date>();
  const planned = (at: Date) => {
    let time = plannedTimes.get(at.getTime());
    if (time === undefined) {
      time = plannedTime(entry.jobId, at, windowMs, spec);
      plannedTimes.set(at.getTime(), time);
    }
    return time;
  };
  const plannedBy = (bound: Date) => (at: Date) => planned(at) <= bound;
  const runs: PlannedRun[] = [];
  let skipped: PlannedSkip[] = [];
  let note: string | null = null;
  let cursor: Date | null = scheduledFor;
  let catchUpCount = entry.catchUpCount ?? 0;
  const onTime = (at: Date): PlannedRun =>
    windowMs === null
      ? { scheduledFor: at, dueAt: at, attempt: attemptOf(entry, at) }
      : {
          scheduledFor: at,
          dueAt: planned(at),
          plannedFor: planned(at),
          attempt: attemptOf(entry, at),
        };
  const withPlanned = (skip: SkippedOccurrence): PlannedSkip =>
    windowMs === null ? skip : { ...skip, plannedFor: planned(skip.scheduledFor) };

  if (isMisfired(planned(scheduledFor), now, misfireGraceMs)) {
    const cutoff = misfireCutoff(now, misfireGraceMs);
    const missedBy = plannedBy(cutoff);
    // No occurrence after the job's endAt is missed: none of them exists to run.
    const endAt = entry.end?.endAt ? new Date(entry.end.endAt) : null;
    const missedUntil = endAt !== null && endAt < cutoff ? endAt : cutoff;
    if (entry.misfire === "fire_all") {
      const budget = Math.min(MAX_MISFIRE_CATCH_UP - catchUpCount, maxRunsPerClaim);
      const batch = takeWhile(
        budget > 0 ? occurrences(spec, scheduledFor, cutoff, budget) : [],
        missedBy,
      );
      runs.push(...batch.map(onTime));
      catchUpCount += batch.length;
      const last = batch.at(-1);
      cursor = last ? nextOccurrence(spec, last) : scheduledFor;
      if (cursor !== null && missedBy(cursor)) {
        if (catchUpCount < MAX_MISFIRE_CATCH_UP) {
          // More missed occurrences than one transaction holds: the next claim continues the catch-up.
          return {
            runs,
            skipped,
            note,
            advancesJob: true,
            next: { scheduledFor: cursor, dueAt: planned(cursor), catchUpCount },
          };
        }
        note = `misfire: fire_all ran its cap of ${MAX_MISFIRE_CATCH_UP} missed occurrences; those missed from ${cursor.toISOString()} to ${missedUntil.toISOString()} were not run`;
        skipped = [withPlanned({ scheduledFor: cursor, reason: note })];
        cursor = firstPlannedAfter(spec, scheduledFor, cutoff, windowMs, missedBy);
      }
    } else {
      // No occurrence after the job's endAt runs: the most recent missed one fire_once runs is the
      // latest up to the end, not one the end then drops (withinEnd) with nothing run in its place.
      const latest = latestOccurrences(spec, scheduledFor, missedUntil, MAX_MISFIRE_CATCH_UP);
      // An occurrence before the cutoff whose planned time is after it was not missed.
      const missed = takeWhile(latest.missed, missedBy);
      const truncated = latest.truncated;
      const plan = planMisfire({
        policy: entry.misfire,
        missed,
        truncated,
        graceMs: misfireGraceMs,
      });
      runs.push(...plan.run.map(onTime));
      skipped = plan.skipped.map(withPlanned);
      note = plan.note;
      cursor = firstPlannedAfter(spec, scheduledFor, cutoff, windowMs, missedBy);
    }
    catchUpCount = 0;
  }

  while (cursor !== null && planned(cursor) < horizonEnd && runs.length < maxRunsPerClaim) {
    runs.push(onTime(cursor));
    cursor = nextOccurrence(spec, cursor);
  }
  return {
    runs,
    skipped,
    note,
    advancesJob: true,
    next: cursor === null ? null : { scheduledFor: cursor, dueAt: planned(cursor), catchUpCount },
  };
}

/**
 * The attempt a claim writes for an occurrence: the first, except for the entry's own occurrence
 * when the entry names a later one (a one-off whose run a pause cancelled runs again on resume as
 * its next attempt).
 */
export function attemptOf(entry: DueEntry, at: Date): number {
  return entry.kind === "occurrence" && at.getTime() === Date.parse(entry.scheduledFor)
    ? entry.attempt
    : 1;
}

function takeWhile<T>(items: readonly T[], keep: (item: T) => boolean): T[] {
  const end = items.findIndex((item) => !keep(item));
  return end === -1 ? [...items] : items.slice(0, end);
}

/**
 * The first occurrence planned after `cutoff`: one at or before it whose jitter puts it after it
 * (only the last window before the cutoff can hold one), else the first one after it.
 */
function firstPlannedAfter(
  spec: ScheduleSpec,
  from: Date,
  cutoff: Date,
  windowMs: number | null,
  missedBy: (at: Date) => boolean,
): Date | null {
  if (windowMs !== null) {
    const windowStart = Math.max(from.getTime(), cutoff.getTime() - windowMs + 1);
    const inLastWindow = occurrences(spec, new Date(windowStart), cutoff, 2);
    const notMissed = inLastWindow.find((at) => !missedBy(at));
    if (notMissed !== undefined) return notMissed;
  }
  return nextOccurrence(spec, cutoff);
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
