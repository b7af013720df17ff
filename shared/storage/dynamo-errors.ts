import {
  type AttributeValue,
  ProvisionedThroughputExceededException,
} from "@aws-sdk/client-dynamodb";
import { unmarshall } from "@aws-sdk/util-dynamodb";
import { sleep } from "../clock.js";
import type { Engine } from "../engine.js";
import { METRICS } from "../observability.js";

/**
 * DynamoDB reports a failed condition as an exception; these turn the two
 * shapes it takes into plain answers so callers branch on meaning.
 */
export function isConditionalCheckFailed(error: unknown): boolean {
  return error instanceof Error && error.name === "ConditionalCheckFailedException";
}

/**
 * Sends a conditional write and answers whether it applied: false when DynamoDB refused it for its
 * condition, which is an outcome the caller names (moved on, taken, already there) rather than a
 * failure. Any other error is thrown as it came. `send` is the whole write, with any
 * `retryOnContention` around it, so contention is waited out before a refusal is read.
 */
export async function conditionalWrite(send: () => Promise<unknown>): Promise<boolean> {
  try {
    await send();
    return true;
  } catch (error) {
    if (isConditionalCheckFailed(error)) return false;
    throw error;
  }
}

/**
 * Whether the SDK sent the request more than once before this error (it retries a throttle, a
 * 5xx, a timeout or a dropped connection): an earlier attempt may then have been applied with its
 * answer lost, and a failed condition may be this very request's own earlier write. A request
 * sent once cannot have met itself.
 */
export function sentMoreThanOnce(error: unknown): boolean {
  const attempts = (error as { $metadata?: { attempts?: unknown } } | null)?.$metadata?.attempts;
  return typeof attempts === "number" && attempts > 1;
}

interface CancellationReason {
  readonly Code?: string;
  readonly Item?: Record<string, AttributeValue>;
}

function cancellationReasons(error: unknown): readonly CancellationReason[] | null {
  if (!(error instanceof Error) || error.name !== "TransactionCanceledException") return null;
  return (error as { CancellationReasons?: CancellationReason[] }).CancellationReasons ?? [];
}

/**
 * For a cancelled transaction, the reason code of each item in request order
 * ("None" where that item was fine); null when the error is something else.
 */
export function transactionCancellationCodes(error: unknown): string[] | null {
  return cancellationReasons(error)?.map((reason) => reason.Code ?? "None") ?? null;
}

/**
 * The item at `index` of a cancelled transaction whose condition failed, when
 * that item asked for it (ReturnValuesOnConditionCheckFailure: ALL_OLD).
 */
export function cancelledItem(error: unknown, index: number): Record<string, unknown> | null {
  const item = cancellationReasons(error)?.[index]?.Item;
  return item ? unmarshall(item) : null;
}

/**
 * The item of `error`'s failed condition, when the request asked for it
 * (ReturnValuesOnConditionCheckFailure: ALL_OLD). The Document client does not
 * unmarshall items carried by errors, so it is done here.
 */
export function failedConditionItem(error: unknown): Record<string, unknown> | null {
  const item = (error as { Item?: Record<string, AttributeValue> } | null)?.Item;
  return item ? unmarshall(item) : null;
}

/**
 * What DynamoDB says when a table's, an index's or the account's capacity ran out: as a whole
 * request's error, and as the reason a transaction was cancelled.
 */
const THROTTLE_ERRORS = [
  "ProvisionedThroughputExceededException",
  "ThrottlingException",
  "RequestLimitExceeded",
];
const THROTTLE_CODES = ["ProvisionedThroughputExceeded", "ThrottlingError", "RequestLimitExceeded"];

/** Reasons a transaction is cancelled that say nothing about its items: the same request may well pass. */
const CONTENTION_CODES = new Set(["TransactionConflict", ...THROTTLE_CODES]);

/**
 * Whole-request errors of the same kind: a single-item write on an item that a
 * transaction holds (the SDK does not retry it), and throttling that outlasted
 * the SDK's own retries.
 */
