import { fetch, type Response } from "undici";
import type { WebhookSigningSecrets } from "../webhooks/secrets.js";
import { webhookSignature } from "../webhooks/secrets.js";
import { JobError, type JobHandler } from "./job-contract.js";
import {
  literalTargetRefusal,
  type OutboundOptions,
  outboundDispatcher,
  type RefusedTargetError,
  refusalIn,
} from "./outbound.js";

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

/** The `http` job type: POSTs the payload to the target, signed; connects only where allowed. */
export function webhookHandler(webhook: WebhookSettings, now: () => Date): JobHandler<"http"> {
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
