/**
 * A job's schedule exactly as the HTTP API accepts it and as it is stored on the job.
 *
 * - `runAt`: one instant, ISO-8601 with `Z` or an offset.
 * - `cron` + `timezone`: 5 fields, or 6 with a leading seconds field, evaluated in an IANA zone.
 * - `every` (+ `startAt`): a fixed ISO-8601 duration of elapsed time from `startAt`, so DST does
 *   not move it; stored specs always carry `startAt` (see `normalizeSchedule`).
 */
export type ScheduleSpec = RunAtSchedule | CronSchedule | EverySchedule;

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

export type ScheduleKind = "runAt" | "cron" | "every";
