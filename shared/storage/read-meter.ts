import { AsyncLocalStorage } from "node:async_hooks";
import type { DynamoDBDocumentClient } from "@aws-sdk/lib-dynamodb";

/** The operations that read, billed in read units (DynamoDB API reference). */
const READ_OPERATIONS = new Set(["GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"]);

/** The operations that accept ReturnConsumedCapacity; the others are sent as they are. */
const CAPACITY_OPERATIONS = new Set([
  ...READ_OPERATIONS,
  "PutItem",
  "UpdateItem",
  "DeleteItem",
  "BatchWriteItem",
  "TransactWriteItems",
]);

const MIDDLEWARE_NAME = "readMeter";

/**
 * The read units one piece of work (an API request) consumed, as DynamoDB
 * reports them: what the tenant's request bucket is charged for
 * (shared/quotas/request-rate.ts). Closed once charged, so that work the
 * request left running (a timer it set) is not counted after the fact.
 */
export class ReadMeter {
  private consumed = 0;
  private open = true;

  get units(): number {
    return this.consumed;
  }

  add(units: number): void {
    if (this.open) this.consumed += units;
  }

  /** Stops counting and returns the units counted. */
  close(): number {
    this.open = false;
    return this.consumed;
  }

  get counting(): boolean {
    return this.open;
  }
}

const currentMeter = new AsyncLocalStorage<ReadMeter>();

/** Runs `work` with its DynamoDB reads (and those of what it starts) counted on `meter`. */
export function withReadMeter<T>(meter: ReadMeter, work: () => Promise<T>): Promise<T> {
  return currentMeter.run(meter, work);
}

/**
 * Makes `doc` ask DynamoDB for the capacity each call consumed (`TOTAL`) and
 * add its read units to the meter of the work it runs in. Calls outside a
 * meter (the worker's and the dispatcher's, where they share the client with
 * the API, as in the sandbox and tests) are sent unchanged. Installing it again
 * on the same client replaces it.
 */
export function meterReads(doc: DynamoDBDocumentClient): void {
  doc.middlewareStack.add(
    (next, context) => async (args) => {
      const meter = currentMeter.getStore();
      const operation = context.commandName?.replace(/Command$/, "") ?? "";
      if (meter === undefined || !meter.counting || !CAPACITY_OPERATIONS.has(operation)) {
        return next(args);
      }
      const input: unknown = args.input;
      if (isRecord(input) && input.ReturnConsumedCapacity === undefined) {
        input.ReturnConsumedCapacity = "TOTAL";
      }
      const reads = READ_OPERATIONS.has(operation);
      try {
        const result = await next(args);
        const output: unknown = result.output;
        meter.add(readUnitsOf(isRecord(output) ? output.ConsumedCapacity : null, reads));
        return result;
      } catch (error) {
        // A refused call can still carry what it consumed (a cancelled transaction's reads).
        meter.add(readUnitsOf(isRecord(error) ? error.ConsumedCapacity : null, reads));
        throw error;
      }
    },
    // Serialize step, before the serializer, so the added parameter goes on the wire.
    { step: "serialize", priority: "high", name: MIDDLEWARE_NAME, override: true },
  );
}

/**
 * The read units in a ConsumedCapacity answer (one object, or a list for the
 * batch and transaction calls): ReadCapacityUnits where DynamoDB splits them
 * out, else the whole of a read operation's CapacityUnits.
 */
function readUnitsOf(consumed: unknown, readOperation: boolean): number {
  const entries = Array.isArray(consumed) ? consumed : [consumed];
  let units = 0;
  for (const entry of entries) {
    if (!isRecord(entry)) continue;
    const read = entry.ReadCapacityUnits;
    const total = entry.CapacityUnits;
    if (typeof read === "number") units += read;
    else if (readOperation && typeof total === "number") units += total;
  }
  return units;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}
