import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import type { SQSClient } from "@aws-sdk/client-sqs";

/**
 * Counts every AWS call a client makes, by service and operation, through a
 * middleware on the client's own stack (the Document client shares the
 * DynamoDB client's stack, so its calls are counted too). For DynamoDB it
 * asks for `ReturnConsumedCapacity: "INDEXES"` on every operation that
 * supports it and adds up what the service reports: table and each GSI.
 */

/** Operations that accept ReturnConsumedCapacity (DynamoDB API reference). */
const CAPACITY_OPERATIONS = new Set([
  "GetItem",
  "PutItem",
  "UpdateItem",
  "DeleteItem",
  "Query",
  "Scan",
  "BatchGetItem",
  "BatchWriteItem",
  "TransactGetItems",
  "TransactWriteItems",
]);

const SINGLE_READS = new Set(["GetItem", "Query"]);

const TRANSACTIONS = new Set(["TransactWriteItems", "TransactGetItems"]);

const READ_OPERATIONS = new Set(["GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"]);

/** SQS bills each 64 KiB chunk of a request's payload as one request. */
const SQS_CHUNK_BYTES = 64 * 1024;

export interface OperationCount {
  /** API calls made. */
  calls: number;
  /** Billed SQS requests (64 KiB chunks); for DynamoDB the same as calls. */
  billedRequests: number;
  /**
   * DynamoDB: billed read or write units, table plus indexes: what the service reported, with
   * the table part of transactions doubled when the service did not (DynamoDB Local does not),
   * plus the estimate for calls that reported nothing.
   */
  capacityUnits: number;
  /** DynamoDB: the raw ConsumedCapacity sum the service reported. */
  reportedUnits: number;
  /** DynamoDB: of capacityUnits, how much was estimated (failed calls report nothing). */
  estimatedUnits: number;
  /** DynamoDB: of which on global secondary indexes. */
  indexCapacityUnits: number;
  /** DynamoDB: calls that carried no ConsumedCapacity in the answer. */
  unreported: number;
  /** Calls that threw (conditional check failed, cancelled transaction…): billed all the same. */
  failed: number;
  /** SQS ReceiveMessage: calls that returned no message. */
  empty: number;
  /** SQS: messages sent, received or deleted. */
  messages: number;
}

export type CountKey = `${"DynamoDB" | "SQS"}.${string}`;

export class CallCounter {
  private readonly counts = new Map<string, Map<CountKey, OperationCount>>();
  /** The phase calls are booked under (create, dispatch, worker…); null: not counted. */
  phase: string | null = null;

  snapshot(): Record<string, Record<string, OperationCount>> {
    const out: Record<string, Record<string, OperationCount>> = {};
    for (const [phase, ops] of this.counts) {
      out[phase] = Object.fromEntries([...ops].map(([k, v]) => [k, { ...v }]));
    }
    return out;
  }

  reset(): void {
    this.counts.clear();
  }

  entry(key: CountKey): OperationCount | null {
    if (this.phase === null) return null;
    let ops = this.counts.get(this.phase);
    if (!ops) {
      ops = new Map();
      this.counts.set(this.phase, ops);
    }
    let count = ops.get(key);
    if (!count) {
      count = {
        calls: 0,
        billedRequests: 0,
        capacityUnits: 0,
        reportedUnits: 0,
        estimatedUnits: 0,
        indexCapacityUnits: 0,
        unreported: 0,
        failed: 0,
        empty: 0,
        messages: 0,
      };
      ops.set(key, count);
    }
    return count;
  }
}

export const isReadOperation = (operation: string) => READ_OPERATIONS.has(operation);

