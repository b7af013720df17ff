import type { Run, RunSummary } from "../model.js";

/**
 * Whether a run that ended may be its job's `lastRun`: its handler ran. A run that ran has a
 * duration, except one the redrive DLQ ended (`crashedRunning`), DEAD or CANCELLED as asked:
 * every delivery of its message started it and crashed its worker, so it ran, though no ending
 * measured it (a DEAD run the DLQ ended before that mark counts by its status). Skipped runs, and
 * runs cancelled or ended for a deleted job before their handler ran, are not.
 */
export function ranForLastRun(
  run: Pick<Run, "status" | "durationMs" | "finishedAt" | "crashedRunning">,
): boolean {
  return (
    run.finishedAt !== null &&
    (run.durationMs !== null || run.crashedRunning === true || run.status === "DEAD")
  );
}

/**
 * A job's `lastRun` is the run that finished last: the latest `finishedAt` (ISO instants of one
 * length, so they order as text) and, between runs that finished in the same millisecond, the
 * greater runId. Every write that sets it keeps to this order, whatever order the writes land in,
 * so it never goes back to a run before the one it names.
 */
export function finishedAfter(
  run: Pick<RunSummary, "runId" | "finishedAt">,
  than: Pick<RunSummary, "runId" | "finishedAt"> | null,
): boolean {
  if (than === null) return true;
  if (run.finishedAt !== than.finishedAt) return run.finishedAt > than.finishedAt;
  return run.runId > than.runId;
}

/**
 * `finishedAfter` as a job write's condition, on the run `:lastRunFinishedAt`/`:lastRunId` it
 * would set: the job has no lastRun yet, or one that finished before it.
 */
export const LAST_RUN_OLDER =
  "(attribute_not_exists(lastRun.finishedAt) OR lastRun.finishedAt < :lastRunFinishedAt OR (lastRun.finishedAt = :lastRunFinishedAt AND lastRun.runId < :lastRunId))";

/** The values `LAST_RUN_OLDER` names, for the run `run`. */
export const lastRunOlderValues = (run: Pick<RunSummary, "runId" | "finishedAt">) => ({
  ":lastRunFinishedAt": run.finishedAt,
  ":lastRunId": run.runId,
});
