import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { conditionalWrite, retryOnContention } from "./dynamo-errors.js";

/** Puts of a claim's SKIPPED records in flight at once (up to 1,000 a claim: `MAX_MISFIRE_CATCH_UP`). */
const SKIPPED_PUT_CONCURRENCY = 50;

/**
 * Puts a claim's SKIPPED records, each with a PutItem where no item is (`attribute_not_exists`):
 * one there already is the occurrence's outcome on record (a run that ran, or is queued to be
 * decided by its worker, or a record an earlier claim put), kept as it is. Contention is sent
 * again (`retryOnContention`); a put that still fails is thrown once those in flight settle, and
 * no more are sent. Returns how many it wrote.
 */
export async function putSkippedRecords(
  engine: Engine,
  items: readonly Record<string, unknown>[],
): Promise<number> {
  let written = 0;
  let failed = false;
  await forEachConcurrently(items, SKIPPED_PUT_CONCURRENCY, async (item) => {
    if (failed) return;
    try {
      const put = await conditionalWrite(() =>
        retryOnContention(engine, "claim skipped record", () =>
          engine.doc.send(
            new PutCommand({
              TableName: engine.tables.runs,
              Item: item,
              ConditionExpression: "attribute_not_exists(pk)",
            }),
          ),
        ),
      );
      if (put) written++;
    } catch (error) {
      failed = true;
      throw error;
    }
  });
  return written;
}