interface CapacityShape {
  CapacityUnits?: number;
  ReadCapacityUnits?: number;
  WriteCapacityUnits?: number;
  GlobalSecondaryIndexes?: Record<string, { CapacityUnits?: number }>;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/** Total and GSI capacity from a ConsumedCapacity value (one object, or a list for batch/transact). */
function capacityOf(consumed: unknown): { total: number; index: number } | null {
  if (consumed === undefined) return null;
  const list: unknown[] = Array.isArray(consumed) ? consumed : [consumed];
  let total = 0;
  let index = 0;
  for (const item of list) {
    if (!isRecord(item)) continue;
    const c = item as CapacityShape;
    total += c.CapacityUnits ?? 0;
    for (const gsi of Object.values(c.GlobalSecondaryIndexes ?? {}))
      index += gsi.CapacityUnits ?? 0;
  }
  return { total, index };
}

function operationOf(commandName: unknown): string {
  return typeof commandName === "string" ? commandName.replace(/Command$/, "") : "Unknown";
}

function errorConsumedCapacity(error: unknown): unknown {
  // A failed conditional write still consumes capacity; DynamoDB returns it on the error
  // when ReturnConsumedCapacity was asked for (the SDK surfaces unknown fields on the exception).
  return isRecord(error) ? error.ConsumedCapacity : undefined;
}

/** Adds the counting middleware to a DynamoDB client (and so to Document clients built from it). */
export interface DynamoCountOptions {
  /**
   * Whether the endpoint already bills transactions at twice the units (AWS does; DynamoDB Local
   * reports them like plain writes, checked by bench/requests-per-run.ts at start).
   */
  readonly transactionsDoubled: boolean;
  /** The partition-key attribute of every GSI of the tables, for `transactionWriteUnits`. */
  readonly indexKeyAttributes: readonly string[];
}

/**
 * What AWS bills a TransactWriteItems: two units per item and KB (condition checks included),
 * plus one index unit for each index key an item's put carries or its update sets or removes.
 * DynamoDB Local reports one item's worth per table, whatever the number of items (a probe:
 * 1, 3 and 10 puts in one transaction all reported 2 table units and 2 index units), so the
 * counter books the larger of this and the report. Items updated, deleted or checked are taken
 * as under 1 KB (the stored item is not in the request).
 */
export function transactionWriteUnits(
  input: Record<string, unknown>,
  indexKeyAttributes: readonly string[],
): { table: number; index: number } {
  const items = Array.isArray(input.TransactItems) ? input.TransactItems : [];
  let table = 0;
  let index = 0;
  for (const item of items) {
    if (!isRecord(item)) continue;
    const put = isRecord(item.Put) ? item.Put : null;
    const update = isRecord(item.Update) ? item.Update : null;
    if (put !== null && isRecord(put.Item)) {
      table += 2 * Math.max(1, Math.ceil(itemBytes(put.Item) / 1024));
      const keys = put.Item;
      index += indexKeyAttributes.filter((a) => a in keys).length;
      continue;
    }
    table += 2;
    if (update !== null && typeof update.UpdateExpression === "string") {
      const names = isRecord(update.ExpressionAttributeNames)
        ? Object.entries(update.ExpressionAttributeNames)
        : [];
      const expression = update.UpdateExpression.replace(/#[A-Za-z0-9_]+/g, (ref) => {
        const found = names.find(([name]) => name === ref);
        return typeof found?.[1] === "string" ? found[1] : ref;
      });
      const words = new Set(expression.split(/[^A-Za-z0-9_]+/));
      index += indexKeyAttributes.filter((a) => words.has(a)).length;
    }
  }
  return { table, index };
}

/** An item's size as DynamoDB counts it: attribute names plus values. */
function itemBytes(item: Record<string, unknown>): number {
  return Object.entries(item).reduce(
    (sum, [name, value]) => sum + name.length + valueBytes(value),
    0,
  );
}

function valueBytes(value: unknown): number {
  if (!isRecord(value)) return 0;
  if (typeof value.S === "string") return Buffer.byteLength(value.S);
  if (typeof value.N === "string") return Math.ceil(value.N.replace(/^-|\./g, "").length / 2) + 1;
  if (value.B instanceof Uint8Array) return value.B.byteLength;
  if ("BOOL" in value || "NULL" in value) return 1;
  if (isRecord(value.M)) return 3 + itemBytes(value.M);
  if (Array.isArray(value.L)) return 3 + value.L.reduce<number>((s, v) => s + 1 + valueBytes(v), 0);
  for (const set of [value.SS, value.NS]) {
    if (Array.isArray(set)) return set.reduce<number>((s, v) => s + byteLength(v), 0);
  }
  return 0;
}

/**
 * The least a call that reported no capacity can have cost: one unit per item written
 * (two in a transaction), half a unit per item read. Only failed calls land here.
 */
function estimateUnits(operation: string, input: Record<string, unknown>): number {
  const items = Array.isArray(input.TransactItems) ? input.TransactItems.length : 1;
  if (TRANSACTIONS.has(operation)) return 2 * items;
  return READ_OPERATIONS.has(operation) ? 0.5 : items;
}

