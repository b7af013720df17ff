import { DeleteCommand, PutCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { parseRunId } from "../keys.js";
import type { Run } from "../model.js";
import { batchGetItems } from "./batch-get.js";
import {
  conditionalWrite,
  failedConditionItem,
  isConditionalCheckFailed,
} from "./dynamo-errors.js";
import { runSlotExpiresAt } from "./retention.js";
import { runKeyOf } from "./run-reads.js";
import { quotaPk, type RunSlot, slotSk } from "./tenant-quotas.js";

/**
 * A tenant's concurrent-runs slots (`QUOTA#<tenantId>`, `SLOT#<n>`): one per running run, under
 * the run's lease, expiring a day after it (`runSlotExpiresAt`).
 *
 * Two deliveries of one start (a duplicate of a first start held unwritten, a start made again
 * after a restore from a backup, under the same fence) each take a slot before either knows which
 * of them runs the run: the one whose write of the run lands first. A slot names the run and fence
 * alone, so each take is recorded on it (`takers`, an id per take): a take that finds a slot of
 * the same start joins it rather than replacing it, and a delivery let off for the other leaves
 * its own take (`leaveRunSlot`), freeing the slot only when no other take is on it. The start that
 * runs the run frees its slot when it ends, whoever else took it (`releaseRunSlot`).
 */

/** One delivery's take of a slot: `taker` tells it from another delivery's take of the same start. */
export interface TakenSlot extends RunSlot {
  readonly taker: string;
}

/**
 * Recorded with a take that joins a slot an earlier version took (it records no takes), for that
 * version's take: it is never left, so such a slot stays held until its start frees it or its
 * lease lapses, as it did before takes were recorded.
 */
const UNRECORDED_TAKE = "unrecorded";

/** The slot holds the run under this start's fence. */
const SAME_START = "runId = :runId AND fence = :fence";
/**
 * The slot is free: never taken or freed, held by another start of this run (a redelivery after a
 * crash takes its own slot back), or by another run whose lease lapsed. One this start holds is
 * joined, not replaced (`joinRunSlot`).
 */
const SLOT_FREE =
  "attribute_not_exists(pk) OR (runId = :runId AND fence <> :fence) OR (runId <> :runId AND leaseUntil < :now)";

const hasTake = (item: Record<string, unknown>, taker: string): boolean =>
  item.takers instanceof Set && item.takers.has(taker);

/**
 * Takes slot `index` for a started run; false when another run holds it now. A slot another take
 * of the same start holds (it took it after this one read the slots) is joined.
 */
export async function takeRunSlot(engine: Engine, slot: TakenSlot, now: Date): Promise<boolean> {
  try {
    await engine.doc.send(
      new PutCommand({
        TableName: engine.tables.jobs,
        Item: {
          pk: quotaPk(slot.tenantId),
          sk: slotSk(slot.index),
          runId: slot.runId,
          fence: slot.fence,
          leaseUntil: slot.leaseUntil,
          expiresAt: runSlotExpiresAt(new Date(slot.leaseUntil)),
          takers: new Set([slot.taker]),
        },
        ConditionExpression: SLOT_FREE,
        ExpressionAttributeValues: {
          ":now": now.toISOString(),
          ":runId": slot.runId,
          ":fence": slot.fence,
        },
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
    return true;
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const old = failedConditionItem(error);
    if (old === null || old.runId !== slot.runId || old.fence !== slot.fence) return false;
    // This very put, sent again by the SDK after its answer was lost, or another take of the start.
    if (hasTake(old, slot.taker)) return true;
    return joinRunSlot(engine, slot, old.takers instanceof Set);
  }
}

/**
 * Adds this take to a slot that another take of the same start holds, under this take's lease; false
 * when the slot is no longer that start's, or its takes are recorded (`recorded`) no longer as read.
 */
export async function joinRunSlot(
  engine: Engine,
  slot: TakenSlot,
  recorded: boolean,
): Promise<boolean> {
  return conditionalWrite(() =>
    engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: { pk: quotaPk(slot.tenantId), sk: slotSk(slot.index) },
        ConditionExpression: `${SAME_START} AND attribute_${recorded ? "exists" : "not_exists"}(takers)`,
        UpdateExpression: "SET leaseUntil = :leaseUntil, expiresAt = :expiresAt ADD takers :takers",
        ExpressionAttributeValues: {
          ":runId": slot.runId,
          ":fence": slot.fence,
          ":leaseUntil": slot.leaseUntil,
          ":expiresAt": runSlotExpiresAt(new Date(slot.leaseUntil)),
          ":takers": new Set(recorded ? [slot.taker] : [slot.taker, UNRECORDED_TAKE]),
        },
      }),
    ),
  );
}

/** A heartbeat's: the slot's lease follows the run's. False when the slot is no longer this start's. */
export async function extendRunSlot(
  engine: Engine,
  slot: RunSlot,
  leaseUntil: Date,
): Promise<boolean> {
  return conditionalWrite(() =>
    engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: { pk: quotaPk(slot.tenantId), sk: slotSk(slot.index) },
        ConditionExpression: SAME_START,
        UpdateExpression: "SET leaseUntil = :leaseUntil, expiresAt = :expiresAt",
        ExpressionAttributeValues: {
          ":runId": slot.runId,
          ":fence": slot.fence,
          ":leaseUntil": leaseUntil.toISOString(),
          ":expiresAt": runSlotExpiresAt(leaseUntil),
        },
      }),
    ),
  );
}

