import { DeleteCommand, ScanCommand } from "@aws-sdk/lib-dynamodb";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { conditionalWrite } from "./dynamo-errors.js";

/** Its TTL has passed: the item's `expiresAt` (epoch seconds) is at or before now. */
const EXPIRED = "expiresAt <= :now";

/**
 * Deletes the items of the jobs and runs tables whose TTL (`expiresAt`) has passed, as DynamoDB's
 * own TTL does on AWS: DynamoDB Local never expires anything, so the sandbox runs this instead.
 * A full Scan of both tables, so for the sandbox's small tables only. Each delete is conditioned
 * on the item still being expired (a write since the scan may have moved its TTL on).
 */
export async function sweepExpired(
  engine: Engine,
  now: Date,
): Promise<{ readonly jobs: number; readonly runs: number }> {
  const nowSeconds = Math.floor(now.getTime() / 1000);
  const jobs = await sweepTable(engine, engine.tables.jobs, nowSeconds);
  const runs = await sweepTable(engine, engine.tables.runs, nowSeconds);
  return { jobs, runs };
}

async function sweepTable(engine: Engine, table: string, nowSeconds: number): Promise<number> {
  let deleted = 0;
  let startKey: Record<string, unknown> | undefined;
  do {
    const page = await engine.doc.send(
      new ScanCommand({
        TableName: table,
        FilterExpression: EXPIRED,
        ProjectionExpression: "pk, sk",
        ExpressionAttributeValues: { ":now": nowSeconds },
        ...(startKey ? { ExclusiveStartKey: startKey } : {}),
      }),
    );
    await forEachConcurrently(page.Items ?? [], 8, async (item) => {
      const applied = await conditionalWrite(() =>
        engine.doc.send(
          new DeleteCommand({
            TableName: table,
            Key: { pk: item.pk, sk: item.sk },
            ConditionExpression: EXPIRED,
            ExpressionAttributeValues: { ":now": nowSeconds },
          }),
        ),
      );
      if (applied) deleted++;
    });
    startKey = page.LastEvaluatedKey;
  } while (startKey);
  return deleted;
}