export function countDynamoDb(
  client: DynamoDBClient,
  counter: CallCounter,
  options: DynamoCountOptions,
): void {
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const operation = operationOf(context.commandName);
      const count = counter.entry(`DynamoDB.${operation}`);
      if (count === null) return next(args);
      const input = args.input;
      if (CAPACITY_OPERATIONS.has(operation) && isRecord(input)) {
        input.ReturnConsumedCapacity = "INDEXES";
      }
      count.calls++;
      count.billedRequests++;
      const book = (consumed: unknown) => {
        const capacity = capacityOf(consumed);
        if (capacity === null) {
          if (!CAPACITY_OPERATIONS.has(operation)) return;
          count.unreported++;
          const estimate = estimateUnits(operation, isRecord(input) ? input : {});
          count.estimatedUnits += estimate;
          count.capacityUnits += estimate;
          return;
        }
        const reportedTable = capacity.total - capacity.index;
        const doubling = TRANSACTIONS.has(operation) && !options.transactionsDoubled ? 2 : 1;
        let tableUnits = reportedTable * doubling;
        let indexUnits = capacity.index;
        if (operation === "TransactWriteItems" && isRecord(input)) {
          const billed = transactionWriteUnits(input, options.indexKeyAttributes);
          count.estimatedUnits +=
            Math.max(0, billed.table - tableUnits) + Math.max(0, billed.index - indexUnits);
          tableUnits = Math.max(tableUnits, billed.table);
          indexUnits = Math.max(indexUnits, billed.index);
        }
        count.reportedUnits += capacity.total;
        count.capacityUnits += tableUnits + indexUnits;
        count.indexCapacityUnits += indexUnits;
        // DynamoDB Local reports 0 for a Get or Query that finds nothing; AWS bills at least
        // one read unit for it (half for an eventually consistent read).
        if (SINGLE_READS.has(operation) && isRecord(input)) {
          const floor = input.ConsistentRead === true ? 1 : 0.5;
          if (capacity.total < floor) {
            count.capacityUnits += floor - capacity.total;
            count.estimatedUnits += floor - capacity.total;
          }
        }
      };
      try {
        const result = await next(args);
        book(isRecord(result.output) ? result.output.ConsumedCapacity : undefined);
        return result;
      } catch (error) {
        count.failed++;
        book(errorConsumedCapacity(error));
        throw error;
      }
    },
    // Before the serializer, so the added parameter goes on the wire; after the Document
    // client's marshalling (initialize step), so the input is the low-level one.
    { step: "serialize", priority: "high", name: "benchCallCounter", override: true },
  );
}

function byteLength(value: unknown): number {
  return typeof value === "string" ? Buffer.byteLength(value) : 0;
}

/** Payload bytes SQS bills on: message bodies and attributes of a send. */
function sqsPayloadBytes(operation: string, input: Record<string, unknown>): number {
  if (operation === "SendMessage") return byteLength(input.MessageBody);
  if (operation === "SendMessageBatch" && Array.isArray(input.Entries)) {
    return input.Entries.reduce<number>(
      (sum, e) => sum + (isRecord(e) ? byteLength(e.MessageBody) : 0),
      0,
    );
  }
  return 0;
}

/** Adds the counting middleware to an SQS client. */
export function countSqs(client: SQSClient, counter: CallCounter): void {
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const operation = operationOf(context.commandName);
      const count = counter.entry(`SQS.${operation}`);
      if (count === null) return next(args);
      const input = isRecord(args.input) ? args.input : {};
      count.calls++;
      count.billedRequests += Math.max(
        1,
        Math.ceil(sqsPayloadBytes(operation, input) / SQS_CHUNK_BYTES),
      );
      if (Array.isArray(input.Entries)) count.messages += input.Entries.length;
      else if (operation === "SendMessage" || operation === "DeleteMessage") count.messages++;
      try {
        const result = await next(args);
        if (operation === "ReceiveMessage") {
          const messages =
            isRecord(result.output) && Array.isArray(result.output.Messages)
              ? result.output.Messages.length
              : 0;
          count.messages += messages;
          if (messages === 0) count.empty++;
        }
        return result;
      } catch (error) {
        count.failed++;
        throw error;
      }
    },
    { step: "serialize", priority: "high", name: "benchCallCounter", override: true },
  );
}
