import { QueryCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { batchGetItems } from "./batch-get.js";
import {
  conditionalWrite,
  failedConditionItem,
  isConditionalCheckFailed,
} from "./dynamo-errors.js";
import { decodeRun, inflightPk } from "./items.js";
import { runExpiresAt } from "./retention.js";
import { type RunRef, runKeyOf } from "./run-reads.js";
import { runKey } from "./runs.js";
import { RUNS_INFLIGHT_INDEX } from "./tables.js";

/**
 * The reaper's index of queued runs (`inflight`, sparse, keys only): its sort
 * key is the deadline by which the reaper should look at the run again. A run
 * enters it when it is queued and keeps its entry when it ends (removing it
 * would cost an index write on every run): the reaper reads each entry once,
 * walking a shard's deadlines behind its cursor (`reaper-cursor.ts`).
 */

/** An entry of the index: the run's table key and the deadline it is filed under. */
export type InflightEntry = { readonly pk: string; readonly sk: string; readonly deadline: string };

/**
 * A run as read for the reaper, with the deadline its item carries now, how many times the
 * reaper has re-sent it since it last started (`resends`: under the fence it had then), and its
 * TTL (`expiresAt`, epoch seconds; null when it has none).
 */
export type InflightRun = Run & {
  readonly inflightSk: string;
  readonly resends: { readonly fence: number; readonly count: number } | null;
  readonly expiresAt: number | null;
};

/** Where a read of the index starts: after an entry (exclusive), at a deadline, or at the start. */
export type IndexStart =
  | { readonly after: InflightEntry }
  | { readonly from: string }
  | { readonly fromStart: true };

/**
 * One read of the shard's entries from `start` whose deadline is before `before`, in index order:
 * at most `limit`, after `after` (the last entry of the read before) when given. `more` when the
 * index may hold further ones.
 */
export async function overduePage(
  engine: Engine,
  shard: number,
  {
    start,
    before,
    limit,
    after,
  }: { start: IndexStart; before: Date; limit: number; after?: InflightEntry | undefined },
): Promise<{ readonly entries: InflightEntry[]; readonly more: boolean }> {
  const pk = inflightPk(shard);
  const range =
    "from" in start
      ? {
          KeyConditionExpression: "inflightPk = :pk AND inflightSk BETWEEN :from AND :last",
          ExpressionAttributeValues: {
            ":pk": pk,
            ":from": start.from,
            ":last": new Date(before.getTime() - 1).toISOString(),
          },
        }
      : {
          KeyConditionExpression: "inflightPk = :pk AND inflightSk < :before",
          ExpressionAttributeValues: { ":pk": pk, ":before": before.toISOString() },
        };
  const from = after ?? ("after" in start ? start.after : undefined);
  const page = await engine.doc.send(
    new QueryCommand({
      TableName: engine.tables.runs,
      IndexName: RUNS_INFLIGHT_INDEX,
      ...range,
      ExclusiveStartKey: from && {
        inflightPk: pk,
        inflightSk: from.deadline,
        pk: from.pk,
        sk: from.sk,
      },
      Limit: limit,
    }),
  );
  return {
    entries: (page.Items ?? []).map((item) => ({
      pk: String(item.pk),
      sk: String(item.sk),
      deadline: String(item.inflightSk),
    })),
    more: page.LastEvaluatedKey !== undefined,
  };
}

/** The run's item carries an index entry: it is the reaper's to look at. */
function inflightRunOf(item: Record<string, unknown>): InflightRun | null {
  if (typeof item.inflightSk !== "string") return null;
  const resends =
    typeof item.resentAtFence === "number" && typeof item.resentCount === "number"
      ? { fence: item.resentAtFence, count: item.resentCount }
      : null;
  const expiresAt = typeof item.expiresAt === "number" ? item.expiresAt : null;
  return { ...decodeRun(item), inflightSk: item.inflightSk, resends, expiresAt };
}

/**
 * The runs of these entries by table key (`entryId`); a run gone or out of the
 * index is absent. The reaper reads them eventually consistent (a stale read
 * only makes a conditional push fail) and a run that changed again consistently.
 */
export async function readInflightRuns(
  engine: Engine,
  entries: readonly InflightEntry[],
  { consistentRead }: { readonly consistentRead: boolean },
): Promise<Map<string, InflightRun>> {
  const items = await batchGetItems(
    engine,
    engine.tables.runs,
    entries.map(({ pk, sk }) => ({ pk, sk })),
    { consistentRead },
  );
  const runs = new Map<string, InflightRun>();
  for (const item of items) {
    const run = inflightRunOf(item);
    if (run) runs.set(entryId({ pk: String(item.pk), sk: String(item.sk) }), run);
  }
  return runs;
}

/** One string per run item, to find an entry's run among those read. */
export const entryId = (key: { readonly pk: string; readonly sk: string }) => `${key.pk}|${key.sk}`;

/**
 * Moves the run's deadline on (and notes a first re-send), only if nobody
 * touched it since it was read: the same deadline, status and fence. False
 * when someone did. With `keepUntil` (a re-send of a run no worker holds), the
 * run's TTL is moved on to it when it is earlier: a run waiting longer than the
 * retention for workers to take it (an outage of the workers) has not ended,
 * and TTL must not delete it before it runs.
 */
export async function pushInflightDeadline(
  engine: Engine,
  run: InflightRun,
  deadline: Date,
  misfireFrom: Date | null,
  resentCount: number | null = null,
  keepUntil: number | null = null,
): Promise<boolean> {
  // Never added to a run without one, never brought nearer.
  const expiresAt =
    keepUntil !== null && run.expiresAt !== null && run.expiresAt < keepUntil ? keepUntil : null;
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKey(run.jobId, run.scheduledFor, run.attempt),
        ConditionExpression: "inflightSk = :seen AND #status = :status AND fence = :fence",
        UpdateExpression: `SET inflightSk = :deadline${misfireFrom ? ", misfireFrom = :misfireFrom" : ""}${
          resentCount === null ? "" : ", resentAtFence = :fence, resentCount = :resentCount"
        }${expiresAt === null ? "" : ", expiresAt = :expiresAt"}`,
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":seen": run.inflightSk,
          ":status": run.status,
          ":fence": run.fence,
          ":deadline": deadline.toISOString(),
          ...(misfireFrom ? { ":misfireFrom": misfireFrom.toISOString() } : {}),
          ...(resentCount === null ? {} : { ":resentCount": resentCount }),
          ...(expiresAt === null ? {} : { ":expiresAt": expiresAt }),
        },
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
    return true;
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    // Sent again by the SDK after its answer was lost (a dropped connection, a 500 after DynamoDB
    // applied it), the write fails on its own deadline: the run stands as this write left it. Taken
    // for someone else's move, the re-send would be skipped, and the run wait a whole further
    // interval (up to 15 minutes) for the next one.
    const old = failedConditionItem(error);
    return (
      old !== null &&
      old.inflightSk === deadline.toISOString() &&
      old.status === run.status &&
      old.fence === run.fence &&
      (resentCount === null || old.resentCount === resentCount)
    );
  }
}

