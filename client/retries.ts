import { callerSignalOf } from "./caller-signal.js";
import { RequestTimeoutError, retryAfterMsOf } from "./errors.js";
import type { paths } from "./generated/api.js";
import { waitOrAbort } from "./requests.js";

/**
 * Retries of requests the API answered 429 (over the tenant's requests per second) or 503 (busy:
 * contention on a job, or storage that did not answer in time), or API Gateway answered 502 or 504
 * (the API's function failed or ran out of time), for requests that are safe to send again, whose
 * repeat answers what the first did or the state it left (docs/api.md "Retrying requests"): GET,
 * HEAD, OPTIONS, PUT and DELETE; a job's pause, resume and cancel, a run's cancel, an edit (PATCH,
 * with the If-Match it was sent with), an async target's completion and heartbeat, and a
 * schedule's preview; and any other POST that carries an `Idempotency-Key` (the client's create,
 * trigger, replay and rotation always do: the caller's key, else one it makes for the call), and a
 * batch whose every job carries its `idempotencyKey`. A batch with a job without one, and a POST
 * sent through `client.http` without a key, is sent once: its repeat would do it again. An
 * edit's 412 is never retried: another edit came first. Each retry waits the answer's
 * `Retry-After` (whole seconds or an HTTP date, retryAfterMsOf); an answer without one, or with
 * one that is neither (`-3`, `1.5`), waits 0.5 s, doubling per retry; a wait over `maxDelayMs`
 * is not waited, the last answer returned. A
 * request of those that timed out (a RequestTimeoutError), or whose connection broke once it was
 * open (reset or closed by the other side), is retried too, after the same doubling wait: it may
 * have been applied, and sending it again does what sending it once does. A connection that could
 * not be made (refused, no such host) is not retried: nothing was sent. The caller's signal
 * (`signal` of a listing, or of `client.http`) aborting ends the wait before a retry at once, with
 * its reason (an AbortError), as it ends the request itself.
 */
export interface RetryOptions {
  /** Retries after the first request (default 3); 0 sends each request once. */
  readonly attempts?: number;
  /**
   * The longest wait before a retry (default 10,000 ms). An answer asking to wait longer is not
   * retried: the request throws its error, whose `retryAfterSeconds` says how long to wait.
   */
  readonly maxDelayMs?: number;
  /** Waits `ms` (default setTimeout); tests pass one that only records. */
  readonly sleep?: (ms: number) => Promise<void>;
  /**
   * The time now, for a `Retry-After` given as an HTTP date (default `Date.now`): the wait before
   * a retry, and the error's `retryAfterSeconds`, are counted from it.
   */
  readonly now?: () => number;
}

const DEFAULT_ATTEMPTS = 3;
const DEFAULT_MAX_DELAY_MS = 10_000;
/** The first wait when the answer gives no Retry-After; each retry doubles it. */
const BASE_DELAY_MS = 500;
const RETRIED_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);
/** Methods whose request, sent twice, does what it does sent once, whatever its route. */
const REPEATABLE_METHODS: ReadonlySet<string> = new Set([
  "GET",
  "HEAD",
  "OPTIONS",
  "PUT",
  "DELETE",
]);

/** API Gateway's 502 and 504: the API's function failed or timed out, maybe after applying it. */
const MAYBE_APPLIED_STATUSES: ReadonlySet<number> = new Set([502, 504]);

/**
 * The codes fetch gives (its error's `cause`) for a connection that broke once it was open: the
 * request may have reached the API, and been applied, before it did.
 */
const BROKEN_CONNECTION_CODES: ReadonlySet<string> = new Set([
  "UND_ERR_SOCKET",
  "ECONNRESET",
  "EPIPE",
]);

/** Whether `error` is fetch's for a connection that broke after it was made (see above). */
export function brokeOnceOpen(error: unknown): boolean {
  if (!(error instanceof TypeError)) return false;
  const { cause } = error;
  return (
    typeof cause === "object" &&
    cause !== null &&
    "code" in cause &&
    typeof cause.code === "string" &&
    BROKEN_CONNECTION_CODES.has(cause.code)
  );
}

/** Answers to a retry sent after an attempt that may have been applied (followsUnclearAttempt). */
const afterUnclearAttempt = new WeakSet<Response>();

