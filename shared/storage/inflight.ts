import { QueryCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { isConditionalCheckFailed } from "./dynamo-errors.js";
import { decodeRun, inflightPk } from "./items.js";
import { getRunItem, type RunRef, runKeyOf } from "./run-reads.js";
import { runKey } from "./runs.js";
import { RUNS_INFLIGHT_INDEX } from "./tables.js";

/**
 * The reaper's index of QUEUED and RUNNING runs (`inflight`, sparse, keys
 * only): its sort key is the deadline by which the reaper should look at the
 * run again.
 */

export type RunItemKey = { readonly pk: string; readonly sk: string };

/** A run as read for the reaper, with the deadline its index entry carries. */
export type InflightRun = Run & { readonly inflightSk: string };

/** The table keys of the shard's runs whose deadline is before `before`, oldest first, at most `max`. */
export async function overdueRunKeys(
  engine: Engine,
  shard: number,
  before: Date,
  max: number,
): Promise<RunItemKey[]> {
  const found: RunItemKey[] = [];
  let startKey: Record<string, unknown> | undefined;
  do {
    const page = await engine.doc.send(
      new QueryCommand({
        TableName: engine.tables.runs,
        IndexName: RUNS_INFLIGHT_INDEX,
        KeyConditionExpression: "inflightPk = :pk AND inflightSk < :now",
        ExpressionAttributeValues: { ":pk": inflightPk(shard), ":now": before.toISOString() },
        ExclusiveStartKey: startKey,
        Limit: Math.min(max, 1000),
      }),
    );
    for (const item of page.Items ?? []) found.push({ pk: String(item.pk), sk: String(item.sk) });
    startKey = found.length < max ? page.LastEvaluatedKey : undefined;
  } while (startKey);
  return found;
}

/** The run at `key` with its index deadline; null when it is gone or no longer in the index. */
export async function readInflightRun(
  engine: Engine,
  key: RunItemKey,
): Promise<InflightRun | null> {
  const item = await getRunItem(engine, key);
  if (!item || typeof item.inflightSk !== "string") return null;
  return { ...decodeRun(item), inflightSk: item.inflightSk };
}

/**
 * Moves the run's deadline on (and notes a first re-send), only if nobody
 * touched it since it was read: the same deadline, status and fence. False
 * when someone did.
 */
export async function pushInflightDeadline(
  engine: Engine,
  run: InflightRun,
  deadline: Date,
  misfireFrom: Date | null,
): Promise<boolean> {
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKey(run.jobId, run.scheduledFor, run.attempt),
        ConditionExpression: "inflightSk = :seen AND #status = :status AND fence = :fence",
        UpdateExpression: `SET inflightSk = :deadline${misfireFrom ? ", misfireFrom = :misfireFrom" : ""}`,
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":seen": run.inflightSk,
          ":status": run.status,
          ":fence": run.fence,
          ":deadline": deadline.toISOString(),
          ...(misfireFrom ? { ":misfireFrom": misfireFrom.toISOString() } : {}),
        },
      }),
    );
    return true;
  } catch (error) {
    if (isConditionalCheckFailed(error)) return false;
    throw error;
  }
}

/**
 * Moves a QUEUED run's reaper deadline on to `deadline`, while it is still QUEUED under the fence
 * its message carries: the worker loop holds its message and will start it, so the reaper must not
 * take it for lost. False when the run started, ended or moved on meanwhile.
 */
export async function pushQueuedDeadline(
  engine: Engine,
  ref: RunRef,
  fence: number,
  deadline: Date,
): Promise<boolean> {
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(ref),
        ConditionExpression: "#status = :queued AND fence = :fence AND inflightSk < :deadline",
        UpdateExpression: "SET inflightSk = :deadline",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":queued": "QUEUED",
          ":fence": fence,
          ":deadline": deadline.toISOString(),
        },
      }),
    );
    return true;
  } catch (error) {
    if (isConditionalCheckFailed(error)) return false;
    throw error;
  }
}
