import { callerSignalOf } from "./caller-signal.js";
import { RequestTimeoutError, SchedulerApiError } from "./errors.js";
import { exactJsonAnswer, NULL_BODY_STATUSES } from "./exact-json.js";
import { isRepeatableRoute, repeatsAsOnce } from "./retries.js";

/** How long a request may take, its answer's body read to the end, unless the client says. */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** The longest timer Node keeps (2^31 - 1 ms, about 24.8 days): a longer one fires at once. */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * The most of an answer the client reads, 16 MiB: a hostile or broken server streaming a body
 * without end would otherwise take all the caller's memory. The API's largest answers are far
 * under it: on AWS a Lambda function's answer is at most 6 MB, and locally a page of 100 jobs at
 * the 80 KiB a body may hold is 8 MiB.
 */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;
const MAX_ANSWER_TEXT = "16 MiB";

/**
 * The answer's whole body, or null when it has none; an unexpected_response error naming the limit
 * when it declares or reaches more than MAX_ANSWER_BYTES (the rest is not read).
 */
async function wholeBody(response: Response, what: string): Promise<Uint8Array | null> {
  if (response.body === null) return null;
  const tooLarge = () =>
    new SchedulerApiError(
      response.status,
      "unexpected_response",
      `${what}: the answer is over ${MAX_ANSWER_TEXT}, the most the client reads`,
    );
  if (Number(response.headers.get("content-length")) > MAX_ANSWER_BYTES) {
    await response.body.cancel();
    throw tooLarge();
  }
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    length += value.byteLength;
    if (length > MAX_ANSWER_BYTES) {
      await reader.cancel();
      throw tooLarge();
    }
  }
  const body = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    body.set(chunk, at);
    at += chunk.byteLength;
  }
  return body;
}

/**
 * Every answer the API documents is JSON: a success whose body is not (a proxy's or a captive
 * portal's HTML page answered 200) is an unexpected_response naming the request, rather than the
 * SyntaxError openapi-fetch's parse would throw with nothing to say where it came from.
 */
function notJsonCheck(status: number, body: Uint8Array, what: string): void {
  if (body.length === 0) return;
  const text = new TextDecoder().decode(body);
  try {
    JSON.parse(text);
  } catch {
    throw new SchedulerApiError(
      status,
      "unexpected_response",
      `${what}: the ${status} answer is not JSON: ${text.slice(0, 200)}`,
    );
  }
}

/**
 * `fetch` that gives up on a request after `timeoutMs`, its answer's body included: a server or a
 * proxy that accepts the connection and never answers, or sends the headers and stalls the body,
 * would otherwise hold the caller (and every CLI command) for ever. The body is read here, within
 * the limit and up to MAX_ANSWER_BYTES, and the answer returned holds it in memory. Giving up
 * throws a RequestTimeoutError. The caller's own signal (callerSignalOf) aborting ends the request
 * at once, with the signal's reason, as fetch does.
 */
export function boundedFetch(base: typeof fetch, timeoutMs: number): typeof fetch {
  // NaN, 0, a negative or an overflowing limit would make every request time out at once.
  if (!(timeoutMs > 0 && timeoutMs <= MAX_TIMEOUT_MS))
    throw new RangeError(
      `timeoutMs: ${timeoutMs} is not a number of ms from 1 to ${MAX_TIMEOUT_MS}`,
    );
  return async (input, init) => {
    const caller = callerSignalOf(input, init);
    caller?.throwIfAborted();
    // Made without the caller's signal: fetch is given the one this request ends with instead.
    const request = new Request(input, { ...init, signal: null });
    const url = new URL(request.url);
    const what = `${request.method} ${url.pathname}${url.search}`;
    const repeatable = await repeatsAsOnce(request);
    // The caller's abort and the limit each end the wait themselves, not only through fetch's
    // abort: Node 20's fetch can lose an abort (a Request follows the signal it was made with
    // through a controller held weakly, AbortSignal.any's too, and may be collected first). Lost,
    // a request to a server that never answers was waited for until the limit, or for ever. The
    // listener on the caller's signal holds `ending`, which fetch's own Request follows.
    const ending = new AbortController();
    let endedWith: { readonly reason: unknown } | undefined;
    let end: (reason: unknown) => void = () => undefined;
    const ended = new Promise<never>((_, reject) => {
      end = (reason) => {
        if (endedWith !== undefined) return;
        endedWith = { reason };
        ending.abort(reason);
        reject(reason);
      };
    });
    ended.catch(() => undefined);
    const timer = setTimeout(() => {
      end(
        new RequestTimeoutError(
          request.method,
          `${url.pathname}${url.search}`,
          timeoutMs,
          repeatable,
          !isRepeatableRoute(request.method, url.pathname),
        ),
      );
    }, timeoutMs);
    const aborted = () => end(caller?.reason);
    caller?.addEventListener("abort", aborted, { once: true });
    try {
      // With a Request, `init` holds only what is not part of one (openapi-fetch's requestInitExt).
      const extra = input instanceof Request ? init : undefined;
      const sent = base(request, { ...extra, signal: ending.signal });
      const response = await Promise.race([sent, ended]);
      const body = await Promise.race([wholeBody(response, what), ended]);
      if (response.ok && body !== null) notJsonCheck(response.status, body, what);
      const headers = new Headers(response.headers);
      // openapi-fetch reads an answer of no stated length with JSON.parse, not with its json().
      if (body !== null && body.length > 0) headers.set("content-length", String(body.length));
      return exactJsonAnswer(NULL_BODY_STATUSES.has(response.status) ? null : body, {
        status: response.status,
        statusText: response.statusText,
        headers,
      });
    } catch (error) {
      // Fetch's own error for the abort (or one of reading the body it cut) is the ending's.
      throw endedWith === undefined ? error : endedWith.reason;
    } finally {
      clearTimeout(timer);
      caller?.removeEventListener("abort", aborted);
    }
  };
}
