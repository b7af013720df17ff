import type { RunSummary } from "../model.js";

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
