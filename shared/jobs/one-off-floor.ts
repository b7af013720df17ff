import type { Engine } from "../engine.js";
import type { Job } from "../model.js";
import { type ScheduleSpec, windowMsOf } from "../schedule/index.js";

/**
 * The job's `oneOffFrom` once it has `schedule`, written at `now` by a create (`job` null) or an
 * edit of `job`: the earliest occurrence it has had as a one-off. Its `runAt`, the time it became
 * one (a trigger's run is scheduled for its trigger's time, never before), and when it was a
 * one-off already, its floor and the `runAt` it leaves (a retry there runs at that old time).
 * Undefined for a schedule that is not a one-off's: its runs are listed, and a recurring job's
 * history before it became a one-off is none of the one-off's.
 */
function oneOffFloorOf(job: Job | null, schedule: ScheduleSpec, now: Date): string | undefined {
  if (!("runAt" in schedule)) return undefined;
  const times = [Date.parse(schedule.runAt), now.getTime()];
  if (job !== null && "runAt" in job.schedule) {
    times.push(Date.parse(job.schedule.runAt));
    if (job.oneOffFrom !== undefined) times.push(Date.parse(job.oneOffFrom));
  }
  return new Date(Math.min(...times)).toISOString();
}

/** `oneOffFrom` as a job's field: absent when `oneOffFloorOf` has none to write. */
export function withOneOffFloor(
  job: Job | null,
  schedule: ScheduleSpec,
  now: Date,
): { readonly oneOffFrom?: string } {
  const oneOffFrom = oneOffFloorOf(job, schedule, now);
  return oneOffFrom === undefined ? {} : { oneOffFrom };
}

/**
 * The earliest occurrence a read of a one-off's runs starts from (a pause's or cancel's, a
 * resume's of the retries it left): its floor (`oneOffFrom`), its `runAt`, and one lookahead and
 * its window back from `now`, whichever is earliest. A one-off written by an earlier version has
 * no floor: read from its `runAt` or a lookahead back, as that version read it.
 */
export function oneOffRunsFrom(engine: Engine, job: Job, runAt: string, now: Date): Date {
  const floor =
    job.oneOffFrom === undefined ? Number.POSITIVE_INFINITY : Date.parse(job.oneOffFrom);
  return new Date(Math.min(floor, Date.parse(runAt), liveRunsWindowFrom(engine, job, now)));
}

/**
 * One lookahead and the job's window back from `now` (epoch ms): the earliest occurrence of a run
 * the dispatcher can have queued and not yet seen end, since a jittered occurrence runs up to its
 * window after `scheduledFor`.
 */
export function liveRunsWindowFrom(engine: Engine, job: Job, now: Date): number {
  return now.getTime() - engine.settings.lookaheadMs - (windowMsOf(job.window) ?? 0);
}
