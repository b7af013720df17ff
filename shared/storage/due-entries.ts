import { DeleteCommand, QueryCommand, ScanCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { bucketKey, bucketKeyForMinute, dueSortKey, shardOf } from "../keys.js";
import type { DueEntry } from "../model.js";
import {
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
} from "./dynamo-errors.js";
import { decodeDueEntry, encodeDueEntry } from "./items.js";
import type { TransactItem } from "./transaction.js";

/**
 * Due entries in their minute buckets (`DUE#<minute>#<shard>`): where an entry
 * is filed, and the reads and deletes of entries outside a claim.
 */

/**
 * The due bucket an entry belongs in: its own minute, or the current minute
 * when it is already overdue, because dispatchers read a bucket before their
 * line (two minutes before the last completed pass began) only once more, 15
 * minutes on (`lookbackBuckets` in shared/dispatch/lookback.ts).
 */
export function dueEntryKey(
  jobId: string,
  dueAt: Date,
  attempt: number,
  now: Date,
  shardCount: number,
) {
  const bucketTime = dueAt.getTime() < now.getTime() ? now : dueAt;
  return {
    pk: bucketKey(bucketTime, shardOf(jobId, shardCount)),
    sk: dueSortKey(dueAt, jobId, attempt),
  };
}

/** Every due entry of the shard's buckets for the given minutes, a page at a time, strongly consistent. */
export async function* dueBucketPages(
  engine: Engine,
  shard: number,
  minutes: readonly string[],
): AsyncGenerator<DueEntry[]> {
  for (const minute of minutes) {
    const pk = bucketKeyForMinute(minute, shard);
    let startKey: Record<string, unknown> | undefined;
    do {
      const page = await engine.doc.send(
        new QueryCommand({
          TableName: engine.tables.jobs,
          KeyConditionExpression: "pk = :pk",
          ExpressionAttributeValues: { ":pk": pk },
          ConsistentRead: true,
          ExclusiveStartKey: startKey,
        }),
      );
      yield (page.Items ?? []).map(decodeDueEntry);
      startKey = page.LastEvaluatedKey;
    } while (startKey);
  }
}

export interface DueEntryScanPage {
  readonly entries: DueEntry[];
  /** Where the next page starts; undefined after the last page. */
  readonly nextKey: Record<string, unknown> | undefined;
}

/**
 * One page of a strongly consistent scan of the jobs table for the shard's
 * due entries in buckets before `beforeMinute`, however old: the only way to
 * find a backlog with no known start.
 */
export async function scanDueEntriesBefore(
  engine: Engine,
  shard: number,
  beforeMinute: string,
  startKey: Record<string, unknown> | undefined,
): Promise<DueEntryScanPage> {
  const ownShard = `#${shard}`;
  const page = await engine.doc.send(
    new ScanCommand({
      TableName: engine.tables.jobs,
      FilterExpression: "begins_with(pk, :due) AND pk < :before",
      ExpressionAttributeValues: { ":due": "DUE#", ":before": `DUE#${beforeMinute}` },
      ConsistentRead: true,
      ExclusiveStartKey: startKey,
    }),
  );
  return {
    entries: (page.Items ?? [])
      .filter((item) => String(item.pk).endsWith(ownShard))
      .map(decodeDueEntry),
    nextKey: page.LastEvaluatedKey,
  };
}

/**
 * Deletes an entry only as it was read: it exists and still carries the job version it was read
 * with. An edit that keeps the occurrence rewrites the entry under the same key with a new
 * version, and that entry is the job's, never the deleter's. Answers "deleted", "gone" (deleted
 * by someone else already), or the entry as it is now when it was rewritten meanwhile.
 */
export async function deleteDueEntryAsRead(
  engine: Engine,
  entry: DueEntry,
  operation: string,
): Promise<"deleted" | "gone" | DueEntry> {
  try {
    await retryOnContention(engine, operation, () =>
      engine.doc.send(
        new DeleteCommand({
          TableName: engine.tables.jobs,
          Key: entry.key,
          ConditionExpression: "attribute_exists(pk) AND jobVersion = :jobVersion",
          ExpressionAttributeValues: { ":jobVersion": entry.jobVersion },
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
        }),
      ),
    );
    return "deleted";
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const now = failedConditionItem(error);
    return now === null ? "gone" : decodeDueEntry(now);
  }
}

/**
 * Deletes an entry its job no longer points at, only as it was read. Returns null once it is
 * gone, or the entry as it is now when it was rewritten meanwhile (an edit kept its key, and the
 * job may point at it again).
 */
export async function removeOrphanDueEntry(
  engine: Engine,
  entry: DueEntry,
): Promise<DueEntry | null> {
  const now = await deleteDueEntryAsRead(engine, entry, "remove-orphan");
  return typeof now === "object" ? now : null;
}

/**
 * A job's new due entry at a key the job does not point at yet: an edit's or a resume's (its
 * pending occurrence filed again), or a recurring claim's next entry. Put over nothing, or over an
 * entry of an older version of the job, which no claim still needs: a one-off's entry whose plain
 * claim committed and whose claimer died before deleting it (claim-plain.ts), met before the next
 * pass by a write that files an occurrence of the job at the same time (an edit moving `runAt` away
 * and back, a resume after such edits while paused, an edit to a schedule whose claim files its
 * next entry there). Refusing that write for it would answer a valid request with an error, or set
 * the job's entry aside; a pass that read the leftover finds it rewritten and claims it as it is.
 * An entry of the same version is another writer's: refused.
 */
export const putOverOlderDueEntry = (engine: Engine, entry: DueEntry): TransactItem => ({
  Put: {
    TableName: engine.tables.jobs,
    Item: encodeDueEntry(entry),
    ConditionExpression: "attribute_not_exists(pk) OR jobVersion < :jobVersion",
    ExpressionAttributeValues: { ":jobVersion": entry.jobVersion },
  },
});
