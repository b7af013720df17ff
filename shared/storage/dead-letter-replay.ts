import type { Engine } from "../engine.js";
import { NotReplayableError } from "../errors.js";
import type { Run } from "../model.js";
import { transactionCancellationCodes } from "./dynamo-errors.js";
import { runKey } from "./runs.js";
import { ConditionsFailedError, writeTransaction } from "./transaction.js";

/**
 * Puts the QUEUED item of `replay`, a new attempt of the dead run `dead`, and
 * takes `dead` off the dead-letter list (it names its replay), in one
 * transaction conditioned on `dead` being DEAD and not yet replayed. Any
 * cancellation is `NotReplayableError`: what it contends with on the dead
 * run's item is another replay of it.
 */
export async function writeReplay(
  engine: Engine,
  dead: Run,
  replay: { readonly runId: string; readonly item: Record<string, unknown> },
): Promise<void> {
  try {
    await writeTransaction(engine, "replay", [
      {
        name: "replay",
        write: {
          Put: {
            TableName: engine.tables.runs,
            Item: replay.item,
            ConditionExpression: "attribute_not_exists(pk)",
          },
        },
      },
      {
        name: "deadRun",
        write: {
          Update: {
            TableName: engine.tables.runs,
            Key: runKey(dead.jobId, dead.scheduledFor, dead.attempt),
            ConditionExpression:
              "#status = :dead AND (attribute_not_exists(replayedBy) OR replayedBy = :null)",
            UpdateExpression: "SET replayedBy = :newRun REMOVE deadPk, deadSk",
            ExpressionAttributeNames: { "#status": "status" },
            ExpressionAttributeValues: { ":dead": "DEAD", ":null": null, ":newRun": replay.runId },
          },
        },
      },
    ]);
  } catch (error) {
    if (error instanceof ConditionsFailedError || transactionCancellationCodes(error) !== null)
      throw new NotReplayableError(dead.runId, "it was replayed concurrently");
    throw error;
  }
}
