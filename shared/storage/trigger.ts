import { DeleteCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { bucketKey, shardOf, triggeredMarkerSortKey, triggerSortKey } from "../keys.js";
import type { DueEntry, DueKey, Job, Run, RunTrigger } from "../model.js";
import { retryOnContention } from "./dynamo-errors.js";
import { encodeDueEntry, jobNotCancelledCheck, jobPk, jobStatusCheck } from "./items.js";
import { runExpiresAt } from "./retention.js";
import { ConditionsFailedError, type NamedWrite, writeTransaction } from "./transaction.js";

/**
 * The writes that turn an upstream run's ending into runs of its dependents: the `trigger` due
 * entry its ending writes (see run-finish.ts), and the fan-out's write per dependent.
 */

type Item = Record<string, unknown>;

/**
 * The `trigger` entry of an upstream run that ended `status` (written with the ending): filed in
 * the current minute's bucket of the upstream's shard, so the next dispatcher pass fans it out if
 * the worker that wrote it does not live to.
 */
export function triggerEntryOf(
  engine: Engine,
  job: Job,
  run: Run,
  status: "SUCCEEDED" | "DEAD",
  now: Date,
): DueEntry {
  return {
    key: {
      pk: bucketKey(now, shardOf(job.jobId, engine.settings.shardCount)),
      sk: triggerSortKey(now, run.runId),
    },
    kind: "trigger",
    jobId: job.jobId,
    tenantId: job.tenantId,
    dueAt: now.toISOString(),
    scheduledFor: run.scheduledFor,
    attempt: run.attempt,
    jobVersion: job.version,
    priority: job.priority,
    schedule: job.schedule,
    misfire: job.policies.misfire,
    fanOut: { runId: run.runId, status, dependents: job.dependents },
  };
}

/** What writing one dependent's triggered run came to. */
export type TriggeredRunWrite =
  /** The run is written, with the record that this upstream run was fanned out to the dependent. */
  | "written"
  /** An earlier fan-out of the same upstream run wrote the dependent's run: nothing more to do. */
  | "done-before"
  /** Another run holds the run's key (its occurrence instant): try the next millisecond. */
  | "key-taken"
  /** The dependent's status is no longer the one read: read it again and decide again. */
  | "job-changed"
  /** The upstream job is cancelled or deleted: it triggers nothing any more. */
  | "upstream-ended";

type TriggeredWrite = "marker" | "run" | "job" | "upstream";

/**
 * Writes a dependent's run queued (or recorded SKIPPED) by an upstream run, once: one
 * transaction puts the run, puts the record `TRIGGERED#<upstream run id>` in the dependent's
 * partition (which must not exist: a repeated fan-out finds it), checks the dependent still
 * has the status the run was planned from, and checks the upstream job is not cancelled,
 * deleted or being deleted (`jobNotCancelledCheck`).
 */
export async function writeTriggeredRun(
  engine: Engine,
  dependent: Job,
  upstream: RunTrigger,
  runItem: Item,
  now: Date,
): Promise<TriggeredRunWrite> {
  const writes: NamedWrite<TriggeredWrite>[] = [
    {
      name: "marker",
      write: {
        Put: {
          TableName: engine.tables.runs,
          Item: {
            pk: jobPk(dependent.jobId),
            sk: triggeredMarkerSortKey(upstream.runId),
            tenantId: dependent.tenantId,
            upstreamJobId: upstream.jobId,
            triggeredRunId: String(runItem.runId),
            createdAt: now.toISOString(),
            expiresAt: runExpiresAt(now, engine.settings),
          },
          ConditionExpression: "attribute_not_exists(pk)",
        },
      },
    },
    {
      name: "run",
      write: {
        Put: {
          TableName: engine.tables.runs,
          Item: runItem,
          ConditionExpression: "attribute_not_exists(pk)",
        },
      },
    },
    { name: "job", write: jobStatusCheck(engine.tables.jobs, dependent.jobId, dependent.status) },
    // From a delete's first commit (its cancel; a completed job's mark) on, no fan-out of the
    // job's runs writes anything, even of a run that ended before it. COMPLETED passes (a one-off
    // completes with the run that triggers), and PAUSED (a pause does not take back a run that had
    // started).
    { name: "upstream", write: jobNotCancelledCheck(engine.tables.jobs, upstream.jobId) },
  ];
  try {
    await writeTransaction(engine, "fan-out", writes);
    return "written";
  } catch (error) {
    if (!(error instanceof ConditionsFailedError)) throw error;
    if (error.has("marker")) return "done-before";
    if (error.has("upstream")) return "upstream-ended";
    if (error.has("job")) return "job-changed";
    return "key-taken";
  }
}

/**
 * Moves a trigger entry whose fan-out failed for a reason that would repeat (DynamoDB refused a
 * dependent's write) to the bucket of its shard at `at`, in one transaction: a later pass fans it
 * out again, and writes what is still missing. It is never set aside as an occurrence's entry is:
 * no edit of a job files a trigger entry again, so one set aside would never run its dependents,
 * and its record would outlive its upstream. "gone" when it was fanned out (or moved) meanwhile.
 */
export async function refileTriggerEntry(
  engine: Engine,
  shard: number,
  entry: DueEntry,
  at: Date,
): Promise<"refiled" | "gone"> {
  const upstreamRunId = entry.fanOut?.runId ?? entry.key.sk;
  const moved: DueEntry = {
    ...entry,
    key: { pk: bucketKey(at, shard), sk: triggerSortKey(at, upstreamRunId) },
    dueAt: at.toISOString(),
  };
  try {
    await writeTransaction(engine, "fan-out", [
      {
        name: "entry",
        write: {
          Delete: {
            TableName: engine.tables.jobs,
            Key: entry.key,
            ConditionExpression: "attribute_exists(pk)",
          },
        },
      },
      {
        name: "moved",
        write: { Put: { TableName: engine.tables.jobs, Item: encodeDueEntry(moved) } },
      },
    ]);
    return "refiled";
  } catch (error) {
    if (error instanceof ConditionsFailedError && error.has("entry")) return "gone";
    throw error;
  }
}

/** Removes a trigger entry once it is fanned out; gone already is fine (another pass did it). */
export async function removeTriggerEntry(engine: Engine, key: DueKey): Promise<void> {
  await retryOnContention(engine, "fan-out", () =>
    engine.doc.send(new DeleteCommand({ TableName: engine.tables.jobs, Key: key })),
  );
}
