import { AsyncLocalStorage } from "node:async_hooks";
import type { DynamoDBDocumentClient } from "@aws-sdk/lib-dynamodb";

/** The operations that read, billed in read units (DynamoDB API reference). */
const READ_OPERATIONS = new Set(["GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"]);

/** The operations that write, billed in write units (a refused conditional write too). */
const WRITE_OPERATIONS = new Set([
  "PutItem",
  "UpdateItem",
  "DeleteItem",
  "BatchWriteItem",
  "TransactWriteItems",
]);

const MIDDLEWARE_NAME = "capacityMeter";

/** Read and write units, as DynamoDB reports them consumed. */
export interface ConsumedUnits {
  readonly reads: number;
  readonly writes: number;
}

/**
 * The read and write units one piece of work (an API request) consumed, as
 * DynamoDB reports them: what the tenant's request bucket is charged for
 * (shared/quotas/request-rate.ts). Closed once charged, so that work the
 * request left running (a timer it set) is not counted after the fact.
 */
export class CapacityMeter {
  private reads = 0;
  private writes = 0;
  private open = true;

  get units(): ConsumedUnits {
    return { reads: this.reads, writes: this.writes };
  }

  add(units: ConsumedUnits): void {
    if (!this.open) return;
    this.reads += units.reads;
    this.writes += units.writes;
  }

  /** Stops counting and returns the units counted. */
  close(): ConsumedUnits {
    this.open = false;
    return this.units;
  }

  get counting(): boolean {
    return this.open;
  }
}

const currentMeter = new AsyncLocalStorage<CapacityMeter>();

/** Runs `work` with its DynamoDB calls (and those of what it starts) counted on `meter`. */
export function withCapacityMeter<T>(meter: CapacityMeter, work: () => Promise<T>): Promise<T> {
  return currentMeter.run(meter, work);
}

/**
 * Makes `doc` ask DynamoDB for the capacity each call consumed (`TOTAL`) and
 * add its read and write units to the meter of the work it runs in. Calls
 * outside a meter (the worker's and the dispatcher's, where they share the
 * client with the API, as in the sandbox and tests) are sent unchanged.
 * Installing it again on the same client replaces it.
 */
export function meterCapacity(doc: DynamoDBDocumentClient): void {
  doc.middlewareStack.add(
    (next, context) => async (args) => {
      const meter = currentMeter.getStore();
      const operation = context.commandName?.replace(/Command$/, "") ?? "";
      const reads = READ_OPERATIONS.has(operation);
      if (meter === undefined || !meter.counting || (!reads && !WRITE_OPERATIONS.has(operation))) {
        return next(args);
      }
      const input: unknown = args.input;
      if (isRecord(input) && input.ReturnConsumedCapacity === undefined) {
        input.ReturnConsumedCapacity = "TOTAL";
      }
      // A refused call (a condition that failed, a cancelled transaction) reports no units, though
      // AWS bills a refused write by its item's size: it is not charged (docs/api.md).
      const result = await next(args);
      const output: unknown = result.output;
      meter.add(unitsOf(isRecord(output) ? output.ConsumedCapacity : null, reads));
      return result;
    },
    // Serialize step, before the serializer, so the added parameter goes on the wire.
    { step: "serialize", priority: "high", name: MIDDLEWARE_NAME, override: true },
  );
}

/**
 * The units in a ConsumedCapacity answer (one object, or a list for the batch
 * and transaction calls): ReadCapacityUnits and WriteCapacityUnits where
 * DynamoDB splits them out, else the whole of CapacityUnits as the operation's
 * kind (a read operation's reads, a write operation's writes).
 */
function unitsOf(consumed: unknown, readOperation: boolean): ConsumedUnits {
  const entries = Array.isArray(consumed) ? consumed : [consumed];
  let reads = 0;
  let writes = 0;
  for (const entry of entries) {
    if (!isRecord(entry)) continue;
    const read = entry.ReadCapacityUnits;
    const write = entry.WriteCapacityUnits;
    const total = entry.CapacityUnits;
    if (typeof read === "number" || typeof write === "number") {
      if (typeof read === "number") reads += read;
      if (typeof write === "number") writes += write;
    } else if (typeof total === "number") {
      if (readOperation) reads += total;
      else writes += total;
    }
  }
  return { reads, writes };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}
