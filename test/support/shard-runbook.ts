import { ScanCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../../shared/engine.js";

/**
 * docs/deploy.md ("Deploy")'s two counts before a lowered shard count's mark is deleted, as its
 * commands take them: one Scan of the table (every page, as the AWS CLI reads them) and the shard
 * number compared afterwards (the runbook's `jq`), for any gap between the new count and the mark.
 */
async function scanAll(engine: Engine, input: ConstructorParameters<typeof ScanCommand>[0]) {
  const items: Record<string, unknown>[] = [];
  let ExclusiveStartKey: Record<string, unknown> | undefined;
  do {
    const page = await engine.doc.send(
      new ScanCommand({ ...input, ConsistentRead: true, ExclusiveStartKey }),
    );
    items.push(...(page.Items ?? []));
    ExclusiveStartKey = page.LastEvaluatedKey;
  } while (ExclusiveStartKey !== undefined);
  return items;
}

/** The first count: due entries `DUE#<minute>#<shard>` filed at or above the new count. */
export async function dueEntriesAbove(engine: Engine, count: number): Promise<number> {
  const items = await scanAll(engine, {
    TableName: engine.tables.jobs,
    ProjectionExpression: "pk",
    FilterExpression: "begins_with(pk, :due)",
    ExpressionAttributeValues: { ":due": "DUE#" },
  });
  return items.filter((item) => Number(String(item.pk).split("#")[2]) >= count).length;
}

/** The second count: queued or running runs whose `inflightPk` is `INFLIGHT#<shard>` at or above it. */
export async function liveRunsAbove(engine: Engine, count: number): Promise<number> {
  const items = await scanAll(engine, {
    TableName: engine.tables.runs,
    ProjectionExpression: "inflightPk",
    FilterExpression: "begins_with(inflightPk, :inflight) AND #s IN (:q, :r)",
    ExpressionAttributeNames: { "#s": "status" },
    ExpressionAttributeValues: { ":inflight": "INFLIGHT#", ":q": "QUEUED", ":r": "RUNNING" },
  });
  return items.filter((item) => Number(String(item.inflightPk).split("#")[1]) >= count).length;
}
