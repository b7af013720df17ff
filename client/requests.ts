import type { AnswerShape } from "./answers.js";
import { errorOf, SchedulerApiError } from "./errors.js";
import type { Run, RunStatus } from "./types.js";

export interface WaitOptions {
  /** Default 60 s. */
  readonly timeoutMs?: number;
  /** Between polls; default 500 ms. */
  readonly pollMs?: number;
  /** The statuses to wait for; default every final one. */
  readonly until?: readonly RunStatus[];
  readonly signal?: AbortSignal;
}

/** waitForRun gave up: the run had not reached a status waited for in time. */
export class WaitTimeoutError extends Error {
  override readonly name = "WaitTimeoutError";

  constructor(
    message: string,
    /** The run as last seen, if it was seen at all. */
    readonly lastSeen: Run | null,
  ) {
    super(message);
  }
}

export interface RequestOptions {
  /**
   * Aborts the request in flight, and the wait before a retry of it, with an AbortError: so a
   * caller that stops (Ctrl-C, a wait given up) is not held until the API answers.
   */
  readonly signal?: AbortSignal;
}

/**
 * A key of the client's own for one call (`create-…`, `trigger-…`, …): reused across that call's
 * retries, so the API answers a retry with what the first attempt did; a new call makes another.
 */
export const callKey = (operation: string) => `${operation}-${crypto.randomUUID()}`;

/** The `signal` option of openapi-fetch's request, when one is given. */
export const signalOf = (options: RequestOptions) =>
  options.signal === undefined ? {} : { signal: options.signal };

type Result<T> = { data?: T; error?: unknown; response: Response };

/** An operation as the API reference names it: its method and path template ("GET /jobs/{id}"). */
type Operation = `${"GET" | "POST" | "PUT" | "PATCH" | "DELETE"} /${string}`;

/**
 * The key of a client's AnswerReader (`SchedulerClient[ANSWERS]`), which its API classes and job
 * handles read answers with. The package does not export it: the reader, and the clock in it, are
 * no API of the client's.
 */
export const ANSWERS = Symbol("answers");

/**
 * Reads one client's answers, and holds its clock (`retry.now`), against which the client sets the
 * API's times: a `Retry-After` date in an error is a wait from it (as the retries count it), and a
 * job handle's wait for the next run looks back from it (JobHandle.waitForRun).
 */
export class AnswerReader {
  constructor(readonly now: () => number) {}

  /**
   * The data of a success that has the shape `operation` relies on, or the typed error of
   * anything else (an `unexpected_response` naming the operation and what is missing, for a
   * success that does not).
   */
  async unwrap<T>(
    operation: Operation,
    pending: Promise<Result<T>>,
    shape: AnswerShape,
  ): Promise<T> {
    return (await this.unwrapWithResponse(operation, pending, shape)).data;
  }

  async unwrapWithResponse<T>(
    operation: Operation,
    pending: Promise<Result<T>>,
    shape: AnswerShape,
  ): Promise<{ data: T; response: Response }> {
    const { data, error, response } = await pending;
    if (!response.ok) throw this.errorOf(response, error, operation);
    const missing = shape.missing(data);
    if (data === undefined || missing !== null) {
      throw new SchedulerApiError(
        response.status,
        "unexpected_response",
        `${operation}: the ${response.status} answer is not ${shape.kind}: ${data === undefined ? "it is empty" : missing}`,
      );
    }
    return { data, response };
  }

  /** The error an answer that is not a success, to `operation`, stands for (errorOf). */
  errorOf(response: Response, body: unknown, operation: Operation): SchedulerApiError {
    return errorOf(response, body, operation, this.now);
  }
}

/**
 * Waits `ms`, or less when `signal` aborts (also when it already has): the
 * caller checks the signal afterwards. The client talks HTTP only, so it
 * keeps its own rather than shared/clock.ts's.
 */
export const waitOrAbort = (ms: number, signal: AbortSignal | undefined) =>
  new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, signal?.aborted ? 0 : ms);
    signal?.addEventListener("abort", done, { once: true });
  });

/**
 * Polls `probe` until it returns a run, or gives up after `timeoutMs` with a
 * WaitTimeoutError naming `what`. The timeout is real time elapsed, on the monotonic clock: a step
 * of the wall clock during the wait (an NTP correction, a machine waking) neither ends it early
 * nor makes it overstay.
 */
export async function pollForRun(
  what: string,
  probe: () => Promise<{ done: Run | null; seen: Run | null }>,
  options: WaitOptions,
): Promise<Run> {
  const deadline = performance.now() + (options.timeoutMs ?? 60_000);
  let lastSeen: Run | null = null;
  for (;;) {
    const { done, seen } = await probe();
    if (done) return done;
    lastSeen = seen ?? lastSeen;
    if (performance.now() >= deadline) {
      const status = lastSeen ? ` (last seen ${lastSeen.status})` : "";
      throw new WaitTimeoutError(
        `timed out after ${options.timeoutMs ?? 60_000} ms waiting for ${what}${status}`,
        lastSeen,
      );
    }
    await waitOrAbort(options.pollMs ?? 500, options.signal);
    options.signal?.throwIfAborted();
  }
}
