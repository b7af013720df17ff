import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";
import { sleep } from "../../shared/clock.js";

/** One POST as the receiver saw it. */
export interface Delivery {
  readonly idempotencyKey: string;
  readonly jobId: string;
  readonly runId: string;
  readonly attempt: number;
  /** The request path, e.g. /hook/a. */
  readonly path: string;
  readonly body: string;
  /** The Standard Webhooks headers as received: webhook-id, webhook-timestamp, webhook-signature. */
  readonly webhookHeaders: Readonly<
    Record<"webhook-id" | "webhook-timestamp" | "webhook-signature", string>
  >;
  readonly signatureValid: boolean;
  readonly receivedAt: number;
  /** True for the delivery that applied its key; repeats of a key are recorded but not applied. */
  readonly applied: boolean;
  readonly status: number;
  /** An async (long-job) delivery's run token and where to use it; absent on other deliveries. */
  readonly handOff?: {
    readonly token: string;
    readonly heartbeatUrl: string;
    readonly completeUrl: string;
  };
}

export interface ReceiverOptions {
  /**
   * The tenant's webhook secret (`whsec_…`, from GET /webhook-secret), or a function giving the
   * secret for a request path (several tenants' endpoints on one receiver; or a receiver started
   * before the secret is known).
   */
  readonly secret: string | ((path: string) => string);
  /** How long each answer takes, so that runs are in progress long enough to be killed (or cancelled). */
  readonly delayMs?: (delivery: { idempotencyKey: string }) => number;
  /** Status for a delivery before it is applied (e.g. a 503 to force a retry, a 202 to take an async run over); default 200. */
  readonly statusFor?: (delivery: { idempotencyKey: string; attempt: number }) => number;
  /** Port on 127.0.0.1; default 0, a free one. A fixed one can be forwarded to from outside. */
  readonly port?: number;
}

export interface Receiver {
  readonly url: string;
  readonly deliveries: Delivery[];
  /** Idempotency-Key → how many times it was applied (a correct receiver keeps this at 1). */
  readonly applied: Map<string, number>;
  close(): Promise<void>;
}

/**
 * Verifies a delivery as docs/api.md tells a receiver to, with the Standard
 * Webhooks library (independently of the scheduler's signing code): the
 * signature over `<webhook-id>.<webhook-timestamp>.<body>` by `secret`, a
 * timestamp within five minutes, and the `webhook-id` it signs equal to the
 * Idempotency-Key the receiver deduplicates on.
 */
export function verifyDelivery(
  secret: string,
  delivery: Pick<Delivery, "body" | "webhookHeaders" | "idempotencyKey">,
): boolean {
  if (delivery.webhookHeaders["webhook-id"] !== delivery.idempotencyKey) return false;
  try {
    new Webhook(secret).verify(delivery.body, delivery.webhookHeaders);
    return true;
  } catch {
    return false;
  }
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * A webhook receiver as a careful service would write one: it checks the
 * signature (refusing with 401 what does not verify), and applies each
 * Idempotency-Key once however often it arrives.
 */
export async function startReceiver(options: ReceiverOptions): Promise<Receiver> {
  const deliveries: Delivery[] = [];
  const applied = new Map<string, number>();
  const server: Server = createServer((request, response) => {
    void (async () => {
      const body = await readBody(request);
      const header = (name: string) => {
        const value = request.headers[name];
        return Array.isArray(value) ? (value[0] ?? "") : (value ?? "");
      };
      const idempotencyKey = header("idempotency-key");
      const webhookHeaders = {
        "webhook-id": header("webhook-id"),
        "webhook-timestamp": header("webhook-timestamp"),
        "webhook-signature": header("webhook-signature"),
      };
      const attempt = Number(header("x-scheduler-attempt"));
      const path = request.url ?? "/";
      const secret = typeof options.secret === "string" ? options.secret : options.secret(path);
      const signatureValid = verifyDelivery(secret, { body, webhookHeaders, idempotencyKey });
      const delay = options.delayMs?.({ idempotencyKey }) ?? 0;
      if (delay > 0) await sleep(delay);
      let status = signatureValid ? 200 : 401;
      if (signatureValid && !applied.has(idempotencyKey))
        status = options.statusFor?.({ idempotencyKey, attempt }) ?? 200;
      // Applying is the side effect a duplicate must not repeat; a refused delivery applies nothing.
      const applies = status === 200 && !applied.has(idempotencyKey);
      if (applies) applied.set(idempotencyKey, 1);
      deliveries.push({
        idempotencyKey,
        jobId: header("x-scheduler-job-id"),
        runId: header("x-scheduler-run-id"),
        attempt,
        path,
        body,
        webhookHeaders,
        signatureValid,
        receivedAt: Date.now(),
        applied: applies,
        status,
        ...(header("x-scheduler-run-token") !== ""
          ? {
              handOff: {
                token: header("x-scheduler-run-token"),
                heartbeatUrl: header("x-scheduler-heartbeat-url"),
                completeUrl: header("x-scheduler-complete-url"),
              },
            }
          : {}),
      });
      response.writeHead(status, { "Content-Type": "application/json" });
      response.end(JSON.stringify({ applied: applies }));
    })().catch((error: unknown) => {
      response.writeHead(500);
      response.end(String(error));
    });
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    deliveries,
    applied,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
