import { BatchGetCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { MAX_BATCH_ROUNDS, sendInRounds } from "./batch-rounds.js";
import { keptThrottling } from "./dynamo-errors.js";

type Item = Record<string, unknown>;

/** DynamoDB's limit of keys per BatchGetItem. */
const KEYS_PER_REQUEST = 100;

/**
 * The items of one table at these keys that exist (one BatchGetItem per 100
 * distinct keys, keys DynamoDB leaves unprocessed asked again with backoff), in
 * no particular order. Once a key is still unprocessed after the last round it
 * throws `exhausted()`, or else the error DynamoDB gives a request throttled past the SDK's
 * retries (`keptThrottling`), so that callers take it as throttling (a read answered 503 busy).
 */
export async function batchGetItems(
  engine: Engine,
  table: string,
  keys: readonly Item[],
  options: BatchGetOptions,
): Promise<Item[]> {
  return (await batchGetByTable(engine, { [table]: keys }, options))[table] ?? [];
}

interface BatchGetOptions {
  readonly consistentRead: boolean;
  readonly exhausted?: () => Error;
  /** Only these attributes of each item (ProjectionExpression); the whole item by default. */
  readonly attributes?: readonly string[];
}

/**
 * `batchGetItems` over several tables at once: the items found, by table. Keys of different
 * tables share each request (100 keys a request in all).
 */
export async function batchGetByTable(
  engine: Engine,
  keysByTable: Readonly<Record<string, readonly Item[]>>,
  {
    consistentRead,
    exhausted = () => keptThrottling("BatchGetItem", Object.keys(keysByTable), MAX_BATCH_ROUNDS),
    attributes,
  }: BatchGetOptions,
): Promise<Record<string, Item[]>> {
  const projection = attributes === undefined ? {} : projectionOf(attributes);
  const found: Record<string, Item[]> = Object.fromEntries(
    Object.keys(keysByTable).map((table) => [table, []]),
  );
  // DynamoDB refuses a request naming one key twice, and callers' keys may repeat (a run both
  // listed on its job and marked as its waiting rerun): each is asked once.
  const all = Object.entries(keysByTable).flatMap(([table, keys]) =>
    distinct(keys).map((key) => ({ table, key })),
  );
  for (let i = 0; i < all.length; i += KEYS_PER_REQUEST) {
    const left = await sendInRounds(
      byTable(all.slice(i, i + KEYS_PER_REQUEST)),
      async (pending) => {
        const result = await engine.doc.send(
          new BatchGetCommand({
            RequestItems: Object.fromEntries(
              Object.entries(pending).map(([table, keys]) => [
                table,
                { Keys: keys, ConsistentRead: consistentRead, ...projection },
              ]),
            ),
          }),
        );
        for (const [table, items] of Object.entries(result.Responses ?? {}))
          found[table]?.push(...items);
        return Object.fromEntries(
          Object.entries(result.UnprocessedKeys ?? {}).map(([table, request]) => [
            table,
            request.Keys ?? [],
          ]),
        );
      },
    );
    if (left !== null) throw exhausted();
  }
  return found;
}

function projectionOf(attributes: readonly string[]) {
  // Names, not the attributes themselves: DynamoDB reserves words such as "status".
  return {
    ProjectionExpression: attributes.map((_, i) => `#a${i}`).join(", "),
    ExpressionAttributeNames: Object.fromEntries(attributes.map((name, i) => [`#a${i}`, name])),
  };
}

function distinct(keys: readonly Item[]): Item[] {
  const seen = new Map<string, Item>();
  for (const key of keys) {
    const id = JSON.stringify(Object.entries(key).sort(([a], [b]) => (a < b ? -1 : 1)));
    if (!seen.has(id)) seen.set(id, key);
  }
  return [...seen.values()];
}

function byTable(
  keys: readonly { readonly table: string; readonly key: Item }[],
): Record<string, Item[]> {
  const grouped: Record<string, Item[]> = {};
  for (const { table, key } of keys) grouped[table] = [...(grouped[table] ?? []), key];
  return grouped;
}
