import { BatchGetCommand } from "@aws-sdk/lib-dynamodb";
import { sleep } from "../clock.js";
import type { Engine } from "../engine.js";

type Item = Record<string, unknown>;

/** DynamoDB's limit of keys per BatchGetItem. */
const KEYS_PER_REQUEST = 100;
const MAX_ROUNDS = 6;

/**
 * The items of one table at these keys that exist (one BatchGetItem per 100
 * keys, keys DynamoDB leaves unprocessed asked again with backoff), in no
 * particular order. Throws once a key is still unprocessed after six rounds.
 */
export async function batchGetItems(
  engine: Engine,
  table: string,
  keys: readonly Item[],
  { consistentRead }: { readonly consistentRead: boolean },
): Promise<Item[]> {
  const found: Item[] = [];
  for (let i = 0; i < keys.length; i += KEYS_PER_REQUEST) {
    let pending = keys.slice(i, i + KEYS_PER_REQUEST);
    for (let round = 0; pending.length > 0; round++) {
      if (round === MAX_ROUNDS) throw new Error(`${table} kept throttling BatchGetItem`);
      if (round > 0) await sleep(50 * 2 ** round);
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
