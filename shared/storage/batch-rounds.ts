import { sleep } from "../clock.js";

/** Rounds of one batch request while DynamoDB leaves some of it unprocessed (throttling), the first included. */
export const MAX_BATCH_ROUNDS = 6;
/** The wait before the second round; it doubles each round after. */
const BATCH_BACKOFF_BASE_MS = 50;

/** A batch request's keys or items by table name, as RequestItems and what is left unprocessed are. */
export type ByTable<T> = Record<string, T[]>;

/**
 * Sends a BatchGetItem's keys or a BatchWriteItem's items (`request`), then what DynamoDB left of
 * them unprocessed, again and again: `send` sends one round and answers what it left. It waits
 * BATCH_BACKOFF_BASE_MS before the second round and twice as long before each after, for
 * MAX_BATCH_ROUNDS rounds at most. Answers what is still left after the last round (tables left
 * nothing are dropped), or null once nothing is; what that means (throttling, writes not applied)
 * is the caller's to say.
 */
export async function sendInRounds<T>(
  request: ByTable<T>,
  send: (pending: ByTable<T>) => Promise<ByTable<T>>,
): Promise<ByTable<T> | null> {
  let pending = nonEmpty(request);
  for (let round = 1; round <= MAX_BATCH_ROUNDS; round++) {
    if (Object.keys(pending).length === 0) return null;
    if (round > 1) await sleep(BATCH_BACKOFF_BASE_MS * 2 ** (round - 2));
    pending = nonEmpty(await send(pending));
  }
  return Object.keys(pending).length === 0 ? null : pending;
}

function nonEmpty<T>(byTable: ByTable<T>): ByTable<T> {
  return Object.fromEntries(Object.entries(byTable).filter(([, entries]) => entries.length > 0));
}

/** A put of a BatchWriteItem, as sent. */
export interface PutRequest {
  readonly PutRequest: { readonly Item: Record<string, unknown> };
}

/** The puts among a BatchWriteItem's unprocessed requests of one table, to send again. */
export function putsLeft(
  requests: readonly { readonly PutRequest?: { readonly Item?: Record<string, unknown> } }[],
): PutRequest[] {
  return requests.flatMap((r) =>
    r.PutRequest?.Item ? [{ PutRequest: { Item: r.PutRequest.Item } }] : [],
  );
}
