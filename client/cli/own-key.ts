import { callKey } from "../requests.js";
import { mayHaveBeenApplied } from "./exit-codes.js";
import { type CliIo, json, type OutputFormat } from "./output.js";

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
 * so that a failure that may have been applied can name it (FailedUnderOwnKey), and so can a
 * Ctrl-C that ends the command while the request is in flight (exit 130: it may have been applied
 * too), just before the process exits.
 */
export async function withOwnKey<T, Given extends string | false>(
  command: { readonly io: CliIo; readonly format: OutputFormat },
  operation: "create" | "trigger" | "replay" | "rotate",
  given: Given | undefined,
  send: (idempotencyKey: Given | string) => Promise<T>,
): Promise<T> {
  if (given !== undefined) return send(given);
  const key = callKey(operation);
  const { io, format } = command;
  const interrupted = () => io.stderr(interruptedReport(operation, key, format));
  io.exiting?.addEventListener("abort", interrupted);
  try {
    return await send(key);
  } catch (error) {
    throw mayHaveBeenApplied(error) ? new FailedUnderOwnKey(error, key) : error;
  } finally {
    io.exiting?.removeEventListener("abort", interrupted);
  }
}

/** What a user runs the command again with, so that it answers what the first did. */
export const retryHint = (key: string) =>
  `retry with --idempotency-key ${key} to avoid a duplicate`;

/** A command ended by Ctrl-C with its request unanswered, as runCli reports a failure under `key`. */
function interruptedReport(operation: string, key: string, format: OutputFormat): string {
  const message = `interrupted with the ${operation} unanswered: it may have been applied`;
  return format === "json"
    ? `${json({ error: { message, idempotencyKey: key } }, 0)}\n`
    : `error: ${message}\n  ${retryHint(key)}\n`;
}
