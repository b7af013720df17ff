import { BatchGetCommand } from "@aws-sdk/lib-dynamodb";
import { sleep } from "../clock.js";
import type { Engine } from "../engine.js";

type Item = Record<string, unknown>;

/** DynamoDB's limit of keys per BatchGetItem. */
const KEYS_PER_REQUEST = 100;
/** Rounds of one request while DynamoDB leaves some of it unprocessed (throttling), the first included. */
export const MAX_BATCH_ROUNDS = 6;
/** The wait before the second round; it doubles each round after. */
export const BATCH_BACKOFF_BASE_MS = 50;

/**
 * The items of one table at these keys that exist (one BatchGetItem per 100
 * keys, keys DynamoDB leaves unprocessed asked again with backoff), in no
 * particular order. Once a key is still unprocessed after the last round it
 * throws `exhausted()`, or a plain error naming the table.
 */
export async function batchGetItems(
  engine: Engine,
  table: string,
  keys: readonly Item[],
  {
    consistentRead,
    exhausted = () => new Error(`${table} kept throttling BatchGetItem`),
  }: { readonly consistentRead: boolean; readonly exhausted?: () => Error },
): Promise<Item[]> {
  const found: Item[] = [];
  for (let i = 0; i < keys.length; i += KEYS_PER_REQUEST) {
    let pending = keys.slice(i, i + KEYS_PER_REQUEST);
    for (let round = 1; pending.length > 0; round++) {
      if (round > MAX_BATCH_ROUNDS) throw exhausted();
      if (round > 1) await sleep(BATCH_BACKOFF_BASE_MS * 2 ** (round - 2));
      const result = await engine.doc.send(
        new BatchGetCommand({
          RequestItems: { [table]: { Keys: [...pending], ConsistentRead: consistentRead } },
        }),
      );
      found.push(...(result.Responses?.[table] ?? []));
      pending = result.UnprocessedKeys?.[table]?.Keys ?? [];
    }
  }
  return found;
}
