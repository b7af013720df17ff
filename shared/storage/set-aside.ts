import { QueryCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { DueEntry, DueKey } from "../model.js";
import { decodeDueEntry, encodeDueEntry, setAsidePk } from "./items.js";
import { hasExpired, runExpiresAt } from "./retention.js";
import { ConditionsFailedError, writeTransaction } from "./transaction.js";

/** Enough of the error to tell what went wrong; a stack or a huge message must not bloat the item. */
const MAX_ERROR_CHARS = 2_000;

/** A due entry that could not be claimed, as kept under `ASIDE#<shard>`. */
export interface SetAsideEntry {
  readonly entry: DueEntry;
  readonly error: string;
  readonly setAsideAt: string;
}

export type SetAsideResult =
  | { readonly outcome: "set-aside" }
  /** Claimed, or deleted by a pause, cancel or edit, meanwhile: nothing to keep. */
  | { readonly outcome: "gone" }
  /** Rewritten meanwhile (an edit kept its key): it is left where it is, as it is now. */
  | { readonly outcome: "changed" };

/**
 * Where the entry at `dueKey` is kept once set aside: its shard's list (the shard its bucket,
 * `DUE#<minute>#<shard>`, names), under the entry's own key. A writer that deletes or replaces the
 * job's pending entry deletes this too, with no read: the job no longer waits on it.
 */
export function setAsideKeyOf(dueKey: DueKey): DueKey {
  const shard = Number(dueKey.pk.slice(dueKey.pk.lastIndexOf("#") + 1));
  return { pk: setAsidePk(shard), sk: `${dueKey.pk}|${dueKey.sk}` };
}

/**
 * Moves a due entry that a claim cannot process (a schedule whose next
 * occurrence cannot be stored, a transaction DynamoDB refuses) out of its
 * bucket into the shard's set-aside list, with the error, in one transaction,
 * so that passes stop tripping over it and an operator can see it. Its job
 * still names the entry as its next; an edit of the job writes a fresh one (or
 * the same one again), and it, a pause or a cancel (a delete's too) deletes
 * this record with the entry. A retry entry is no entry its job names, so no write of the job
 * deletes its record: it expires a run's retention after it was set aside, as the failed attempt's
 * history does (without, a deleted, cancelled or completed job's would be kept forever).
 */
export async function setEntryAside(
  engine: Engine,
  entry: DueEntry,
  error: unknown,
  now: Date,
): Promise<SetAsideResult> {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  const { pk, sk, ...fields } = encodeDueEntry(entry);
  try {
    await writeTransaction(engine, "set-aside", [
      {
        name: "dueEntry",
        write: {
          Delete: {
            TableName: engine.tables.jobs,
            Key: entry.key,
            // Only the entry as it was read: one claimed, removed or rewritten meanwhile stays as it is.
            ConditionExpression: "attribute_exists(pk) AND jobVersion = :jobVersion",
            ExpressionAttributeValues: { ":jobVersion": entry.jobVersion },
            ReturnValuesOnConditionCheckFailure: "ALL_OLD",
          },
        },
      },
      {
        name: "setAside",
        write: {
          Put: {
            TableName: engine.tables.jobs,
            Item: {
              ...fields,
              ...setAsideKeyOf(entry.key),
              duePk: pk,
              dueSk: sk,
              error: text.slice(0, MAX_ERROR_CHARS),
              setAsideAt: now.toISOString(),
              ...(entry.kind === "retry" ? { expiresAt: runExpiresAt(now, engine.settings) } : {}),
            },
          },
        },
      },
    ]);
    return { outcome: "set-aside" };
  } catch (failure) {
    if (!(failure instanceof ConditionsFailedError) || !failure.has("dueEntry")) throw failure;
    return failure.item("dueEntry") ? { outcome: "changed" } : { outcome: "gone" };
  }
}

/** The shard's set-aside entries, oldest bucket first; a retry entry's only until it expires. */
export async function listSetAsideEntries(engine: Engine, shard: number): Promise<SetAsideEntry[]> {
  const found: SetAsideEntry[] = [];
  let startKey: Record<string, unknown> | undefined;
  do {
    const page = await engine.doc.send(
      new QueryCommand({
        TableName: engine.tables.jobs,
        KeyConditionExpression: "pk = :pk",
        ExpressionAttributeValues: { ":pk": setAsidePk(shard) },
        ConsistentRead: true,
        ExclusiveStartKey: startKey,
      }),
    );
    for (const item of page.Items ?? []) {
      // TTL deletes an expired record some time later: until then it is still read here.
      if (hasExpired(item, engine.clock())) continue;
      const { duePk, dueSk, error, setAsideAt, expiresAt: _e, ...rest } = item;
      found.push({
        entry: decodeDueEntry({ ...rest, pk: duePk, sk: dueSk }),
        error: String(error),
        setAsideAt: String(setAsideAt),
      });
    }
    startKey = page.LastEvaluatedKey;
  } while (startKey);
  return found;
}