/** What `pushInflightDeadline` wrote for a re-send: the deadline, and what it counted. */
export interface PushedResend {
  readonly deadline: Date;
  readonly resentCount: number | null;
  readonly misfireFrom: Date | null;
}

/**
 * Takes back what a push counted for a re-send whose message SQS did not take: the run's count of
 * re-sends as it was before (`run`, as the push read it), the misfire clock the push started (a
 * late start counts from a re-send that happened, not from one that failed), and its deadline
 * brought back to `retryAt`, when the reaper tries again. Only while the run stands as the push
 * left it (a worker that started it meanwhile has its own message); false otherwise.
 */
export async function undoResend(
  engine: Engine,
  run: InflightRun,
  pushed: PushedResend,
  retryAt: Date,
): Promise<boolean> {
  const set = ["inflightSk = :retryAt"];
  const remove: string[] = [];
  const values: Record<string, unknown> = {
    ":pushed": pushed.deadline.toISOString(),
    ":status": run.status,
    ":fence": run.fence,
    ":retryAt": retryAt.toISOString(),
  };
  if (pushed.resentCount !== null) {
    if (run.resends === null) remove.push("resentAtFence", "resentCount");
    else {
      set.push("resentAtFence = :countedFence", "resentCount = :counted");
      values[":countedFence"] = run.resends.fence;
      values[":counted"] = run.resends.count;
    }
  }
  if (pushed.misfireFrom !== null) remove.push("misfireFrom");
  // Refused: moved on since the push (started, ended, or pushed again), or this very write applied
  // with its answer lost; either way nothing is left to take back.
  return conditionalWrite(() =>
    engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKey(run.jobId, run.scheduledFor, run.attempt),
        ConditionExpression: "inflightSk = :pushed AND #status = :status AND fence = :fence",
        UpdateExpression: `SET ${set.join(", ")}${remove.length > 0 ? ` REMOVE ${remove.join(", ")}` : ""}`,
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: values,
      }),
    ),
  );
}

/**
 * Moves a QUEUED run's reaper deadline on to `deadline`, while it is still QUEUED under the fence
 * its message carries: the worker loop holds its message and will start it, so the reaper must not
 * take it for lost. Its TTL moves to a retention from now too: it may be held longer than the
 * retention (its tenant at its concurrent-runs quota), and TTL must not delete a run that has not
 * ended. False when the run started, ended or moved on meanwhile (a parked run, out of the index,
 * is not touched).
 */
export async function pushQueuedDeadline(
  engine: Engine,
  ref: RunRef,
  fence: number,
  deadline: Date,
): Promise<boolean> {
  return conditionalWrite(() =>
    engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(ref),
        ConditionExpression: "#status = :queued AND fence = :fence AND inflightSk < :deadline",
        UpdateExpression: "SET inflightSk = :deadline, expiresAt = :expiresAt",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":queued": "QUEUED",
          ":fence": fence,
          ":deadline": deadline.toISOString(),
          ":expiresAt": runExpiresAt(engine.clock(), engine.settings),
        },
      }),
    ),
  );
}
