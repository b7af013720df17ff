import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Job, Run, RunSummary } from "../model.js";
import { isOneOffRun } from "../one-off.js";
import {
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
} from "./dynamo-errors.js";
import { decodeJob, jobKey } from "./items.js";
import { finishedAfter, LAST_RUN_OLDER, lastRunOlderValues } from "./last-run.js";
import { completedJobExpiresAt } from "./retention.js";
import type { RunEnding } from "./run-finish.js";
import type { TransactItem } from "./transaction.js";

/*
 * The job's side of a run's ending (`finishRun`'s, a cancel's, the redrive DLQ's, and a later
 * delivery's repair of it): lastRun, the run out of activeRuns, a one-off's completion.
 */

type UpdateInput = NonNullable<TransactItem["Update"]>;

/** The job item is still there (a job's bookkeeping never creates it). */
const JOB_EXISTS = "attribute_exists(pk)";
/** A one-off job completes with its run only while ACTIVE: a pause or cancel meanwhile stands. */
const JOB_ACTIVE = "#status = :active";
/**
 * ...and only while the job is still the one-off of the run's occurrence: an edit during the run
 * (a new runAt, a recurring schedule) gave it something else to run, which the ending must not end;
 * nor an edit or resume that filed the occurrence at a later attempt than the run's
 * (`oneOffAttempt`), which that attempt's run completes (`isOneOffRun`).
 */
const ONE_OFF_OF_RUN =
  "#schedule.runAt = :runAt AND (attribute_not_exists(oneOffAttempt) OR oneOffAttempt.#at <> :runAt OR oneOffAttempt.attempt <= :attempt)";
/** A repair finds the run still listed as active: the job's write has not landed yet. */
const RUN_STILL_ACTIVE = "attribute_exists(activeRuns.#runId)";
/**
 * How many times the job's side of an ending is written: each refusal of a job that still exists
 * takes lastRun or the completion out of the write, so a third can fail only on a job gone.
 */
const JOB_WRITE_ATTEMPTS = 3;

/** The job's side of a run's ending. */
export type JobEnding = Pick<RunEnding, "status" | "ran" | "tracked" | "completesJob">;

/**
 * The job's side of a run's ending: lastRun when the handler ran, the run out
 * of activeRuns when tracked, COMPLETED for a one-off's own occurrence. A refusal answers with
 * the job as it stood, on which the write is decided again (`jobEndingAgainst`): the rest of the
 * bookkeeping applies whether or not lastRun and the completion do. A job gone takes nothing.
 * With `answer` (a request that answers the job, a job cancel or pause), the write returns the
 * job as it left it (`ALL_NEW`, no read): that job, or the job as the last refusal found it when
 * nothing was left to write; null when there was nothing to write or the job is gone (and always
 * without `answer`, which a worker's ending does not need).
 */
export async function recordRunOnJob(
  engine: Engine,
  run: Run,
  ending: JobEnding,
  { answer = false }: { readonly answer?: boolean } = {},
): Promise<Job | null> {
  let decided = ending;
  let found: Job | null = null;
  for (let attempt = 0; attempt < JOB_WRITE_ATTEMPTS; attempt++) {
    const update = jobAfterRun(engine, run, decided);
    if (update === null) return found;
    try {
      const { Attributes: written } = await retryOnContention(engine, "finish", () =>
        engine.doc.send(
          new UpdateCommand(answer ? { ...update, ReturnValues: "ALL_NEW" } : update),
        ),
      );
      return written === undefined ? null : decodeJob(written);
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
      const item = failedConditionItem(error);
      if (item === null) return null;
      const job = decodeJob(item);
      if (answer) found = job;
      decided = jobEndingAgainst(job, run, decided);
    }
  }
  return found;
}

/**
 * What of the ending `ending` the job, as a refused write found it, still takes: lastRun only when
 * this run finished after the job's (`finishedAfter`), the completion only while the job is
 * ACTIVE (a pause or cancel meanwhile stands) and the one-off of this run (`isOneOffRun`); the run
 * leaves activeRuns all the same.
 */
