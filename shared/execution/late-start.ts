import type { MisfirePolicy } from "../policies.js";
import { nextOccurrence, occurrences, type ScheduleSpec } from "../schedule/index.js";

export interface LateStartInput {
  readonly schedule: ScheduleSpec;
  readonly policy: MisfirePolicy;
  readonly scheduledFor: Date;
  readonly attempt: number;
  readonly now: Date;
  readonly graceMs: number;
}

/**
 * The misfire policy for a run that was claimed on time but starts late (the
 * workers or the queue were down): claims happen up to the lookahead ahead, so
 * an outage can hit occurrences that are already QUEUED. Returns the reason to
 * record the run SKIPPED, or null to run it.
 *
 * - skip: a first attempt starting more than the grace late is skipped;
 * - fire_once: of the late occurrences, only the most recent runs, so one is
 *   skipped when the schedule's next occurrence is also past the grace;
 * - fire_all: always runs.
 * Retries, replays and triggered runs (not occurrences of the schedule) always run.
 */
export function lateStartSkipReason(input: LateStartInput): string | null {
  const { schedule, policy, scheduledFor, attempt, now, graceMs } = input;
  const cutoff = now.getTime() - graceMs;
  if (attempt !== 1 || policy === "fire_all" || scheduledFor.getTime() >= cutoff) return null;
  const isOccurrence = occurrences(schedule, scheduledFor, scheduledFor, 1).length === 1;
  if (!isOccurrence) return null;
  const lateBy = `${Math.round((now.getTime() - scheduledFor.getTime()) / 1000)} s`;
  if (policy === "skip")
    return `misfire: started ${lateBy} late, past the ${graceMs / 1000} s grace; policy skip`;
  const next = nextOccurrence(schedule, scheduledFor);
  if (next !== null && next.getTime() < cutoff) {
    return `misfire: started ${lateBy} late; policy fire_once runs only the most recent missed occurrence`;
  }
  return null;
}
