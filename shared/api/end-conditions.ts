import { firstOccurrence, isAfterSchedule, type ScheduleSpec } from "../schedule/index.js";
import { type FieldIssue, ValidationError } from "../validation.js";
import { instantParam } from "./query-params.js";

/**
 * The end condition of a recurring job, checked: `endAt` an instant after now and not before
 * the schedule's startAt; neither field on a one-off (it runs once anyway). Returns endAt
 * normalized to UTC.
 */
export function checkedEnd(
  end: { endAt?: string | null | undefined; maxRuns?: number | null | undefined },
  schedule: ScheduleSpec,
  now: Date,
): string | null | undefined {
  const issues: FieldIssue[] = [];
  // A one-off runs once anyway; an `after` job has no occurrences of its own to end or count.
  const notFor =
    "runAt" in schedule ? "a runAt schedule" : isAfterSchedule(schedule) ? "schedule.after" : null;
  if (notFor !== null) {
    for (const field of ["endAt", "maxRuns"] as const) {
      if (end[field] !== undefined && end[field] !== null)
        issues.push({
          field,
          message: `applies to cron and every schedules only, not to ${notFor}`,
        });
    }
    if (issues.length > 0) throw new ValidationError(issues);
  }
  if (end.endAt === undefined || end.endAt === null) return end.endAt;
  const endAt = instantParam("endAt", end.endAt);
  if (endAt.getTime() <= now.getTime()) {
    throw new ValidationError([
      { field: "endAt", message: `must lie in the future; got ${endAt.toISOString()}` },
    ]);
  }
  if ("every" in schedule && schedule.startAt && endAt < new Date(schedule.startAt)) {
    throw new ValidationError([
      {
        field: "endAt",
        message: `must not be before schedule.startAt (${schedule.startAt}); got ${endAt.toISOString()}`,
      },
    ]);
  }
  return endAt.toISOString();
}

/**
 * {@link checkedEnd} for a job created now (a create, each of a batch's, a schedule's preview): an
 * `endAt` before the schedule's first occurrence leaves the job nothing to run, so it is refused as
 * one before `startAt` is (a cron's first time may lie days or years ahead). An edit may end a job
 * that way on purpose: it completes at once.
 */
export function checkedNewEnd(
  end: { endAt?: string | null | undefined; maxRuns?: number | null | undefined },
  schedule: ScheduleSpec,
  now: Date,
): string | null | undefined {
  const endAt = checkedEnd(end, schedule, now);
  if (endAt === null || endAt === undefined) return endAt;
  const first = firstOccurrence(schedule, now);
  if (first !== null && first.getTime() > Date.parse(endAt)) {
    throw new ValidationError([
      {
        field: "endAt",
        message: `lies before the schedule's first occurrence (${first.toISOString()}), so the job would never run; got ${endAt}`,
      },
    ]);
  }
  return endAt;
}
