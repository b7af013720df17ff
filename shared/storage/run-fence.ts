import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { FenceLostError } from "../errors.js";
import type { Run } from "../model.js";
import { isConditionalCheckFailed } from "./dynamo-errors.js";
import { runKeyOf } from "./run-reads.js";

/**
 * The condition of every write a worker makes to a run it started: the run is
 * still RUNNING under the fence this worker's start took. Once another worker
 * has started it again (the lease lapsed), the fence is higher and the write fails.
 */
export const FENCE_HELD = "fence = :fence AND #status = :running";

/** The names and values `FENCE_HELD` refers to, for `run`. */
export function fenceHeld(run: Pick<Run, "fence">) {
  return {
    names: { "#status": "status" },
    values: { ":fence": run.fence, ":running": "RUNNING" },
  } as const;
}

/** The error for a write whose `FENCE_HELD` condition failed. */
export function fenceLost(run: Pick<Run, "runId" | "fence">, cause: unknown): FenceLostError {
  return new FenceLostError(`run ${run.runId}`, run.fence, { cause });
}

/**
 * One update of a run conditioned on `FENCE_HELD`; throws FenceLostError once
 * another worker has taken the run over.
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
      }),
    );
  } catch (error) {
    if (isConditionalCheckFailed(error)) throw fenceLost(run, error);
    throw error;
  }
}
