import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { failedConditionItem, isConditionalCheckFailed } from "./dynamo-errors.js";
import { runExpiresAt } from "./retention.js";
import { fencedRunUpdate, fencedWrite, fenceFailure, type HeldRun } from "./run-fence.js";
import { runKeyOf } from "./run-reads.js";

/** The run does not hold this token's hash yet. */
const NOT_THIS_TOKEN = "(attribute_not_exists(runTokenHash) OR runTokenHash <> :tokenHash)";

/**
 * Before an async delivery is sent: the run keeps the hash of the run token the delivery carries
 * (and the previous delivery's, so that a token of the delivery before answers as stale), with a
 * lease from now, under this start's fence. The attempt's first delivery records when it times
 * out and the timeout that counts (`timesOutAt`, `handedOverTimeoutSeconds`; a later start's
 * write keeps them), and its history is kept for the retention after that instant: its target may
 * run it with no hand-over recorded, should the worker die after the 202, and a later start of it
 * must neither count the timeout from itself nor let TTL delete it. Each delivery records the job
 * version whose definition it sends (`executedVersion`, as its hand-over would) for the same
 * reason: that run's endings (its target's completion, a timeout) name the version it ran, not
 * the job's as edited since. A start still unwritten is
 * written with it: the target may call back under the new fence before it answers. Throws FenceLostError when the run
 * is no longer held, RunCancelledError once a cancel of it was asked.
 *
 * A write that fails its condition is this delivery's own, applied before (its answer lost), only
 * when the run holds this token's hash: the token is this delivery's alone. Not the worker id and
 * the start's instant, as other writes tell (`ownStartWritten`): two messages of one run in one
 * batch (a Lambda invocation runs its records at once) take it under one worker id at one
 * instant, and the one whose write
 * came second must not deliver the run as well, with a second token live under the same fence.
 */
export async function recordRunToken(
  engine: Engine,
  run: HeldRun,
  tokenHash: string,
  delivery: {
    /** When the attempt times out: its first start plus `timeoutSeconds`, or as recorded before. */
    readonly timesOutAt: Date;
    readonly timeoutSeconds: number;
    /** The job version whose definition the delivery sends. */
    readonly executedVersion: number;
  },
  now: Date,
): Promise<void> {
  const leaseUntil = new Date(now.getTime() + engine.settings.leaseMs);
  const held = fencedWrite(run);
  // The status and reason are a start's, for a delivery that writes its run's start. The right
  // side reads the item as it was: the previous hash is the one this write replaces (its own on
  // the run's first delivery).
  const set = [
    "#status = :running, leaseUntil = :leaseUntil, previousRunTokenHash = if_not_exists(runTokenHash, :tokenHash), runTokenHash = :tokenHash, timesOutAt = if_not_exists(timesOutAt, :timesOutAt), handedOverTimeoutSeconds = if_not_exists(handedOverTimeoutSeconds, :timeoutSeconds), executedVersion = :executedVersion, expiresAt = :expiresAt",
    ...held.startSets,
  ].join(", ");
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(run),
        // Not applied already: a write sent again (the SDK does when an answer is lost) would
        // otherwise move this token's own hash to previousRunTokenHash, and the token of the
        // delivery before, which its target still holds, would answer 401 instead of 409.
        ConditionExpression: `(${held.condition}) AND ${NOT_THIS_TOKEN}`,
        UpdateExpression: `SET ${set} REMOVE reason`,
        ExpressionAttributeNames: held.names,
        ExpressionAttributeValues: {
          ":running": "RUNNING",
          ":leaseUntil": leaseUntil.toISOString(),
          ":tokenHash": tokenHash,
          ":timesOutAt": delivery.timesOutAt.toISOString(),
          ":timeoutSeconds": delivery.timeoutSeconds,
          ":executedVersion": delivery.executedVersion,
          ":expiresAt": runExpiresAt(delivery.timesOutAt, engine.settings),
          ...held.values,
        },
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const old = failedConditionItem(error);
    const own =
      old !== null &&
      old.runTokenHash === tokenHash &&
      old.fence === run.fence &&
      old.status === "RUNNING";
    if (!own) throw fenceFailure(run, old, error);
    held.written();
    // Applied, and a cancel asked since: the run is this worker's to end CANCELLED.
    if (typeof old.cancelRequestedAt === "string") throw fenceFailure(run, old, error);
    return;
  }
  held.written();
}

/**
 * An async target answered 202 and took the run over: the run stays RUNNING under this start's
 * fence with a fresh lease (its target's heartbeats extend it), the instant it times out, and the
 * job version it runs. Its history is kept for the retention after that instant: counted from
 * when it was queued, as other runs' is, DynamoDB's TTL could delete a run its target is still
 * running (up to 24 h, against a retention of a day or more). Throws FenceLostError when the run is no longer held (the target already
 * completed it, or another start took it over).
 */
export async function recordHandOver(
  engine: Engine,
  run: Run,
  handOver: {
    readonly leaseUntil: Date;
    readonly timesOutAt: Date;
    /** The timeout `timesOutAt` counts, in seconds (the job's at the attempt's first hand-over). */
    readonly timeoutSeconds: number;
    readonly executedVersion: number;
  },
  now: Date,
): Promise<void> {
  await fencedRunUpdate(engine, run, {
    // The status and reason are a start's, for a hand-over that writes its run's start.
    set: "#status = :running, handedOverAt = :now, leaseUntil = :leaseUntil, timesOutAt = :timesOutAt, handedOverTimeoutSeconds = :timeoutSeconds, executedVersion = :executedVersion, expiresAt = :expiresAt",
    remove: "reason",
    values: {
      ":running": "RUNNING",
      ":now": now.toISOString(),
      ":leaseUntil": handOver.leaseUntil.toISOString(),
      ":timesOutAt": handOver.timesOutAt.toISOString(),
      ":timeoutSeconds": handOver.timeoutSeconds,
      ":executedVersion": handOver.executedVersion,
      ":expiresAt": runExpiresAt(handOver.timesOutAt, engine.settings),
    },
  });
}
