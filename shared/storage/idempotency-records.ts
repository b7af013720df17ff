import { GetCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { hasExpired, idempotencyExpiresAt } from "./retention.js";

type RecordKey = { readonly pk: string; readonly sk: string };

/**
 * The put of an idempotency record (a create's or a trigger's) in a transaction: its key is free
 * when no record holds it or the one there is past its 24-hour window.
 */
export function idempotencyRecordPut(
  engine: Engine,
  key: RecordKey,
  fields: Record<string, unknown>,
  now: Date,
) {
  return {
    Put: {
      TableName: engine.tables.jobs,
      Item: { ...key, ...fields, expiresAt: idempotencyExpiresAt(now) },
      ConditionExpression: "attribute_not_exists(pk) OR expiresAt <= :now",
      ExpressionAttributeValues: { ":now": Math.floor(now.getTime() / 1000) },
    },
  };
}

/** The idempotency record at `key`, read strongly; null when none or past its window. */
export async function readIdempotencyRecordAt(
  engine: Engine,
  key: RecordKey,
): Promise<Record<string, unknown> | null> {
  const found = await engine.doc.send(
    new GetCommand({ TableName: engine.tables.jobs, Key: key, ConsistentRead: true }),
  );
  // Past its window the key is free again, whether or not TTL has deleted the record yet.
  if (!found.Item || hasExpired(found.Item, engine.clock())) return null;
  return found.Item;
}