function jobEndingAgainst(job: Job, run: Run, ending: JobEnding): JobEnding {
  return {
    ...ending,
    ran: ending.ran && finishedAfter(lastRunOf(run), job.lastRun),
    completesJob: ending.completesJob === true && job.status === "ACTIVE" && isOneOffRun(job, run),
  };
}

const lastRunOf = (run: Run) => ({ runId: run.runId, finishedAt: run.finishedAt ?? "" });

/** A repair's write: made, or refused by the job as it stands then (null: the job is gone). */
export type RepairOutcome =
  | { readonly kind: "written" }
  | { readonly kind: "refused"; readonly job: Job | null };

/**
 * The job's side of a run's ending, made by a later delivery that found the run ended
 * (run-endings.ts `repairJobAfterRun`): conditioned on the job still lacking what the repair
 * decided from it (a tracked run still listed, lastRun older than this run, an ACTIVE one-off
 * to complete), so a repeat changes nothing and a change meanwhile is never undone. A refusal
 * answers with the job as it then stood, on which the caller decides again.
 */
export async function repairRunOnJob(
  engine: Engine,
  run: Run,
  ending: JobEnding,
): Promise<RepairOutcome> {
  const update = jobAfterRun(engine, run, ending, { repair: true });
  // Nothing of the ending is the job's to record.
  if (update === null) return { kind: "written" };
  try {
    await retryOnContention(engine, "finish", () => engine.doc.send(new UpdateCommand(update)));
    return { kind: "written" };
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const item = failedConditionItem(error);
    return { kind: "refused", job: item === null ? null : decodeJob(item) };
  }
}

function jobAfterRun(
  engine: Engine,
  run: Run,
  ending: JobEnding,
  options: { repair?: boolean } = {},
): UpdateInput | null {
  if (!ending.ran && !ending.tracked && !ending.completesJob) return null;
  const sets = ["activeRevision = if_not_exists(activeRevision, :zero) + :one"];
  const values: Record<string, unknown> = { ":zero": 0, ":one": 1 };
  const names: Record<string, string> = {};
  const conditions = [JOB_EXISTS];
  if (ending.ran) {
    const summary: RunSummary = {
      runId: run.runId,
      status: ending.status,
      scheduledFor: run.scheduledFor,
      attempt: run.attempt,
      finishedAt: run.finishedAt ?? "",
    };
    sets.push("lastRun = :lastRun");
    values[":lastRun"] = summary;
    // Two runs of the job may end together: the one whose write lands second never sets it back.
    conditions.push(LAST_RUN_OLDER);
    Object.assign(values, lastRunOlderValues(summary));
  }
  if (ending.completesJob) {
    sets.push(
      "#status = :completed",
      "nextRunAt = :null",
      "nextDueKey = :null",
      "expiresAt = :expiresAt",
    );
    conditions.push(JOB_ACTIVE, ONE_OFF_OF_RUN);
    names["#status"] = "status";
    names["#schedule"] = "schedule";
    names["#at"] = "at";
    const completedAt = run.finishedAt === null ? engine.clock() : new Date(run.finishedAt);
    Object.assign(values, {
      ":completed": "COMPLETED",
      ":active": "ACTIVE",
      ":runAt": run.scheduledFor,
      ":attempt": run.attempt,
      ":null": null,
      ":expiresAt": completedJobExpiresAt(completedAt, 0, engine.settings),
    });
  }
  if (ending.tracked) {
    names["#runId"] = run.runId;
    if (options.repair) conditions.push(RUN_STILL_ACTIVE);
  }
  return {
    TableName: engine.tables.jobs,
    Key: jobKey(run.jobId),
    ConditionExpression: conditions.join(" AND "),
    UpdateExpression: `SET ${sets.join(", ")}${ending.tracked ? " REMOVE activeRuns.#runId" : ""}`,
    ...(Object.keys(names).length > 0 ? { ExpressionAttributeNames: names } : {}),
    ExpressionAttributeValues: values,
    // A refusal answers with the job as it stood, to decide the write again on it.
    ReturnValuesOnConditionCheckFailure: "ALL_OLD",
  };
}