/**
 * Whether `response` answers a retry that followed an attempt which may have been applied: it
 * timed out, its connection broke once open, or API Gateway answered it 502 or 504. A DELETE so
 * answered 404 may have found the job gone by its own first attempt. A 429 or a 503 says nothing
 * of the request was done.
 */
export function followsUnclearAttempt(response: Response): boolean {
  return afterUnclearAttempt.has(response);
}

/**
 * Waits `ms` before a retry of a request with `signal` (null: none), ended early when the signal
 * aborts; then throws the signal's reason, as fetch does for an aborted request. The default timer
 * is cleared on an abort, so it holds no process open; a `sleep` of the caller's own is raced with
 * the abort.
 */
async function waitBeforeRetry(
  sleep: ((ms: number) => Promise<void>) | undefined,
  ms: number,
  signal: AbortSignal | null,
): Promise<void> {
  signal?.throwIfAborted();
  if (sleep === undefined) await waitOrAbort(ms, signal ?? undefined);
  else {
    let stop: () => void = () => undefined;
    const aborted = new Promise<void>((resolve) => {
      stop = resolve;
      signal?.addEventListener("abort", stop, { once: true });
    });
    try {
      await Promise.race([sleep(ms), aborted]);
    } finally {
      signal?.removeEventListener("abort", stop);
    }
  }
  signal?.throwIfAborted();
}

/** The OpenAPI paths (client/generated/api.ts) that take `method`. */
type PathsTaking<M extends "post" | "patch"> = {
  [P in keyof paths]: paths[P][M] extends undefined ? never : P;
}[keyof paths];

/**
 * The POSTs whose repeat answers what the first attempt did, or the state it left, with no
 * Idempotency-Key (docs/api.md "Retrying requests"): a job's pause, resume and cancel, a run's
 * cancel, an async target's completion (the same report) and heartbeat (a lease from now, as the
 * first gave), and a schedule's preview, which writes nothing. A create, a batch, a trigger, a
 * replay and a rotation are not among them: sent again without a key, each does it again (the
 * client's methods send each with a key: isRepeatable, isKeyedBatch).
 */
const REPEATABLE_POSTS: readonly PathsTaking<"post">[] = [
  "/jobs/{id}/pause",
  "/jobs/{id}/resume",
  "/jobs/{id}/cancel",
  "/jobs/{id}/runs/{runId}/cancel",
  "/runs/{runId}/complete",
  "/runs/{runId}/heartbeat",
  "/schedules/preview",
];
/** An edit sent again at the same If-Match with the same body answers the job it made. */
const EDIT: PathsTaking<"patch"> = "/jobs/{id}";

/**
 * A path template as a pattern of the end of a URL's path: each `{param}` one segment (the client
 * escapes a `/` in an id), and whatever path the base URL has (an API Gateway stage) before it.
 */
const routePattern = (template: string): RegExp =>
  new RegExp(`(?:^|/)${template.slice(1).replace(/\{[^}]+\}/g, "[^/]+")}$`);
const REPEATABLE_POST_PATTERNS = REPEATABLE_POSTS.map(routePattern);
const EDIT_PATTERN = routePattern(EDIT);

/**
 * Whether a `method` request to `pathname` (a URL's path, or a path template such as
 * "/jobs/{id}/pause") answers, sent again as it was, what it did sent once, with no
 * Idempotency-Key: by its method (GET, HEAD, OPTIONS, PUT, DELETE), or its route (a POST of
 * REPEATABLE_POSTS; an edit, which the client sends with If-Match).
 */
export function isRepeatableRoute(method: string, pathname: string): boolean {
  if (REPEATABLE_METHODS.has(method)) return true;
  if (method === "POST") return REPEATABLE_POST_PATTERNS.some((pattern) => pattern.test(pathname));
  return method === "PATCH" && EDIT_PATTERN.test(pathname);
}

/**
 * Whether sending `request` twice does what sending it once does: its route is repeatable
 * (isRepeatableRoute; an edit only with If-Match, without which the API refuses it, 428), or it is
 * a POST with an Idempotency-Key.
 */
