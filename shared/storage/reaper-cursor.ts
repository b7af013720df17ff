import { UpdateCommand, type UpdateCommandInput } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { batchGetItems } from "./batch-get.js";
import { conditionalWrite } from "./dynamo-errors.js";
import type { InflightEntry } from "./inflight.js";
import { reaperCursorKey, reaperStartKey } from "./items.js";

/**
 * How far the reaper has read a shard's `inflight` index: every entry up to
 * and including the cursor's was dealt with (its run had ended, or its
 * deadline was moved on, which files it again further along). One item per
 * shard beside the shard's lease in the jobs table. A cursor moved back (a
 * pass found it ahead of its clock) holds only a deadline: read from there on.
 */

/** Where a shard's next pass reads from: after the last entry dealt with, or at a deadline. */
export type ReaperCursor = { readonly after: InflightEntry } | { readonly from: string };

/** The deadline a cursor stands at. */
export const cursorDeadline = (cursor: ReaperCursor) =>
  "after" in cursor ? cursor.after.deadline : cursor.from;

/** Each shard's cursor (one BatchGetItem); a shard the reaper has not read yet has none (read it from the start). */
export async function readReaperCursors(
  engine: Engine,
  shards: readonly number[],
): Promise<Map<number, ReaperCursor>> {
  const items = await batchGetItems(engine, engine.tables.jobs, shards.map(reaperCursorKey), {
    consistentRead: true,
  });
  return reaperCursorsOf(items, shards);
}

/** The cursors of these shards among items read from the jobs table (others are left out). */
export function reaperCursorsOf(
  items: readonly Record<string, unknown>[],
  shards: readonly number[],
): Map<number, ReaperCursor> {
  const cursors = new Map<number, ReaperCursor>();
  for (const item of items) {
    const shard = shards.find(
      (s) => reaperCursorKey(s).pk === item.pk && reaperCursorKey(s).sk === item.sk,
    );
    if (shard === undefined || typeof item.deadline !== "string") continue;
    cursors.set(
      shard,
      typeof item.runPk === "string" && typeof item.runSk === "string"
        ? { after: { deadline: item.deadline, pk: item.runPk, sk: item.runSk } }
        : { from: item.deadline },
    );
  }
  return cursors;
}

/** Only forward: two reapers at once leave the cursor at the further of theirs. */
const NOT_BEHIND = "attribute_not_exists(deadline) OR deadline <= :deadline";
/** A move back is for the cursor the pass read: one moved since is left to the next pass. */
const AS_READ = "deadline = :seen";

/** Moves the shard's cursor to `entry`; a cursor already further along is left as it is. */
export async function advanceReaperCursor(
  engine: Engine,
  shard: number,
  entry: InflightEntry,
): Promise<void> {
  await updateCursorIf(engine, shard, {
    ConditionExpression: NOT_BEHIND,
    UpdateExpression: "SET deadline = :deadline, runPk = :runPk, runSk = :runSk",
    ExpressionAttributeValues: {
      ":deadline": entry.deadline,
      ":runPk": entry.pk,
      ":runSk": entry.sk,
    },
  });
}

/**
 * Moves a cursor found ahead of a pass's clock back to `from` (entries from that deadline on are
 * read again), so that passes read on from there as the entries behind it fall due, rather than
 * from after a position a clock ahead of theirs reached.
 */
export async function rewindReaperCursor(
  engine: Engine,
  shard: number,
  seen: ReaperCursor,
  from: string,
): Promise<void> {
  await updateCursorIf(engine, shard, {
    ConditionExpression: AS_READ,
    UpdateExpression: "SET deadline = :from REMOVE runPk, runSk",
    ExpressionAttributeValues: { ":seen": cursorDeadline(seen), ":from": from },
  });
}

/** A failed condition leaves the cursor as another pass left it: nothing to do. */
async function updateCursorIf(
  engine: Engine,
  shard: number,
  write: Pick<
    UpdateCommandInput,
    "ConditionExpression" | "UpdateExpression" | "ExpressionAttributeValues"
  >,
): Promise<void> {
  await conditionalWrite(() =>
    engine.doc.send(
      new UpdateCommand({ TableName: engine.tables.jobs, Key: reaperCursorKey(shard), ...write }),
    ),
  );
}

/**
 * What the last reaper pass that wrote `SHARDS`/`REAPER_START` left for the next one (read among
 * the tick's cursors, `readShardHighWater`). Written by a pass that ran out of its tick's time, or
 * that did not read every shard through; a pass that read them all, after one that did too, writes
 * nothing.
 */
export interface ReaperStart {
  /** The shard the next pass starts at: where the last one out of time stopped; 0 when none was written. */
  readonly shard: number;
  /**
   * The shards that pass did not read through (out of time in them or before them, or their reads
   * failed), each with the time (ISO) a pass last did, or the first pass that did not when that is
   * not known. Empty when it read every shard, or when the map is not the one written with
   * `recordedAt` (`unreadAt`).
   */
  readonly unreadSince: ReadonlyMap<number, string>;
  /** When that pass ran (its clock); null when none wrote. */
  readonly recordedAt: string | null;
}

export function reaperStartOf(items: readonly Record<string, unknown>[]): ReaperStart {
  const item = items.find((i) => i.pk === reaperStartKey.pk && i.sk === reaperStartKey.sk);
  const shard = item?.startShard;
  const unreadSince = new Map<number, string>();
  const unread = item?.unreadSince;
  // Only as written with `recordedAt`: code from before `unreadSince` (a rollback) moves
  // `recordedAt` on and leaves the map, whose times would then say shards it read went unread.
  const current = typeof item?.unreadAt === "string" && item.unreadAt === item.recordedAt;
  if (current && typeof unread === "object" && unread !== null)
    for (const [key, since] of Object.entries(unread)) {
      const unreadShard = Number(key);
      if (Number.isSafeInteger(unreadShard) && unreadShard >= 0 && typeof since === "string")
        unreadSince.set(unreadShard, since);
    }
  return {
    shard: typeof shard === "number" && Number.isSafeInteger(shard) && shard >= 0 ? shard : 0,
    unreadSince,
    recordedAt: typeof item?.recordedAt === "string" ? item.recordedAt : null,
  };
}

/**
 * Records what a pass leaves for the next (`ReaperStart`). Unconditional: of two ticks at once (one
 * ran over into the next minute), the later write wins, and either one's shard lets the passes
 * after it go round every shard; a shard the other one read may be counted unread until a pass
 * reads it again.
 */
export async function recordReaperStart(
  engine: Engine,
  left: Omit<ReaperStart, "recordedAt">,
  now: Date,
): Promise<void> {
  await engine.doc.send(
    new UpdateCommand({
      TableName: engine.tables.jobs,
      Key: reaperStartKey,
      UpdateExpression:
        "SET startShard = :shard, unreadSince = :unread, unreadAt = :now, recordedAt = :now",
      ExpressionAttributeValues: {
        ":shard": left.shard,
        ":unread": Object.fromEntries(
          [...left.unreadSince].map(([shard, since]) => [String(shard), since]),
        ),
        ":now": now.toISOString(),
      },
    }),
  );
}
