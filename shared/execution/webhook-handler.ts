import { fetch, type Response } from "undici";
import { stringifyExact } from "../exact-json.js";
import { textHead } from "../storage/stored-text.js";
import { type TimeLimit, timeLimit } from "../time-limit.js";
import type { WebhookSigningSecrets } from "../webhooks/secrets.js";
import { webhookSignature } from "../webhooks/secrets.js";
import { addressesAs } from "./address-text.js";
import { type JobContext, JobError, type JobHandler, RunHandedOver } from "./job-contract.js";
import {
  abortedBy,
  literalTargetRefusal,
  type OutboundOptions,
  outboundDispatcher,
  RefusedTargetError,
  refusalIn,
} from "./outbound.js";
import { receivedTooMuchIn } from "./received-bytes.js";
import {
  CONNECTION_HEADERS,
  DNS_NAME_RULE,
  FETCH_BLOCKED_PORTS,
  isResolvableHost,
} from "./target-reach.js";

/** Where deliveries may connect (OutboundOptions) and what signs them. */
export interface WebhookSettings extends OutboundOptions {
  /** The secrets a tenant's deliveries are signed with (cachedSigningSecrets on a worker). */
  readonly signingSecrets: WebhookSigningSecrets;
  /**
   * The API's base URL as targets reach it (`API_URL`): async targets are told to heartbeat and
   * complete their runs there. Without it, an async job's runs fail without a retry.
   */
  readonly apiUrl?: string;
  /** How long a heartbeat extends an async run's lease, told to its target (the deployment's lease). */
  readonly leaseSeconds?: number;
  /** How deliveries are sent: undici's fetch, unless a test passes one (one that loses its abort). */
  readonly fetch?: typeof fetch;
}

/** The headers that hand an async target its run: the token and where to use it. */
const ASYNC_HEADERS = {
  token: "X-Scheduler-Run-Token",
  heartbeatUrl: "X-Scheduler-Heartbeat-Url",
  completeUrl: "X-Scheduler-Complete-Url",
  leaseSeconds: "X-Scheduler-Lease-Seconds",
} as const;

/**
 * Standard Webhooks headers: `webhook-id` is the occurrence key (the same
 * value as Idempotency-Key, so a delivery replayed under another key fails
 * verification), `webhook-timestamp` unix seconds, `webhook-signature` one
 * `v1,<base64 HMAC>` per valid secret.
 */
const WEBHOOK_HEADERS = {
  id: "webhook-id",
  timestamp: "webhook-timestamp",
  signature: "webhook-signature",
} as const;

/** Header names the scheduler sets on every delivery; a target's own headers never replace them. */
function isSchedulerHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return (
    lower === "content-type" ||
    lower === "idempotency-key" ||
    lower.startsWith("x-scheduler-") ||
    lower.startsWith("webhook-")
  );
}

const RETRYABLE_STATUSES = new Set([408, 429]);
/** The answers whose `Retry-After` says when to come back (RFC 9110 10.2.3, RFC 6585 4). */
const RETRY_AFTER_STATUSES = new Set([429, 503]);

/**
 * How long a 429's or 503's `Retry-After` asks the sender to wait, in milliseconds: its seconds,
 * or the time to its date; undefined when absent, unreadable or already past.
 */
export function retryAfterMs(value: string | null, now: Date): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  const waitMs = /^\d+$/.test(text)
    ? Number(text) * 1000
    : /[a-z]/i.test(text)
      ? Date.parse(text) - now.getTime()
      : Number.NaN;
  if (!(waitMs > 0)) return undefined;
  // However far out (the retry waits no longer than its job's maxDelaySeconds), a whole number.
  return Math.min(Math.ceil(waitMs), Number.MAX_SAFE_INTEGER);
}

