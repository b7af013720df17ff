import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { DueEntry, DueKey, Job, Run } from "../model.js";
import { oneOffAttemptOf } from "../one-off.js";
import { type UpstreamWriteName, upstreamOfWriteName } from "./dependents.js";
import { encodeDueEntry, jobKey, sameFloorCondition } from "./items.js";
import { runKeyOf } from "./run-reads.js";
import { setAsideKeyOf } from "./set-aside.js";
import {
  ConditionsFailedError,
  type NamedWrite,
  type TransactItem,
  writeTransaction,
} from "./transaction.js";

/**
 * The writes a lifecycle change (pause, resume, cancel, edit) is made of: the
 * job's update, conditioned on the job as the change was planned from it, and
 * the due entries it deletes or puts.
 */
export type JobChangeWrite = NamedWrite<
  | "job"
  | "pendingDueEntry"
  | "dueEntry"
  | "setAside"
  | "retryEntry"
  | "runUnderWay"
  | "runAtFree"
  | "skippedRetry"
>;

/** The job update shared by lifecycle changes: conditioned on the state the change was planned from. */
export function updateJobFrom(
  engine: Engine,
  job: Job,
  set: Record<string, unknown>,
  extra: { bumpVersion?: boolean; sameParkedRuns?: boolean; sameLinkRevision?: boolean } = {},
): JobChangeWrite {
  const names: Record<string, string> = { "#status": "status" };
  const values: Record<string, unknown> = {
    ":seenStatus": job.status,
    ":seenVersion": job.version,
  };
  const assignments = Object.entries(set).map(([field, value], i) => {
    names[`#f${i}`] = field;
    values[`:v${i}`] = value;
    return `#f${i} = :v${i}`;
  });
  if (extra.bumpVersion) assignments.push("version = version + :one");
  if (extra.bumpVersion) values[":one"] = 1;
  // nextDueKey moves with every claim: the transaction must delete the entry the job points at now.
  const dueCondition = job.nextDueKey
    ? "nextDueKey.pk = :duePk AND nextDueKey.sk = :dueSk"
    : "(attribute_not_exists(nextDueKey) OR nextDueKey = :null)";
  if (job.nextDueKey) {
    values[":duePk"] = job.nextDueKey.pk;
    values[":dueSk"] = job.nextDueKey.sk;
  } else {
    values[":null"] = null;
  }
  // Workers only add to parkedRuns (while PAUSED), so the same size means the same runs.
  let parkedCondition = "";
  if (extra.sameParkedRuns) {
    names["#parked"] = "parkedRuns";
    values[":parkedCount"] = Object.keys(job.parkedRuns).length;
    parkedCondition = ` AND (attribute_not_exists(#parked) OR size(#parked) = :parkedCount)`;
  }
  // No job linked in below it since the read (dependents.ts): what it counted below it still stands.
  let linkCondition = "";
  if (extra.sameLinkRevision) {
    names["#links"] = "linkRevision";
    values[":seenLinks"] = job.linkRevision ?? 0;
    linkCondition =
      (job.linkRevision ?? 0) === 0
        ? " AND (attribute_not_exists(#links) OR #links = :seenLinks)"
        : " AND #links = :seenLinks";
  }
  const floorCondition = sameFloorCondition(job, values);
  return {
    name: "job",
    write: {
      Update: {
        TableName: engine.tables.jobs,
        Key: jobKey(job.jobId),
        ConditionExpression: `#status = :seenStatus AND version = :seenVersion AND ${floorCondition} AND ${dueCondition}${parkedCondition}${linkCondition}`,
        UpdateExpression: `SET ${assignments.join(", ")}`,
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
      },
    },
  };
}

/**
 * `oneOffAttempt` as a change that files the one-off's occurrence `at` at `attempt` (an edit that
 * gives it that `runAt`, a resume's entry) writes it: nothing when it says so already.
 */
export const oneOffAttemptAt = (
  job: Pick<Job, "oneOffAttempt">,
  at: string,
  attempt: number,
): Pick<Job, "oneOffAttempt"> =>
  attempt === oneOffAttemptOf(job, at)
    ? {}
    : { oneOffAttempt: { at: new Date(at).toISOString(), attempt } };

/** Deletes the due entry the job points at, if any, and its set-aside record, if it has one. */
export const deletePendingDueEntry = (engine: Engine, job: Job): JobChangeWrite[] =>
  job.nextDueKey
    ? [
        {
          name: "pendingDueEntry",
          write: { Delete: { TableName: engine.tables.jobs, Key: job.nextDueKey } },
        },
        deleteSetAside(engine, job.nextDueKey),
      ]
    : [];

/**
 * Deletes the set-aside record of the due entry at `dueKey` (none, almost always: the delete of a
 * missing item writes nothing): a job that stops naming the entry, or rewrites it, no longer waits
 * on it, and a deleted job's record would otherwise stay forever.
 */
export const deleteSetAside = (engine: Engine, dueKey: DueKey): JobChangeWrite => ({
  name: "setAside",
  write: { Delete: { TableName: engine.tables.jobs, Key: setAsideKeyOf(dueKey) } },
});

