import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** One POST as the receiver saw it. */
export interface Delivery {
  readonly idempotencyKey: string;
  readonly jobId: string;
  readonly runId: string;
  readonly attempt: number;
  readonly body: string;
  readonly signature: string;
  readonly signatureValid: boolean;
  readonly receivedAt: number;
  /** True for the delivery that applied its key; repeats of a key are recorded but not applied. */
  readonly applied: boolean;
  readonly status: number;
}

export interface ReceiverOptions {
  /** The sandbox's webhook secret; signatures are checked with the documented algorithm. */
  readonly secret: string;
  /** How long each answer takes, so that runs are in progress long enough to be killed. */
  readonly delayMs?: () => number;
  /** Status for a delivery before it is applied (e.g. a 503 to force a retry); default 200. */
  readonly statusFor?: (delivery: { idempotencyKey: string; attempt: number }) => number;
  /** Signatures older than this are refused with 401, as a real receiver would. */
  readonly maxSkewSeconds?: number;
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
 * Verifies `X-Scheduler-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`
 * exactly as docs/api.md tells a receiver to, independently of the scheduler's signing code.
 */
export function verifySignature(
  secret: string,
  header: string,
  rawBody: string,
  nowSeconds: number,
  maxSkewSeconds = 300,
): boolean {
  const parts = new Map(
    header.split(",").map((part) => {
      const at = part.indexOf("=");
      return [part.slice(0, at).trim(), part.slice(at + 1).trim()] as const;
    }),
  );
  const t = parts.get("t");
  const v1 = parts.get("v1");
  if (t === undefined || v1 === undefined || !/^\d+$/.test(t) || !/^[0-9a-f]{64}$/.test(v1))
    return false;
  if (Math.abs(nowSeconds - Number(t)) > maxSkewSeconds) return false;
  const expected = createHmac("sha256", secret).update(`${t}.${rawBody}`).digest();
  return timingSafeEqual(expected, Buffer.from(v1, "hex"));
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * A webhook receiver as a careful service would write one: it checks the
 * signature, and applies each Idempotency-Key once however often it arrives.
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
      const signature = header("x-scheduler-signature");
      const attempt = Number(header("x-scheduler-attempt"));
      const signatureValid = verifySignature(
        options.secret,
        signature,
        body,
        Math.floor(Date.now() / 1000),
        options.maxSkewSeconds,
      );
      const delay = options.delayMs?.() ?? 0;
      if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
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
        body,
        signature,
        signatureValid,
        receivedAt: Date.now(),
        applied: applies,
        status,
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