/**
 * Frees the slot of the start that ran the run, when it is still that start's (a later start of
 * the run keeps its own), whatever other takes of the start are on it.
 */
export async function releaseRunSlot(engine: Engine, slot: RunSlot): Promise<void> {
  await conditionalWrite(() =>
    engine.doc.send(
      new DeleteCommand({
        TableName: engine.tables.jobs,
        Key: { pk: quotaPk(slot.tenantId), sk: slotSk(slot.index) },
        ConditionExpression: SAME_START,
        ExpressionAttributeValues: { ":runId": slot.runId, ":fence": slot.fence },
      }),
    ),
  );
}

/** Each attempt is a delete and an update; only other takes leaving at the same moment need more. */
const LEAVE_ATTEMPTS = 3;

/**
 * Takes this delivery's take off its slot, for a delivery let off for another delivery of the same
 * start, which runs the run: the slot is freed when no other take is on it, and otherwise stays
 * the other takes' (the running start's among them, if it took this one). A slot that no longer
 * records this take (another start's, gone, or replaced by an earlier version's take) is left as
 * it stands. Both writes are conditioned on what they find, so a request the SDK sent again is
 * harmless.
 */
export async function leaveRunSlot(engine: Engine, slot: TakenSlot): Promise<void> {
  const key = { pk: quotaPk(slot.tenantId), sk: slotSk(slot.index) };
  const values = { ":runId": slot.runId, ":fence": slot.fence, ":one": 1 };
  for (let attempt = 1; attempt <= LEAVE_ATTEMPTS; attempt++) {
    try {
      await engine.doc.send(
        new DeleteCommand({
          TableName: engine.tables.jobs,
          Key: key,
          ConditionExpression: `${SAME_START} AND contains(takers, :taker) AND size(takers) = :one`,
          ExpressionAttributeValues: { ...values, ":taker": slot.taker },
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
        }),
      );
      return;
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
      const old = failedConditionItem(error);
      if (old === null || old.runId !== slot.runId || old.fence !== slot.fence) return;
      if (!hasTake(old, slot.taker)) return;
    }
    // Refused when the other takes left meanwhile: this one is then the last, and the next
    // attempt's delete frees the slot.
    const left = await conditionalWrite(() =>
      engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: key,
          ConditionExpression: `${SAME_START} AND contains(takers, :taker) AND size(takers) > :one`,
          UpdateExpression: "DELETE takers :takers",
          ExpressionAttributeValues: {
            ...values,
            ":taker": slot.taker,
            ":takers": new Set([slot.taker]),
          },
        }),
      ),
    );
    if (left) return;
  }
}

/** What of a run says whether it holds its slot still: all `slotsHeldPastLease` reads of it. */
const HOLD_FIELDS = ["runId", "status", "fence", "leaseUntil", "handedOverAt"] as const;
type RunHold = Pick<Run, (typeof HOLD_FIELDS)[number]>;

/**
 * Of `slots`, whose leases lapsed, the indexes of those whose run reads RUNNING under the slot's
 * start (its fence) and a live lease of its own: its heartbeats keep the run's lease and failed to
 * extend the slot (a throttled jobs table), so the run holds the slot still. A run handed over to
 * its async target holds none. One consistent BatchGetItem of the runs, of those fields alone.
 */
export async function slotsHeldPastLease(
  engine: Engine,
  slots: readonly RunSlot[],
  now: Date,
): Promise<Set<number>> {
  const keys = slots.flatMap((slot) => {
    const ref = parseRunId(slot.runId);
    return ref === null ? [] : [runKeyOf(ref)];
  });
  if (keys.length === 0) return new Set();
  const read = await batchGetItems(engine, engine.tables.runs, keys, {
    consistentRead: true,
    attributes: HOLD_FIELDS,
  });
  const runs = new Map(read.map((item) => [String(item.runId), item as RunHold]));
  const nowIso = now.toISOString();
  return new Set(
    slots
      .filter((slot) => {
        const run = runs.get(slot.runId);
        return (
          run !== undefined &&
          run.status === "RUNNING" &&
          run.fence === slot.fence &&
          (run.leaseUntil ?? "") >= nowIso &&
          (run.handedOverAt ?? null) === null
        );
      })
      .map((slot) => slot.index),
  );
}