const CONTENTION_ERRORS = new Set([
  "TransactionConflictException",
  "TransactionInProgressException",
  ...THROTTLE_ERRORS,
]);

/**
 * DynamoDB's answer to a transaction sent again under the `ClientRequestToken` of one it is still
 * applying: that transaction is being written, not refused (see `writeTransaction`).
 */
export function isTransactionInProgress(error: unknown): boolean {
  return error instanceof Error && error.name === "TransactionInProgressException";
}

/**
 * Whether a write failed only because other writes or the table's capacity got
 * in the way. A failed condition is an answer rather than contention, even when
 * another item of the transaction also conflicted: sent again, it fails again.
 */
export function isContention(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (CONTENTION_ERRORS.has(error.name)) return true;
  const codes = transactionCancellationCodes(error);
  return (
    codes !== null &&
    !codes.includes("ConditionalCheckFailed") &&
    codes.some((code) => CONTENTION_CODES.has(code))
  );
}

/**
 * Whether storage refused a request for its capacity (throttling that outlasted the SDK's
 * retries, or a transaction cancelled for it): contention with the table itself, not with another
 * request's write, and a failure of the service's rather than of the request's.
 */
export function isThrottling(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (THROTTLE_ERRORS.includes(error.name)) return true;
  return (
    transactionCancellationCodes(error)?.some((code) => THROTTLE_CODES.includes(code)) ?? false
  );
}

/**
 * A batch request whose keys or items DynamoDB left unprocessed round after round: its answer to a
 * table out of capacity, so it fails as a request throttled whole past the SDK's retries does
 * (`isThrottling` takes it so): a busy 503 in the API, a start given back in a worker.
 */
export function keptThrottling(
  operation: "BatchGetItem" | "BatchWriteItem",
  tables: readonly string[],
  rounds: number,
): Error {
  const left = operation === "BatchGetItem" ? "keys" : "items";
  return new ProvisionedThroughputExceededException({
    message: `${tables.join(", ")} kept throttling ${operation}: ${left} left unprocessed after ${rounds} rounds`,
    $metadata: {},
  });
}

const NETWORK_ERROR_CODES = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
]);

/**
 * Whether an error says the service or the way to it failed for now, rather
 * than anything about the request: contention, throttling, a 5xx, a timeout, a
 * dropped connection. Such a request is worth sending again later; any other
 * failure would repeat.
 */
export function isTransientFailure(error: unknown): boolean {
  if (isContention(error)) return true;
  if (!(error instanceof Error)) return false;
  const meta = error as {
    $retryable?: unknown;
    $metadata?: { httpStatusCode?: number };
    code?: unknown;
  };
  const status = meta.$metadata?.httpStatusCode ?? 0;
  return (
    meta.$retryable !== undefined ||
    status >= 500 ||
    status === 429 ||
    ["TimeoutError", "RequestTimeout", "RequestTimeoutException"].includes(error.name) ||
    (typeof meta.code === "string" && NETWORK_ERROR_CODES.has(meta.code))
  );
}

/** Attempts of one write under contention, counting the first. */
export const MAX_CONTENTION_ATTEMPTS = 8;
const BACKOFF_BASE_MS = 25;
const BACKOFF_CAP_MS = 1_000;

/**
 * Sends a write again while it fails only for contention (see `isContention`),
 * waiting a full-jitter exponential backoff between attempts (25 ms doubling,
 * capped at 1 s, `MAX_CONTENTION_ATTEMPTS` in all: at most about 3.5 s). Any
 * other failure, or contention that outlasts the attempts, is thrown to the
 * caller, which decides on its meaning as before.
 */
export async function retryOnContention<T>(
  engine: Pick<Engine, "random" | "obs">,
  operation: string,
  write: () => Promise<T>,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (error) {
      if (!isContention(error) || attempt >= MAX_CONTENTION_ATTEMPTS) throw error;
      engine.obs.metrics.add(METRICS.writeContention, 1, "Count", { operation });
      const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** attempt);
      await sleep(Math.floor(engine.random() * ceiling));
    }
  }
}
