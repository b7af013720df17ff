import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { FenceLostError, RunCancelledError } from "../errors.js";
import type { Run } from "../model.js";
import { failedConditionItem, isConditionalCheckFailed } from "./dynamo-errors.js";
import { runKeyOf } from "./run-reads.js";

/**
 * The condition of every write a worker makes to a run it started: the run is
 * still RUNNING under the fence this worker's start took, and nobody asked to
 * cancel it. Once another worker has started it again (the lease lapsed), the
 * fence is higher and the write fails; once a cancel is requested, every write
 * but the CANCELLED ending (`FENCE_HELD_CANCELLING`) fails, so a handler that
 * ignored its signal cannot record success, a failure or a next attempt.
 */
export const FENCE_HELD =
  "fence = :fence AND #status = :running AND attribute_not_exists(cancelRequestedAt)";

/** The worker's CANCELLED ending of a run whose cancel was requested: the fence alone. */
export const FENCE_HELD_CANCELLING = "fence = :fence AND #status = :running";

/** The names and values `FENCE_HELD` (and `FENCE_HELD_CANCELLING`) refer to, for `run`. */
export function fenceHeld(run: Pick<Run, "fence">) {
  return {
    names: { "#status": "status" },
    values: { ":fence": run.fence, ":running": "RUNNING" },
  } as const;
}

/** The error for a write whose `FENCE_HELD` condition failed. */
function fenceLost(run: Pick<Run, "runId" | "fence">, cause: unknown): FenceLostError {
  return new FenceLostError(`run ${run.runId}`, run.fence, { cause });
}

/**
 * What a failed `FENCE_HELD` means, from the run as it stood (the write asked
 * for it with ReturnValuesOnConditionCheckFailure: ALL_OLD, so no read): still
 * ours but with a cancel requested → `RunCancelledError`; anything else → `FenceLostError`.
 */
export function fenceFailure(
  run: Pick<Run, "runId" | "fence">,
  old: Record<string, unknown> | null,
  cause: unknown,
): FenceLostError | RunCancelledError {
  if (
    old !== null &&
    old.fence === run.fence &&
    old.status === "RUNNING" &&
    typeof old.cancelRequestedAt === "string"
  ) {
    const by = typeof old.cancelledBy === "string" ? old.cancelledBy : "api";
    return new RunCancelledError(run.runId, by, old.cancelRequestedAt, { cause });
  }
  return fenceLost(run, cause);
}

/**
 * One update of a run conditioned on `FENCE_HELD`; throws FenceLostError once
 * another worker has taken the run over, RunCancelledError once a cancel of it
 * was requested.
 */
export async function fencedRunUpdate(
  engine: Engine,
  run: Run,
  expression: { readonly update: string; readonly values: Record<string, unknown> },
): Promise<void> {
  const held = fenceHeld(run);
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(run),
        ConditionExpression: FENCE_HELD,
        UpdateExpression: expression.update,
        ExpressionAttributeNames: held.names,
        ExpressionAttributeValues: { ...expression.values, ...held.values },
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
  } catch (error) {
    if (isConditionalCheckFailed(error)) throw fenceFailure(run, failedConditionItem(error), error);
    throw error;
  }
}
