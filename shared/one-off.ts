import type { Job, Run } from "./model.js";

/**
 * Whether `scheduledFor` is the one-off's own occurrence: the job's schedule is a `runAt` at that
 * instant. An edit may have moved it (a new runAt) or made the job recurring since a run of it
 * began; that run's ending then leaves the job to what the edit gave it.
 */
export const isOneOffOccurrence = (job: Pick<Job, "schedule">, scheduledFor: string) =>
  "runAt" in job.schedule && Date.parse(job.schedule.runAt) === Date.parse(scheduledFor);

/**
 * Whether `run`'s ending may complete its one-off: of its occurrence, and not an attempt before the
 * one an edit or a resume filed it at since (`oneOffAttempt`), which then runs.
 */
export const isOneOffRun = (
  job: Pick<Job, "schedule" | "oneOffAttempt">,
  run: Pick<Run, "scheduledFor" | "attempt">,
) =>
  isOneOffOccurrence(job, run.scheduledFor) &&
  run.attempt >= oneOffAttemptOf(job, run.scheduledFor);

/** The attempt the one-off's occurrence at `at` runs from (`oneOffAttempt`): 1 unless filed later. */
export const oneOffAttemptOf = (job: Pick<Job, "oneOffAttempt">, at: string) =>
  job.oneOffAttempt !== undefined && Date.parse(job.oneOffAttempt.at) === Date.parse(at)
    ? job.oneOffAttempt.attempt
    : 1;