export function isRepeatable(request: Request): boolean {
  if (request.method === "PATCH" && !request.headers.has("if-match")) return false;
  return (
    isRepeatableRoute(request.method, new URL(request.url).pathname) ||
    (request.method === "POST" && request.headers.has("idempotency-key"))
  );
}

const BATCH_PATTERN = routePattern("/jobs:batch" satisfies PathsTaking<"post">);

/**
 * Whether `request` is a batch create whose every job carries its `idempotencyKey`: sent again,
 * each job the first attempt created answers 200 with that job, and one it refused (nothing of it
 * written) is judged again (docs/api.md "Creating jobs in a batch"), so no job is made twice. The client gives a batch's jobs
 * no key of its own: a job with one is written alone, not in the batch's shared writes, and a
 * batch's jobs without one are created again by a repeat, so such a batch is sent once.
 */
async function isKeyedBatch(request: Request): Promise<boolean> {
  if (request.method !== "POST" || !BATCH_PATTERN.test(new URL(request.url).pathname)) return false;
  let body: unknown;
  try {
    body = JSON.parse(await request.clone().text());
  } catch {
    return false;
  }
  const jobs = typeof body === "object" && body !== null && "jobs" in body ? body.jobs : null;
  return (
    Array.isArray(jobs) &&
    jobs.length > 0 &&
    jobs.every(
      (job: unknown) =>
        typeof job === "object" &&
        job !== null &&
        "idempotencyKey" in job &&
        typeof job.idempotencyKey === "string" &&
        job.idempotencyKey !== "",
    )
  );
}

/**
 * Whether `request`, sent twice, does what it does sent once: isRepeatable, or a batch create
 * whose every job carries a key (isKeyedBatch, which reads the body).
 */
export async function repeatsAsOnce(request: Request): Promise<boolean> {
  return isRepeatable(request) || (await isKeyedBatch(request));
}

/**
 * `fetch` that sends a repeatable request again while it is answered 429, 502, 503 or 504, times
 * out or its connection breaks, as `options` allow; the last answer (or the first that is not
 * retried) is returned as it came, and the last timeout thrown.
 */
export function retryingFetch(base: typeof fetch, options: RetryOptions = {}): typeof fetch {
  const attempts = options.attempts ?? DEFAULT_ATTEMPTS;
  const maxDelayMs = options.maxDelayMs ?? DEFAULT_MAX_DELAY_MS;
  const sleep = options.sleep;
  const now = options.now ?? Date.now;
  if (attempts <= 0) return base;
  return async (input, init) => {
    // Each attempt is given the caller's signal itself: a Request made here, or its clone, would
    // carry its abort only through a controller Node 20's fetch holds weakly (caller-signal.ts).
    const signal = callerSignalOf(input, init);
    const request = new Request(input, { ...init, signal: null });
    // With a Request, `init` holds only what is not part of one (openapi-fetch's requestInitExt).
    const extra = { ...(input instanceof Request ? init : undefined), signal };
    if (!(await repeatsAsOnce(request))) return base(request, extra);
    let unclear = false;
    const answer = (response: Response) => {
      if (unclear) afterUnclearAttempt.add(response);
      return response;
    };
    for (let retry = 0; ; retry++) {
      let response: Response;
      try {
        // A body can be read once: each send takes its own copy.
        response = await base(request.clone(), extra);
      } catch (error) {
        // A timed-out request, or one whose connection broke, may have been applied; this one is
        // safe to send again.
        const unanswered = error instanceof RequestTimeoutError || brokeOnceOpen(error);
        if (!unanswered || retry >= attempts) throw error;
        const delay = BASE_DELAY_MS * 2 ** retry;
        if (delay > maxDelayMs) throw error;
        unclear = true;
        await waitBeforeRetry(sleep, delay, signal);
        continue;
      }
      if (!RETRIED_STATUSES.has(response.status) || retry >= attempts) return answer(response);
      const delay =
        retryAfterMsOf(response.headers.get("retry-after"), now()) ?? BASE_DELAY_MS * 2 ** retry;
      if (delay > maxDelayMs) return answer(response);
      if (MAYBE_APPLIED_STATUSES.has(response.status)) unclear = true;
      await response.body?.cancel();
      await waitBeforeRetry(sleep, delay, signal);
    }
  };
}
