import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { CancelSource, Run } from "../model.js";
import { isConditionalCheckFailed } from "./dynamo-errors.js";
import { decodeRun } from "./items.js";
import { runKeyOf } from "./run-reads.js";

/**
 * Still RUNNING under the start the caller saw, with no cancel asked yet: a
 * worker that started it again since, or an ending, is decided afresh.
 */
const RUNNING_AS_SEEN =
  "#status = :running AND fence = :fence AND attribute_not_exists(cancelRequestedAt)";

/**
 * Asks the worker holding a RUNNING run to cancel it: records `cancelRequestedAt`
 * and `cancelledBy` on the run. The worker's next heartbeat (or its end write)
 * fails its fence condition on that attribute and ends the run CANCELLED.
 * Returns the run as it now stands, or null when it was no longer as seen.
 */
export async function requestRunCancel(
  engine: Engine,
  seen: Run,
  by: CancelSource,
  now: Date,
): Promise<Run | null> {
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(seen),
        ConditionExpression: RUNNING_AS_SEEN,
        UpdateExpression: "SET cancelRequestedAt = :now, cancelledBy = :by",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":running": "RUNNING",
          ":fence": seen.fence,
          ":now": now.toISOString(),
          ":by": by,
        },
        ReturnValues: "ALL_NEW",
      }),
    );
    return decodeRun(result.Attributes ?? {});
  } catch (error) {
    if (isConditionalCheckFailed(error)) return null;
    throw error;
  }
}
