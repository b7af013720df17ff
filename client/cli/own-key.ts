import { callKey } from "../requests.js";
import { mayHaveBeenApplied } from "./exit-codes.js";

/**
 * A create, trigger, replay or rotation that failed, maybe applied, under an Idempotency-Key the
 * command made itself (the user gave none): the key is printed with the failure, since only that
 * key, sent again with the same request, answers what the first did instead of doing it again
 * (another job or run; a second rotation, cutting off the secret the first one made).
 */
export class FailedUnderOwnKey extends Error {
  constructor(
    /** What the request failed with, reported and given its exit code as it is. */
    readonly failure: unknown,
    readonly idempotencyKey: string,
  ) {
    super(`failed under the command's Idempotency-Key ${idempotencyKey}`);
  }
}

/**
 * Sends a create, trigger, replay or rotation under `given` (the user's key, or false for none
 * where the command allows it) or else a key of the command's own, the one the client would make,
 * so that a failure that may have been applied can name it (FailedUnderOwnKey).
 */
export async function withOwnKey<T, Given extends string | false>(
  operation: "create" | "trigger" | "replay" | "rotate",
  given: Given | undefined,
  send: (idempotencyKey: Given | string) => Promise<T>,
): Promise<T> {
  if (given !== undefined) return send(given);
  const key = callKey(operation);
  try {
    return await send(key);
  } catch (error) {
    throw mayHaveBeenApplied(error) ? new FailedUnderOwnKey(error, key) : error;
  }
}

/** What a user runs the command again with, so that it answers what the first did. */
export const retryHint = (key: string) =>
  `retry with --idempotency-key ${key} to avoid a duplicate`;
