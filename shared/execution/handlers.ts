import { createHmac } from "node:crypto";
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { sleep } from "../clock.js";
import type { HttpTarget } from "../model.js";

/** What a job handler is given for one run. */
export interface JobContext {
  readonly jobId: string;
  readonly tenantId: string;
  readonly runId: string;
  readonly type: string;
  readonly scheduledFor: string;
  readonly attempt: number;
  /** `<jobId>@<scheduledFor>`: the same for every attempt of an occurrence. */
  readonly idempotencyKey: string;
  readonly payload: unknown;
  readonly target: HttpTarget | undefined;
  /** Fires at the job's timeout, or when another worker has taken the run over. */
  readonly signal: AbortSignal;
}

export type JobHandler = (ctx: JobContext) => Promise<unknown>;

/** A failure a handler reports on purpose; `retryable: false` sends the run to the dead letters at once. */
export class JobError extends Error {
  override readonly name = "JobError";
  readonly retryable: boolean;

  constructor(message: string, options: { retryable: boolean; cause?: unknown }) {
    super(message, { cause: options.cause });
    this.retryable = options.retryable;
  }
}

/** Any other exception is treated as retryable: a crash is more often transient than permanent. */
export function isRetryable(error: unknown): boolean {
  return error instanceof JobError ? error.retryable : true;
}

export type HandlerRegistry = ReadonlyMap<string, JobHandler>;

export interface WebhookSettings {
  /** The per-deployment secret the `X-Scheduler-Signature` HMAC is keyed with. */
  readonly secret: string;
  /** The sandbox and tests post to loopback; a deployed stack refuses private addresses. */
  readonly allowPrivateTargets: boolean;
}

export const SIGNATURE_HEADER = "X-Scheduler-Signature";

/**
 * `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`: the timestamp is
 * signed with the body so a receiver can refuse replays of old deliveries.
 */
export function signWebhook(secret: string, body: string, timestampSeconds: number): string {
  const mac = createHmac("sha256", secret).update(`${timestampSeconds}.${body}`).digest("hex");
  return `t=${timestampSeconds},v1=${mac}`;
}

export function builtInHandlers(
  webhook: WebhookSettings,
  now: () => Date,
): Map<string, JobHandler> {
  return new Map<string, JobHandler>([
    ["noop", async () => undefined],
    ["sleep", sleepHandler],
    ["fail", failHandler],
    ["http", httpHandler(webhook, now)],
  ]);
}

export const BUILT_IN_TYPES = ["http", "noop", "sleep", "fail"] as const;

async function sleepHandler(ctx: JobContext): Promise<unknown> {
  const ms = numberField(ctx.payload, "ms") ?? 0;
  await sleep(ms, ctx.signal);
  if (ctx.signal.aborted)
    throw new JobError(`sleep interrupted: ${String(ctx.signal.reason)}`, { retryable: true });
  return { sleptMs: ms };
}

/** Fails the first `times` attempts of each occurrence, then succeeds; a test and demo type. */
async function failHandler(ctx: JobContext): Promise<unknown> {
  const times = numberField(ctx.payload, "times") ?? Number.POSITIVE_INFINITY;
  const payload = ctx.payload as { retryable?: unknown } | null;
  const retryable = payload?.retryable !== false;
  if (ctx.attempt <= times) {
    throw new JobError(`fail: attempt ${ctx.attempt} of ${times} planned failures`, { retryable });
  }
  return { succeededOnAttempt: ctx.attempt };
}

function numberField(payload: unknown, name: string): number | undefined {
  if (typeof payload !== "object" || payload === null) return undefined;
  const value = (payload as Record<string, unknown>)[name];
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

const RETRYABLE_STATUSES = new Set([408, 429]);

function httpHandler(webhook: WebhookSettings, now: () => Date): JobHandler {
  return async (ctx) => {
    const target = ctx.target;
    if (!target) throw new JobError("http job has no target", { retryable: false });
    const url = new URL(target.url);
    if (!webhook.allowPrivateTargets) await refusePrivateTarget(url);
    const body = JSON.stringify(ctx.payload ?? null);
    const timestamp = Math.floor(now().getTime() / 1000);
    const timeout = AbortSignal.timeout((target.timeoutSeconds ?? 30) * 1000);
    let response: Response;
    try {
      response = await fetch(url, {
        method: "POST",
        body,
        redirect: "manual",
        signal: AbortSignal.any([ctx.signal, timeout]),
        headers: {
          ...target.headers,
          "Content-Type": "application/json",
          "Idempotency-Key": ctx.idempotencyKey,
          "X-Scheduler-Attempt": String(ctx.attempt),
          "X-Scheduler-Job-Id": ctx.jobId,
          "X-Scheduler-Run-Id": ctx.runId,
          [SIGNATURE_HEADER]: signWebhook(webhook.secret, body, timestamp),
        },
      });
    } catch (error) {
      const why = timeout.aborted
        ? `timed out after ${target.timeoutSeconds ?? 30} s`
        : describe(error);
      throw new JobError(`POST ${url.origin}${url.pathname}: ${why}`, {
        retryable: true,
        cause: error,
      });
    }
    // Drain the body so the connection is reused; a receiver's answer is not stored.
    const text = await response.text().catch(() => "");
    if (response.ok) return { status: response.status };
    const retryable = response.status >= 500 || RETRYABLE_STATUSES.has(response.status);
    throw new JobError(
      `POST ${url.origin}${url.pathname}: HTTP ${response.status} ${text.slice(0, 200)}`.trim(),
      {
        retryable,
      },
    );
  };
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
    return `${error.message}${cause}`;
  }
  return String(error);
}

async function refusePrivateTarget(url: URL): Promise<void> {
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const addresses = isIP(host) ? [host] : (await lookup(host, { all: true })).map((a) => a.address);
  const blocked = addresses.find(isPrivateAddress);
  if (blocked !== undefined) {
    throw new JobError(
      `target ${url.hostname} resolves to a private address (${blocked}); refused`,
      {
        retryable: false,
      },
    );
  }
}

/** Loopback, private, link-local, unique-local and unspecified addresses, IPv4 and IPv6. */
export function isPrivateAddress(address: string): boolean {
  const v4 = address.startsWith("::ffff:") ? address.slice(7) : address;
  if (isIP(v4) === 4) {
    const [a = 0, b = 0] = v4.split(".").map(Number);
    return (
      a === 0 ||
      a === 10 ||
      a === 127 ||
      (a === 100 && b >= 64 && b <= 127) ||
      (a === 169 && b === 254) ||
      (a === 172 && b >= 16 && b <= 31) ||
      (a === 192 && b === 168)
    );
  }
  const v6 = address.toLowerCase();
  return (
    v6 === "::1" ||
    v6 === "::" ||
    v6.startsWith("fc") ||
    v6.startsWith("fd") ||
    v6.startsWith("fe80")
  );
}
