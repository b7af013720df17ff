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

/**
 * The items the Scan `input` keeps whose `key` (`DUE#<minute>#<shard>`, `INFLIGHT#<shard>`) names,
 * as its `part`-th field, a shard at or above `count`: what the runbook's `jq` counts.
 */
async function countAbove(
  engine: Engine,
  input: ConstructorParameters<typeof ScanCommand>[0],
  key: string,
  part: number,
  count: number,
): Promise<number> {
  const items = await scanAll(engine, { ...input, ProjectionExpression: key });
  return items.filter((item) => Number(String(item[key]).split("#")[part]) >= count).length;
}

/** The first count: due entries `DUE#<minute>#<shard>` filed at or above the new count. */
export function dueEntriesAbove(engine: Engine, count: number): Promise<number> {
  const input = {
    TableName: engine.tables.jobs,
    FilterExpression: "begins_with(pk, :due)",
    ExpressionAttributeValues: { ":due": "DUE#" },
  };
  return countAbove(engine, input, "pk", 2, count);
}

/** The second count: queued or running runs whose `inflightPk` is `INFLIGHT#<shard>` at or above it. */
export function liveRunsAbove(engine: Engine, count: number): Promise<number> {
  const input = {
    TableName: engine.tables.runs,
    FilterExpression: "begins_with(inflightPk, :inflight) AND #s IN (:q, :r)",
    ExpressionAttributeNames: { "#s": "status" },
    ExpressionAttributeValues: { ":inflight": "INFLIGHT#", ":q": "QUEUED", ":r": "RUNNING" },
  };
  return countAbove(engine, input, "inflightPk", 1, count);
}
