import { randomUUID } from "node:crypto";
import type { TransactWriteCommandInput } from "@aws-sdk/lib-dynamodb";
import { TransactWriteCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { SchedulerError } from "../errors.js";
import {
  cancelledItem,
  isTransactionInProgress,
  retryOnContention,
  transactionCancellationCodes,
} from "./dynamo-errors.js";

declare module "../errors.js" {
  interface ErrorContexts {
    /**
     * A transaction cancelled for the named writes' conditions; the storage
     * operation that sent it turns this into a domain error by name.
     */
    readonly conditions_failed: { readonly failed: readonly string[] };
  }
}

export type TransactItem = NonNullable<TransactWriteCommandInput["TransactItems"]>[number];

/**
 * One item of a transaction under the name of the condition it carries
 * ("lease", "dueEntry", "job", "run:2026-…"), so that a cancellation is read by
 * name rather than by the item's position in the request.
 */
export interface NamedWrite<Name extends string> {
  readonly name: Name;
  readonly write: TransactItem;
}

/**
 * A transaction was cancelled because the conditions of one or more of its
 * items failed. `item(name)` is the item as it stood, for writes that asked for
 * it (ReturnValuesOnConditionCheckFailure: ALL_OLD).
 */
export class ConditionsFailedError<
  Name extends string = string,
> extends SchedulerError<"conditions_failed"> {
  readonly #items: ReadonlyMap<Name, Record<string, unknown> | null>;

  constructor(items: ReadonlyMap<Name, Record<string, unknown> | null>, cause: unknown) {
    const failed = [...items.keys()];
    super("conditions_failed", `conditions failed: ${failed.join(", ")}`, { failed }, { cause });
    this.#items = items;
  }

  /** The writes whose conditions failed, by name. */
  get failed(): ReadonlySet<Name> {
    return new Set(this.#items.keys());
  }

  has(name: Name): boolean {
    return this.#items.has(name);
  }

  item(name: Name): Record<string, unknown> | null {
    return this.#items.get(name) ?? null;
  }
}

/**
 * Sends `writes` as one transaction, again while it fails only for contention
 * (see `retryOnContention`, recorded under `operation`). A cancellation with a
 * failed condition becomes a `ConditionsFailedError` naming those writes; any
 * other failure is thrown as it came.
 *
 * DynamoDB tells a transaction sent again by its `ClientRequestToken`: a repeat of one it applied
 * answers success and writes nothing. The SDK resends a request whose answer it lost (a dropped
 * connection, a 500) with the same token; while the first send is still being applied, DynamoDB
 * answers each repeat `TransactionInProgressException`, and once the SDK's own retries run out
 * that reaches here. Sent again under a new token, it would be another transaction, and would
 * meet the first one's write: a create would take its own job for another request's, a trigger
 * queue a second run, a replay answer 409. So after that answer the transaction is sent again
 * under the same token; after any other contention (a cancellation: nothing was written) under a
 * new one.
 */
export async function writeTransaction<Name extends string>(
  engine: Pick<Engine, "doc" | "random" | "obs">,
  operation: string,
  writes: readonly NamedWrite<Name>[],
): Promise<void> {
  let token = randomUUID();
  try {
    await retryOnContention(engine, operation, async () => {
      try {
        return await engine.doc.send(
          new TransactWriteCommand({
            TransactItems: writes.map((w) => w.write),
            ClientRequestToken: token,
          }),
        );
      } catch (error) {
        if (!isTransactionInProgress(error)) token = randomUUID();
        throw error;
      }
    });
  } catch (error) {
    const failed = failedConditions(error, writes);
    if (failed === null) throw error;
    throw new ConditionsFailedError(failed, error);
  }
}

function failedConditions<Name extends string>(
  error: unknown,
  writes: readonly NamedWrite<Name>[],
): Map<Name, Record<string, unknown> | null> | null {
  const codes = transactionCancellationCodes(error);
  if (codes === null) return null;
  const failed = new Map<Name, Record<string, unknown> | null>();
  writes.forEach((write, index) => {
    if (codes[index] === "ConditionalCheckFailed")
      failed.set(write.name, cancelledItem(error, index));
  });
  return failed.size > 0 ? failed : null;
}
