import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll } from "vitest";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import type { JobContext, JobHandler } from "../../shared/execution/job-contract.js";
import type { Resolver } from "../../shared/execution/outbound.js";
import type { WebhookSettings } from "../../shared/execution/webhook-handler.js";

/** The signing secret the `http` handler's tests sign with. */
export const TEST_SIGNING_SECRET = "whsec_c2VjcmV0LWZvci10aGUtb3V0Ym91bmQtdGVzdHM=";

/** The built-in `http` handler, as a deployed worker has it unless `settings` say otherwise. */
export function httpHandlerWith(settings: Partial<WebhookSettings> = {}): JobHandler {
  const handler = builtInHandlers(
    {
      signingSecrets: async () => [TEST_SIGNING_SECRET],
      allowPrivateTargets: false,
      ...settings,
    },
    () => new Date(),
  ).get("http");
  if (!handler) throw new Error("no http handler");
  return handler;
}

/** A run of job `job-1` delivering to `url`. */
export function httpContext(
  url: string,
  options: { readonly timeoutSeconds?: number; readonly payload?: unknown } = {},
): JobContext {
  return {
    jobId: "job-1",
    tenantId: "tenant-a",
    runId: "run-1",
    type: "http",
    scheduledFor: "2026-01-01T00:00:00.000Z",
    attempt: 1,
    idempotencyKey: "job-1@2026-01-01T00:00:00.000Z",
    payload: options.payload ?? {},
    target: { url, timeoutSeconds: options.timeoutSeconds ?? 30 },
    signal: new AbortController().signal,
    fence: 1,
  };
}

const loopback: Resolver = async () => [{ address: "127.0.0.1", family: 4 }];

/**
 * The two ways a worker delivers, each with the host it reaches a loopback receiver by: a
 * deployed worker's settings, with 127.0.0.1 standing in for a receiver's public address, and
 * the sandbox's, private targets allowed.
 */
export const LOOPBACK_WORKERS = [
  [
    "a deployed worker",
    {
      resolve: loopback,
      addressRefusal: (address: string) => (address === "127.0.0.1" ? null : "private"),
    },
    "receiver.test",
  ],
  ["the sandbox (private targets allowed)", { allowPrivateTargets: true }, "127.0.0.1"],
] as const;

/**
 * A receiver for the describe block it is called in that answers 200 to every request and counts
 * them: what tells a delivery refused before sending from one sent.
 */
export function useCountingReceiver(): {
  readonly port: () => number;
  readonly hits: () => number;
} {
  let server: Server | undefined;
  let hits = 0;
  beforeAll(async () => {
    const started = createServer((_req, res) => {
      hits++;
      res.writeHead(200).end("ok");
    });
    server = started;
    await new Promise<void>((resolve) => started.listen(0, "127.0.0.1", resolve));
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  });
  return {
    port: () => {
      if (server === undefined) throw new Error("the counting receiver is not started");
      return (server.address() as AddressInfo).port;
    },
    hits: () => hits,
  };
}
