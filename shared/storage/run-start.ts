import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { failedConditionItem, isConditionalCheckFailed } from "./dynamo-errors.js";
import { decodeRun } from "./items.js";
import { type RunRef, runKeyOf } from "./run-reads.js";

type StartResult =
  | { readonly kind: "started"; readonly run: Run }
  /** Already finished: a duplicate or late delivery. */
  | { readonly kind: "finished"; readonly run: Run }
  /** Another worker holds a live lease on it. */
  | { readonly kind: "busy"; readonly run: Run }
  | { readonly kind: "missing" };

/** The run exists and is QUEUED, or RUNNING under a lease that has lapsed (its worker died). */
const STARTABLE =
  "attribute_exists(pk) AND (#status = :queued OR (#status = :running AND leaseUntil < :now))";

/** RUNNING under this worker, with a fence one higher than any start before. */
const START =
  "SET #status = :running, fence = fence + :one, leaseUntil = :leaseUntil, workerId = :workerId, startedAt = :now REMOVE reason";

/**
 * Takes the run: QUEUED, or RUNNING whose lease has lapsed (its worker died),
 * becomes RUNNING under a fence one higher than before. Every later write by
 * this worker is conditioned on that fence (`FENCE_HELD`).
 */
export async function startRun(
  engine: Engine,
  ref: RunRef,
  workerId: string,
  now: Date,
): Promise<StartResult> {
  const leaseUntil = new Date(now.getTime() + engine.settings.leaseMs);
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(ref),
        ConditionExpression: STARTABLE,
        UpdateExpression: START,
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":queued": "QUEUED",
          ":running": "RUNNING",
          ":now": now.toISOString(),
          ":one": 1,
          ":leaseUntil": leaseUntil.toISOString(),
          ":workerId": workerId,
        },
        ReturnValues: "ALL_NEW",
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
    return { kind: "started", run: decodeRun(result.Attributes ?? {}) };
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const old = failedConditionItem(error);
    if (old === null) return { kind: "missing" };
    const run = decodeRun(old);
    return run.status === "RUNNING" ? { kind: "busy", run } : { kind: "finished", run };
  }
}
