import type { MisfirePolicy } from "../policies.js";
import { nextOccurrence, occurrences, type ScheduleSpec } from "../schedule/index.js";

export interface LateStartInput {
  readonly schedule: ScheduleSpec;
  readonly policy: MisfirePolicy;
  readonly scheduledFor: Date;
  /** When the occurrence was planned to run (its jitter offset added); default scheduledFor. Lateness counts from here. */
  readonly plannedFor?: Date;
  /** The planned time of another occurrence of the schedule (the job's jitter); default itself. */
  readonly plannedOf?: (occurrence: Date) => Date;
  readonly attempt: number;
  /**
   * Queued by a trigger or by an upstream run's fan-out, not by the schedule. Its instant is the
   * one it was made at, which an edit of the schedule since (to a per-second cron, say) may have
   * made an occurrence: the schedule never queued it, and no occurrence runs in its place.
   */
  readonly queuedOffSchedule?: boolean;
  /**
   * A worker started this run before: it was interrupted (its worker died or
   * shut down) or held back by a wait of the scheduler's own (its overlap policy, its tenant's
   * quota, the attempt before it, its one-off's floor lowering). It was on time then. (A
   * start that parked the run because its job was paused does not count: a
   * parked run meets its misfire policy when the job resumes.)
   */
  readonly startedBefore: boolean;
  /** Set by the reaper's first re-send: lateness counts from here rather than the occurrence. */
  readonly misfireFrom: Date | null;
  readonly now: Date;
  readonly graceMs: number;
  /** The job's endAt: occurrences after it never run, so none of them runs in this one's place. */
  readonly endAt?: Date | null;
  /**
   * An occurrence an edit of the schedule passed over (the new schedule starts at the edit): it
   * never runs, so it does not run in this one's place either.
   */
  readonly passedOver?: (occurrence: Date) => boolean;
}

/**
 * The misfire policy for a run that was claimed on time but starts late (the
 * workers or the queue were down): claims queue runs up to 14 minutes ahead, so
 * an outage can hit occurrences that are already QUEUED. Returns the reason to
 * record the run SKIPPED, or null to run it.
 *
 * - skip: a first attempt starting more than the grace late is skipped, an
 *   occurrence of the schedule an edit replaced (kept by `inFlight: "complete"`) too;
 * - fire_once: of the late occurrences, only the most recent runs, so one is
 *   skipped when the schedule's next occurrence is also past the grace (and
 *   not after the job's endAt, nor one an edit passed over: neither ever runs); an
 *   occurrence of a schedule an edit replaced runs, since none of the new schedule's runs in
 *   its place;
 * - fire_all: always runs.
 * Retries, replays, triggered runs and the runs an upstream queued (not occurrences of the
 * schedule, whatever instant they hold) always run.
 *
 * Recovery is not a misfire. A run started before (interrupted, or held back by a wait of the
 * scheduler's own, whose requeue wrote its start) runs again whatever the time. A run whose message was
 * lost is late only if it starts more than the grace after the reaper re-sent
 * it: the reaper looks a lease after the run was due, and the lease is as long
 * as the grace, so counting from the occurrence would skip every such run.
 */
export function lateStartSkipReason(input: LateStartInput): string | null {
  const { schedule, policy, scheduledFor, attempt, now, graceMs } = input;
  const cutoff = now.getTime() - graceMs;
  const plannedFor = input.plannedFor ?? scheduledFor;
  const expectedAt = Math.max(plannedFor.getTime(), input.misfireFrom?.getTime() ?? 0);
  if (
    input.startedBefore ||
    input.queuedOffSchedule === true ||
    attempt !== 1 ||
    policy === "fire_all" ||
    expectedAt >= cutoff
  )
    return null;
  const lateBy = `${Math.round((now.getTime() - plannedFor.getTime()) / 1000)} s`;
  if (policy === "skip")
    return `misfire: started ${lateBy} late, past the ${graceMs / 1000} s grace; policy skip`;
  // An occurrence of a schedule an edit replaced, its queued runs kept (`inFlight: "complete"`):
  // the new schedule's occurrences do not stand in for it (those before the edit never run), so
  // fire_once runs it.
  if (occurrences(schedule, scheduledFor, scheduledFor, 1).length === 0) return null;
  const scheduled = nextOccurrence(schedule, scheduledFor);
  const next =
    scheduled === null ||
    (input.endAt && scheduled > input.endAt) ||
    input.passedOver?.(scheduled) === true
      ? null
      : scheduled;
  const nextPlanned = next === null ? null : (input.plannedOf?.(next) ?? next);
  if (nextPlanned !== null && nextPlanned.getTime() < cutoff) {
    return `misfire: started ${lateBy} late; policy fire_once runs only the most recent missed occurrence`;
  }
  return null;
}
