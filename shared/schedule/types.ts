/**
 * A job's schedule exactly as the HTTP API accepts it and as it is stored on the job.
 *
 * - `runAt`: one instant, ISO-8601 with `Z` or an offset.
 * - `cron` + `timezone`: 5 fields, or 6 with a leading seconds field, evaluated in an IANA zone.
 * - `every` (+ `startAt`): a fixed ISO-8601 duration of elapsed time from `startAt`, so DST does
 *   not move it; stored specs always carry `startAt` (see `normalizeSchedule`).
 * - `after`: no times of its own; a run is queued each time a run of one of the named upstream
 *   jobs ends the way `on` says (see shared/dispatch/trigger-fan-out.ts).
 */
export type ScheduleSpec = RunAtSchedule | CronSchedule | EverySchedule | AfterSchedule;

interface RunAtSchedule {
  readonly runAt: string;
}

interface CronSchedule {
  readonly cron: string;
  readonly timezone: string;
}

interface EverySchedule {
  readonly every: string;
  readonly startAt?: string;
}

/** Which ending of an upstream run queues a run of its dependent: `completion` is either. */
export type AfterOn = "success" | "failure" | "completion";
export const AFTER_ON: readonly AfterOn[] = ["success", "failure", "completion"];

export interface AfterSchedule {
  readonly after: { readonly jobs: readonly string[]; readonly on: AfterOn };
}

export type ScheduleKind = "runAt" | "cron" | "every" | "after";

/** A schedule that runs after other jobs rather than at times of its own. */
export function isAfterSchedule(spec: ScheduleSpec): spec is AfterSchedule {
  return "after" in spec;
}