/** The `http` job type: POSTs the payload to the target, signed; connects only where allowed. */
export function webhookHandler(webhook: WebhookSettings, now: () => Date): JobHandler<"http"> {
  const dispatcher = outboundDispatcher(webhook);
  const send = webhook.fetch ?? fetch;
  return async (ctx) => {
    const target = ctx.target;
    if (!target) throw new JobError("http job has no target", { retryable: false });
    const url = targetUrl(target.url);
    const literalRefusal = webhook.allowPrivateTargets ? null : literalTargetRefusal(url);
    if (literalRefusal) throw refusedJobError(literalRefusal);
    const unreachable = unreachableTarget(url);
    if (unreachable) throw refusedJobError(unreachable);
    const unsendable = unsendableHeader(target.headers);
    if (unsendable) throw unsendable;
    // The payload's numbers as the caller wrote them (a 64-bit id past 2^53 too).
    const body = stringifyExact(ctx.payload ?? null);
    const timestamp = Math.floor(now().getTime() / 1000);
    const signature = webhookSignature(
      await webhook.signingSecrets(ctx.tenantId),
      ctx.idempotencyKey,
      timestamp,
      body,
    );
    const ownHeaders = Object.entries(target.headers ?? {}).filter(
      ([name]) => !isSchedulerHeader(name),
    );
    const handOver = target.mode === "async" ? asyncHeaders(webhook, ctx) : {};
    const timeoutSeconds = target.timeoutSeconds ?? 30;
    // The limit ends the wait itself, as well as aborting the request: Node 20's fetch can lose an
    // abort (see TimeLimit), and a delivery then waited past its timeout, and past the run's
    // cancel or lost lease, until the worker's own time limit.
    const limit = timeLimit(timeoutSeconds * 1000, ctx.signal);
    let response: Response;
    let text: string;
    try {
      const sent = send(url, {
        method: "POST",
        body,
        // A redirect is the receiver's answer, not followed: its Location was never vetted.
        redirect: "manual",
        // The limit aborts the request at its connection too, should fetch lose the signal's abort.
        dispatcher: abortedBy(dispatcher, limit.signal),
        signal: limit.signal,
        headers: {
          ...Object.fromEntries(ownHeaders),
          "Content-Type": "application/json",
          "Idempotency-Key": ctx.idempotencyKey,
          [WEBHOOK_HEADERS.id]: ctx.idempotencyKey,
          [WEBHOOK_HEADERS.timestamp]: String(timestamp),
          [WEBHOOK_HEADERS.signature]: signature,
          "X-Scheduler-Attempt": String(ctx.attempt),
          "X-Scheduler-Job-Id": ctx.jobId,
          "X-Scheduler-Run-Id": ctx.runId,
          ...handOver,
        },
      });
      try {
        response = await limit.within(sent);
      } catch (error) {
        // An answer that comes after all is not read: its connection is closed.
        if (limit.signal.aborted)
          void sent.then(
            (late) => late.body?.cancel(),
            () => undefined,
          );
        const refusal = refusalIn(error);
        if (refusal) throw refusedJobError(refusal);
        const tooMuch = receivedTooMuchIn(error);
        const why = tooMuch
          ? tooMuch.message
          : limit.expired
            ? `timed out after ${timeoutSeconds} s`
            : describe(error, url.hostname);
        throw new JobError(`POST ${url.origin}${url.pathname}: ${why}`, {
          retryable: true,
          cause: error,
        });
      }
      // A receiver's answer is not stored: only its start is read (see answerStart).
      text = await answerStart(response, limit).catch((error: unknown) => {
        // The receiver sent more than a delivery may read (its body's framing, not its body).
        throw new JobError(`POST ${url.origin}${url.pathname}: ${describe(error, url.hostname)}`, {
          retryable: true,
          cause: error,
        });
      });
    } finally {
      limit.end();
    }
    // An async target that answers 202 has taken the run over; any other 2xx is its result now.
    if (response.status === 202 && target.mode === "async") return new RunHandedOver();
    if (response.ok) return { status: response.status };
    // 5xx is 500 to 599: a receiver's parser takes any three digits, and a 600 to 999 is no HTTP
    // status but a receiver's mistake a retry repeats, not retried as any other answer is not.
    const retryable =
      (response.status >= 500 && response.status <= 599) || RETRYABLE_STATUSES.has(response.status);
    const waitMs = RETRY_AFTER_STATUSES.has(response.status)
      ? retryAfterMs(response.headers.get("retry-after"), now())
      : undefined;
    throw new JobError(
      `POST ${url.origin}${url.pathname}: HTTP ${response.status} ${textHead(text, 200)}`.trim(),
      { retryable, ...(waitMs === undefined ? {} : { retryAfterMs: waitMs }) },
    );
  };
}

/** How much of a receiver's answer a delivery reads; a failure's message keeps its first 200 characters. */
const MAX_ANSWER_BYTES = 64 * 1024;

/**
 * The start of the receiver's answer, at most MAX_ANSWER_BYTES. A shorter answer is read to its
 * end, so the connection is reused; a longer one is cut off there and its connection closed, so a
 * receiver cannot make the worker, which runs other tenants' runs beside this one, hold an answer
 * of any size. An answer that fails while it is read is what was read of it.
 */