/** A new due entry, conditioned on its key being free. */
export const putDueEntry = (engine: Engine, entry: DueEntry): TransactItem => ({
  Put: {
    TableName: engine.tables.jobs,
    Item: encodeDueEntry(entry),
    ConditionExpression: "attribute_not_exists(pk)",
  },
});

/**
 * Sends a lifecycle change as one transaction. A failed condition on the job
 * means another writer (a claim, a worker, another request) changed it since
 * it was read: `ConcurrentUpdateError`, and the caller plans again from a
 * fresh read. So does one on an upstream of an `after` schedule (see
 * dependents.ts): it changed or went since the edit's check read it.
 */
export async function writeJobChange(
  engine: Engine,
  job: Job,
  writes: readonly (JobChangeWrite | NamedWrite<UpstreamWriteName>)[],
): Promise<void> {
  try {
    await writeTransaction<string>(engine, "lifecycle", writes);
  } catch (error) {
    const upstreamChanged =
      error instanceof ConditionsFailedError &&
      [...error.failed].some((name) => upstreamOfWriteName(name) !== null);
    if (error instanceof ConditionsFailedError && (error.has("job") || upstreamChanged))
      throw new ConcurrentUpdateError(`job ${job.jobId} changed since it was read`, {
        cause: error,
      });
    if (error instanceof ConditionsFailedError && error.has("runUnderWay"))
      throw new ConcurrentUpdateError(`a run of job ${job.jobId} ended since it was read`, {
        cause: error,
      });
    if (error instanceof ConditionsFailedError && error.has("runAtFree"))
      throw new ConcurrentUpdateError(`a run of job ${job.jobId} was put at its new runAt`, {
        cause: error,
      });
    if (error instanceof ConditionsFailedError && error.has("skippedRetry"))
      throw new ConcurrentUpdateError(`a replay of job ${job.jobId} took a retry's place`, {
        cause: error,
      });
    throw error;
  }
}

/**
 * The condition of a change that files a one-off's occurrence at attempt 1 beside its run read
 * under way there (an edit's `attemptForRunAt`, a resume's `pendingOccurrence`): that run still
 * QUEUED or RUNNING and not asked to cancel; for a FAILED one, its next attempt (a retry entry's,
 * not yet claimed) not yet put or under way so. Ended in between, the claim at attempt 1 would find
 * that attempt handled and leave the one-off with nothing pending: refused, the change reads it
 * again (`ConcurrentUpdateError`) and files the next attempt, or refuses (an edit) or completes (a
 * resume) a time whose run succeeded. A transaction item more, only for such a change.
 */
export function runStillUnderWay(engine: Engine, run: Run): JobChangeWrite {
  const key =
    run.status === "FAILED" ? runKeyOf({ ...run, attempt: run.attempt + 1 }) : runKeyOf(run);
  return {
    name: "runUnderWay",
    write: {
      ConditionCheck: {
        TableName: engine.tables.runs,
        Key: key,
        ConditionExpression: `${run.status === "FAILED" ? "attribute_not_exists(pk) OR " : ""}(#status IN (:queued, :running) AND NOT attribute_type(cancelRequestedAt, :string))`,
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: { ":queued": "QUEUED", ":running": "RUNNING", ":string": "S" },
      },
    },
  };
}

/**
 * The condition of an edit that files a one-off's occurrence at `attempt` of `runAt` where its read
 * saw no run (`attemptForRunAt`): that run item still absent. A trigger's run put there between the
 * read and this commit (the trigger read the job before the edit) would otherwise be taken by the
 * one-off's claim for its own attempt, unstarted and of an older version, and replaced: the run
 * the trigger answered for gone. Refused, the edit is planned again (`ConcurrentUpdateError`) and
 * refuses that time as the triggered run's (`refuseNoOccurrenceTime`).
 */
export function runAtStillFree(
  engine: Engine,
  run: { readonly jobId: string; readonly scheduledFor: string; readonly attempt: number },
): JobChangeWrite {
  return {
    name: "runAtFree",
    write: {
      ConditionCheck: {
        TableName: engine.tables.runs,
        Key: runKeyOf(run),
        ConditionExpression: "attribute_not_exists(pk)",
      },
    },
  };
}

/**
 * The condition of an edit, or a resume, that files a one-off's occurrence after a failure's retry
 * it took back, or read SKIPPED (`givenUpAttemptAt`): that retry's item still the retry of its
 * predecessor. A replay of the dead predecessor takes a skipped retry's key (`REPLAY_KEY_FREE`,
 * dead-letter-replay.ts); put between that read and this commit, it would run beside the attempt
 * filed after it. Refused, the change is planned again (`ConcurrentUpdateError`) and meets the
 * replay's run under way.
 */
export function stillARetry(engine: Engine, retry: Run): JobChangeWrite {
  return {
    name: "skippedRetry",
    write: {
      ConditionCheck: {
        TableName: engine.tables.runs,
        Key: runKeyOf(retry),
        ConditionExpression: "retryOf.runId = :predecessor",
        ExpressionAttributeValues: { ":predecessor": retry.retryOf?.runId ?? null },
      },
    },
  };
}
