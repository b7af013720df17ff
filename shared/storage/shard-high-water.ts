import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { batchGetItems } from "./batch-get.js";
import { conditionalWrite } from "./dynamo-errors.js";
import { reaperCursorKey, reaperStartKey, shardHighWaterKey } from "./items.js";
import {
  type ReaperCursor,
  type ReaperStart,
  reaperCursorsOf,
  reaperStartOf,
} from "./reaper-cursor.js";

/**
 * The shard high-water mark (`SHARDS`/`HIGH_WATER` in the jobs table): the most shards the
 * stage's tick has passed over. Settings come from CDK context at each deploy, so a deploy that
 * leaves out a raised `shardCount` lowers it; due entries and in-flight runs filed in the shards
 * above stay there, and the tick keeps passing over every shard up to this mark. It only rises.
 */

/**
 * The mark, the reaper cursors of these shards and where the reaper starts, read in one
 * consistent BatchGetItem.
 */
export async function readShardHighWater(
  engine: Engine,
  shards: readonly number[],
): Promise<{
  readonly highWater: number | null;
  readonly cursors: Map<number, ReaperCursor>;
  readonly reaperStart: ReaperStart;
}> {
  const items = await batchGetItems(
    engine,
    engine.tables.jobs,
    [shardHighWaterKey, reaperStartKey, ...shards.map(reaperCursorKey)],
    { consistentRead: true },
  );
  const mark = items.find(
    (item) => item.pk === shardHighWaterKey.pk && item.sk === shardHighWaterKey.sk,
  );
  const count = mark?.shardCount;
  return {
    highWater: typeof count === "number" && Number.isSafeInteger(count) && count > 0 ? count : null,
    cursors: reaperCursorsOf(items, shards),
    reaperStart: reaperStartOf(items),
  };
}

/** Only up: a tick with fewer shards than the mark, or a concurrent raise as high, leaves it. */
const BELOW = "attribute_not_exists(shardCount) OR shardCount < :count";

/**
 * Raises the mark to `count`; true when this write raised it, false when it already stood at
 * `count` or higher.
 */
export async function raiseShardHighWater(
  engine: Engine,
  count: number,
  now: Date,
): Promise<boolean> {
  return conditionalWrite(() =>
    engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: shardHighWaterKey,
        ConditionExpression: BELOW,
        UpdateExpression: "SET shardCount = :count, raisedAt = :now",
        ExpressionAttributeValues: { ":count": count, ":now": now.toISOString() },
      }),
    ),
  );
}
