import { fetch, type Response } from "undici";
import { sleep } from "../clock.js";
import type { HttpTarget } from "../model.js";
import { type WebhookSigningSecrets, webhookSignature } from "../webhooks/secrets.js";
import {
  literalTargetRefusal,
  type OutboundOptions,
  outboundDispatcher,
  type RefusedTargetError,
  refusalIn,
} from "./outbound.js";

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

/** Where deliveries may connect (OutboundOptions) and what signs them. */
export interface WebhookSettings extends OutboundOptions {
  /** The secrets a tenant's deliveries are signed with (cachedSigningSecrets on a worker). */
  readonly signingSecrets: WebhookSigningSecrets;
}

/**
 * Standard Webhooks headers: `webhook-id` is the occurrence key (the same
 * value as Idempotency-Key, so a delivery replayed under another key fails
 * verification), `webhook-timestamp` unix seconds, `webhook-signature` one
 * `v1,<base64 HMAC>` per valid secret.
 */
export const WEBHOOK_HEADERS = {
  id: "webhook-id",
  timestamp: "webhook-timestamp",
  signature: "webhook-signature",
} as const;

/** Header names the scheduler sets on every delivery; a target's own headers never replace them. */
export function isSchedulerHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return (
    lower === "content-type" ||
    lower === "idempotency-key" ||
    lower.startsWith("x-scheduler-") ||
    lower.startsWith("webhook-")
  );
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
  const dispatcher = outboundDispatcher(webhook);
  return async (ctx) => {
    const target = ctx.target;
    if (!target) throw new JobError("http job has no target", { retryable: false });
    const url = new URL(target.url);
    const literalRefusal = webhook.allowPrivateTargets ? null : literalTargetRefusal(url);
    if (literalRefusal) throw refusedJobError(literalRefusal);
    const body = JSON.stringify(ctx.payload ?? null);
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
    const timeout = AbortSignal.timeout((target.timeoutSeconds ?? 30) * 1000);
    let response: Response;
    try {
      response = await fetch(url, {
        method: "POST",
        body,
        // A redirect is the receiver's answer, not followed: its Location was never vetted.
        redirect: "manual",
        dispatcher,
        signal: AbortSignal.any([ctx.signal, timeout]),
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
        },
      });
    } catch (error) {
      const refusal = refusalIn(error);
      if (refusal) throw refusedJobError(refusal);
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

/** A refused target is refused every time: the run goes to the dead letters without a retry. */
function refusedJobError(refusal: RefusedTargetError): JobError {
  return new JobError(refusal.message, { retryable: false, cause: refusal });
}
