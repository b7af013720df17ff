import type { Engine } from "../engine.js";
import { ConditionsFailedError, writeTransaction } from "./transaction.js";

/**
 * Puts a triggered run's QUEUED item, conditioned on its key being free. False
 * when the job already has a run for that occurrence (another trigger in the
 * same millisecond, or a claimed occurrence of the schedule at that instant).
 */
export async function writeTriggeredRun(
  engine: Engine,
  item: Record<string, unknown>,
): Promise<boolean> {
  try {
    await writeTransaction(engine, "trigger", [
      {
        name: "run",
        write: {
          Put: {
            TableName: engine.tables.runs,
            Item: item,
            ConditionExpression: "attribute_not_exists(pk)",
          },
        },
      },
    ]);
    return true;
  } catch (error) {
    if (error instanceof ConditionsFailedError && error.has("run")) return false;
    throw error;
  }
}
