import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { FenceLostError } from "../errors.js";
import { isConditionalCheckFailed } from "./dynamo-errors.js";
import { shardLeaseKey } from "./items.js";

/** A dispatcher's hold on a shard for one pass. */
export interface ShardLease {
  readonly shard: number;
  readonly owner: string;
  /** Higher than every earlier owner's: writes conditioned on it fail once someone takes over. */
  readonly fence: number;
  readonly leaseUntil: Date;
  /** The last minute bucket fully swept, or null for a shard never swept. */
  readonly watermark: string | null;
  /**
   * The first minute bucket the next pass must read: every earlier bucket was
   * read after anything could still be written to it. Null for a shard never
   * swept, or last swept by a dispatcher that did not record it.
   */
  readonly sweepFrom: string | null;
  /**
   * The scan that finds the backlog of a shard no pass has completed on, when
   * passes stopped before it ended (their time ran out, or a Scan request
   * failed); null when none is under way. It counts only while `sweepFrom`
   * and `watermark` are null.
   */
  readonly scan: UnfinishedScan | null;
  /** The lease was still held by another owner whose time ran out. */
  readonly tookOver: boolean;
}

/**
 * Where a shard's first scan stands between passes. It is kept apart from
 * `sweepFrom` and `watermark`, which stay unset until it ends: a dispatcher
 * that predates it (a deploy under way, a rollback) then scans from the start,
 * as it always did, rather than take the shard for swept.
 */
export interface UnfinishedScan {
  /** The table key the next page starts after; null before the first page. */
  readonly from: Record<string, unknown> | null;
  /** The scan reads the buckets before this minute: the first scanning pass's recent window. */
  readonly before: string;
  /** The earliest bucket where a scanning pass left an entry (a failed claim), or null. */
  readonly leftFrom: string | null;
}

function decodeScan(item: Record<string, unknown> | undefined): UnfinishedScan | null {
  if (typeof item?.scanBefore !== "string") return null;
  const from = item.scanFrom;
  return {
    from: typeof from === "object" && from !== null ? (from as Record<string, unknown>) : null,
    before: item.scanBefore,
    leftFrom: typeof item.scanLeftFrom === "string" ? item.scanLeftFrom : null,
  };
}

/**
 * Takes the shard's lease if it is free, expired, or already ours; returns
 * null when another owner holds a live lease. Every take bumps the fence.
 */
export async function acquireShardLease(
  engine: Engine,
  shard: number,
  owner: string,
  now: Date,
): Promise<ShardLease | null> {
  const leaseUntil = new Date(now.getTime() + engine.settings.leaseMs);
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: shardLeaseKey(shard),
        // A released lease is free at once, even to a dispatcher whose clock is behind its releaser's.
        ConditionExpression:
          "attribute_not_exists(pk) OR leaseUntil < :now OR released = :true OR #owner = :owner",
        UpdateExpression:
          "SET #owner = :owner, leaseUntil = :until, released = :false, fence = if_not_exists(fence, :zero) + :one",
        ExpressionAttributeNames: { "#owner": "owner" },
        ExpressionAttributeValues: {
          ":now": now.toISOString(),
          ":owner": owner,
          ":until": leaseUntil.toISOString(),
          ":zero": 0,
          ":one": 1,
          ":false": false,
          ":true": true,
        },
        ReturnValues: "ALL_OLD",
      }),
    );
    const old = result.Attributes;
    const previousOwner = typeof old?.owner === "string" ? old.owner : null;
    return {
      shard,
      owner,
      fence: (typeof old?.fence === "number" ? old.fence : 0) + 1,
      leaseUntil,
      watermark: typeof old?.watermark === "string" ? old.watermark : null,
      sweepFrom: typeof old?.sweepFrom === "string" ? old.sweepFrom : null,
      scan: decodeScan(old),
      // The condition only lets another owner's lease through once it has expired.
      tookOver: previousOwner !== null && previousOwner !== owner && old?.released !== true,
    };
  } catch (error) {
    if (isConditionalCheckFailed(error)) return null;
    throw error;
  }
}

/** Records the last minute swept; only the current fence holder may. */
export async function advanceWatermark(
  engine: Engine,
  lease: ShardLease,
  minute: string,
): Promise<void> {
  await fencedLeaseUpdate(engine, lease, "SET watermark = :minute", { ":minute": minute });
}

/**
 * Ends a completed pass in one write under the fence: records how far it
 * swept and where the next pass starts, and releases the lease. A first scan
 * is over once a pass completes, so its position goes.
 */
export async function endPass(
  engine: Engine,
  lease: ShardLease,
  progress: { readonly watermark: string; readonly sweepFrom: string },
  now: Date,
): Promise<void> {
  await fencedLeaseUpdate(
    engine,
    lease,
    "SET watermark = :minute, sweepFrom = :sweepFrom, leaseUntil = :now, released = :true " +
      "REMOVE scanFrom, scanBefore, scanLeftFrom",
    {
      ":minute": progress.watermark,
      ":sweepFrom": progress.sweepFrom,
      ":now": now.toISOString(),
      ":true": true,
    },
  );
}

/**
 * Ends a pass that stopped during a shard's first scan (its time ran out, or a
 * Scan request failed): records where the scan goes on, and releases the lease.
 */
export async function endScanningPass(
  engine: Engine,
  lease: ShardLease,
  scan: UnfinishedScan,
  now: Date,
): Promise<void> {
  const set = ["scanBefore = :before", "leaseUntil = :now", "released = :true"];
  const remove: string[] = [];
  const values: Record<string, unknown> = {
    ":before": scan.before,
    ":now": now.toISOString(),
    ":true": true,
  };
  if (scan.from === null) remove.push("scanFrom");
  else {
    set.push("scanFrom = :from");
    values[":from"] = scan.from;
  }
  if (scan.leftFrom === null) remove.push("scanLeftFrom");
  else {
    set.push("scanLeftFrom = :leftFrom");
    values[":leftFrom"] = scan.leftFrom;
  }
  const update = `SET ${set.join(", ")}${remove.length > 0 ? ` REMOVE ${remove.join(", ")}` : ""}`;
  await fencedLeaseUpdate(engine, lease, update, values);
}

/** Ends a pass early so the next tick's dispatcher need not wait for the lease to expire. */
export async function releaseShardLease(
  engine: Engine,
  lease: ShardLease,
  now: Date,
): Promise<void> {
  await fencedLeaseUpdate(engine, lease, "SET leaseUntil = :now, released = :true", {
    ":now": now.toISOString(),
    ":true": true,
  });
}

/**
 * A write of the pass that holds the lease: its fence, and its owner, which the fence alone would
 * not need but for a jobs table restored from a backup: the lease goes back below the fence a pass
 * under way holds, and the next take gives that fence again, to another owner.
 */
async function fencedLeaseUpdate(
  engine: Engine,
  lease: ShardLease,
  update: string,
  values: Record<string, unknown>,
): Promise<void> {
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: shardLeaseKey(lease.shard),
        ConditionExpression: "fence = :fence AND #owner = :owner",
        UpdateExpression: update,
        ExpressionAttributeNames: { "#owner": "owner" },
        ExpressionAttributeValues: { ...values, ":fence": lease.fence, ":owner": lease.owner },
      }),
    );
  } catch (error) {
    if (isConditionalCheckFailed(error)) {
      throw new FenceLostError(`shard ${lease.shard}`, lease.fence, { cause: error });
    }
    throw error;
  }
}
