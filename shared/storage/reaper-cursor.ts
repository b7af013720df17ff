import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { batchGetItems } from "./batch-get.js";
import { isConditionalCheckFailed } from "./dynamo-errors.js";
import type { InflightEntry } from "./inflight.js";
import { reaperCursorKey } from "./items.js";

/**
 * How far the reaper has read a shard's `inflight` index: every entry up to
 * and including the cursor's was dealt with (its run had ended, or its
 * deadline was moved on, which files it again further along). One item per
 * shard beside the shard's lease in the jobs table.
 */

/** Each shard's cursor (one BatchGetItem); a shard the reaper has not read yet has none (read it from the start). */
export async function readReaperCursors(
  engine: Engine,
  shards: readonly number[],
): Promise<Map<number, InflightEntry>> {
  const items = await batchGetItems(engine, engine.tables.jobs, shards.map(reaperCursorKey), {
    consistentRead: true,
  });
  const cursors = new Map<number, InflightEntry>();
  for (const item of items) {
    const shard = shards.find((s) => reaperCursorKey(s).pk === item.pk);
    if (shard === undefined || typeof item.deadline !== "string") continue;
    cursors.set(shard, { deadline: item.deadline, pk: String(item.runPk), sk: String(item.runSk) });
  }
  return cursors;
}

/** Only forward: two reapers at once leave the cursor at the further of theirs. */
const NOT_BEHIND = "attribute_not_exists(deadline) OR deadline <= :deadline";

/** Moves the shard's cursor to `entry`; a cursor already further along is left as it is. */
export async function advanceReaperCursor(
  engine: Engine,
  shard: number,
  entry: InflightEntry,
): Promise<void> {
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: reaperCursorKey(shard),
        ConditionExpression: NOT_BEHIND,
        UpdateExpression: "SET deadline = :deadline, runPk = :runPk, runSk = :runSk",
        ExpressionAttributeValues: {
          ":deadline": entry.deadline,
          ":runPk": entry.pk,
          ":runSk": entry.sk,
        },
      }),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
  }
}
