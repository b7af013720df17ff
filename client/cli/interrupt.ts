import type { RequestOptions } from "../requests.js";
import { CliExit, EXIT } from "./exit-codes.js";
import type { CliIo } from "./output.js";

/** Ctrl-C's signal (`io.signal`) as the client's RequestOptions, for a request Ctrl-C may abort. */
export const ctrlC = (io: CliIo): RequestOptions =>
  io.signal === undefined ? {} : { signal: io.signal };

/** `reading`, or exit 130 once Ctrl-C aborted it. */
export async function interruptible<T>(io: CliIo, reading: Promise<T>): Promise<T> {
  try {
    return await reading;
  } catch (error) {
    if (io.signal?.aborted) throw new CliExit(EXIT.interrupted, "interrupted by Ctrl-C");
    throw error;
  }
}

/**
 * A command's read (`read` passes `options` to the client): Ctrl-C aborts its request, or the wait
 * before a retry of it, and the command ends at once with exit 130, nothing printed. Only for
 * requests that change nothing: a write Ctrl-C interrupts may have been applied, so it runs on
 * until the bin ends it and prints what the user needs to send it again (its key).
 */
export const readInterruptibly = <T>(
  io: CliIo,
  read: (options: RequestOptions) => Promise<T>,
): Promise<T> => interruptible(io, read(ctrlC(io)));