async function answerStart(response: Response, limit: TimeLimit): Promise<string> {
  if (response.body === null) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size <= MAX_ANSWER_BYTES) {
      const { done, value } = await limit.within(reader.read());
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
    if (size > MAX_ANSWER_BYTES) await reader.cancel();
  } catch (error) {
    // A receiver that sent more than a delivery reads failed it, whatever its status said.
    const tooMuch = receivedTooMuchIn(error);
    if (tooMuch) throw tooMuch;
    // Aborted (the run's signal or timeout) or reset by the receiver: keep what was read. A read
    // the limit gave up on is cancelled, which closes the connection should the abort be lost.
    if (limit.signal.aborted) void reader.cancel().catch(() => undefined);
  }
  return new TextDecoder().decode(Buffer.concat(chunks).subarray(0, MAX_ANSWER_BYTES));
}

function asyncHeaders(webhook: WebhookSettings, ctx: JobContext<"http">): Record<string, string> {
  if (webhook.apiUrl === undefined)
    throw new JobError(
      "async mode needs the scheduler API's URL (API_URL) to tell the target where to heartbeat",
      { retryable: false },
    );
  // The worker makes the token of every async delivery: a handler called without one has nothing
  // the API would take from the target.
  if (ctx.runToken === undefined)
    throw new JobError("async mode needs a run token, which the worker makes for the delivery", {
      retryable: false,
    });
  const base = webhook.apiUrl.replace(/\/+$/, "");
  const runPath = `${base}/runs/${encodeURIComponent(ctx.runId)}`;
  return {
    [ASYNC_HEADERS.token]: ctx.runToken,
    [ASYNC_HEADERS.heartbeatUrl]: `${runPath}/heartbeat`,
    [ASYNC_HEADERS.completeUrl]: `${runPath}/complete`,
    ...(webhook.leaseSeconds !== undefined
      ? { [ASYNC_HEADERS.leaseSeconds]: String(webhook.leaseSeconds) }
      : {}),
  };
}

/**
 * A failed request's text for the run's error, which the tenant reads: the error's message and its
 * cause's, every IP address in them told as the URL's host. Node names the address a connection
 * failed at (`connect ECONNREFUSED 203.0.113.7:443`) and undici the ones its connect timeout
 * attempted: what the worker's resolver answered, which may be for a name only the worker can
 * resolve (see RefusedTargetError). A name's addresses, each refusing the connection, fail it as
 * one AggregateError, which has no message of its own: its errors' say what happened.
 */
function describe(error: unknown, host: string): string {
  if (!(error instanceof Error)) return addressesAs(host, String(error));
  const { cause } = error;
  const text = addressesAs(host, error.message);
  if (!(cause instanceof Error)) return text;
  const causes =
    cause instanceof AggregateError && cause.message === ""
      ? cause.errors.map((each: unknown) => (each instanceof Error ? each.message : String(each)))
      : [cause.message];
  // Told by the host, the addresses' failures are often one and the same.
  return `${text}: ${[...new Set(causes.map((each) => addressesAs(host, each)))].join("; ")}`;
}

/**
 * The target's URL, which the API refuses unless it parses: one stored otherwise (before the API
 * checked it so, or by another path) fails the run without a retry, saying so. Left to `new URL`,
 * its TypeError was a failure the handler did not foresee, and the tenant read only its name.
 */
function targetUrl(text: string): URL {
  if (URL.canParse(text)) return new URL(text);
  throw new JobError(`the target's URL "${textHead(text, 200)}" is not a valid URL`, {
    retryable: false,
  });
}

/**
 * A target stored before the API refused it that no delivery can reach (./target-reach.ts): every
 * attempt would fail alike, the resolver refusing its name or fetch its port before connecting.
 */
function unreachableTarget(url: URL): RefusedTargetError | null {
  if (!isResolvableHost(url.hostname))
    return new RefusedTargetError(url.hostname, `is no DNS name (${DNS_NAME_RULE})`);
  if (FETCH_BLOCKED_PORTS.has(url.port))
    return new RefusedTargetError(
      url.hostname,
      `names port ${url.port}, which fetch blocks (the Fetch standard's bad ports)`,
    );
  return null;
}

/**
 * A connection header among the target's (./target-reach.ts), which the API refuses but a job
 * stored before it did (Expect, Keep-Alive, Upgrade) can have: fetch refuses to send it on every
 * attempt alike, so the run is dead at once, saying so, and nothing is sent.
 */
function unsendableHeader(headers: Readonly<Record<string, string>> | undefined): JobError | null {
  const name = Object.keys(headers ?? {}).find((n) => CONNECTION_HEADERS.has(n.toLowerCase()));
  if (name === undefined) return null;
  return new JobError(
    `the target's header ${name} is a connection header, which a delivery cannot send; refused`,
    { retryable: false },
  );
}

/** A refused target is refused every time: the run goes to the dead letters without a retry. */
function refusedJobError(refusal: RefusedTargetError): JobError {
  return new JobError(refusal.message, { retryable: false, cause: refusal });
}
