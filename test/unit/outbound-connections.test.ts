import { createServer, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { httpContext, httpHandlerWith, LOOPBACK_WORKERS } from "../support/http-handler.js";

/**
 * A worker's connections to receivers, which it shares with every tenant whose runs it delivers:
 * a receiver must not make it keep one open when it is done with it.
 */

/** A receiver that asks its connections to be kept for 10 minutes and never closes one itself. */
interface Lingering {
  readonly port: number;
  /** Each connection the receiver accepted, and whether it has been closed since. */
  readonly connections: { closed: boolean }[];
  close(): Promise<void>;
}

async function lingeringReceiver(): Promise<Lingering> {
  const connections: { closed: boolean }[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(200, { "Keep-Alive": "timeout=600" }).end("ok"));
  });
  server.keepAliveTimeout = 0;
  server.on("connection", (socket: Socket) => {
    const connection = { closed: false };
    connections.push(connection);
    socket.on("close", () => {
      connection.closed = true;
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    connections,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe("a receiver that asks for its idle connection to be kept 600 s (Keep-Alive: timeout=600)", () => {
  let receiver: Lingering;
  beforeAll(async () => {
    receiver = await lingeringReceiver();
  });
  afterAll(async () => {
    await receiver.close();
  });

  // Each such receiver (one per origin: another port, another name) held a socket, a file
  // descriptor, of the worker for 10 minutes after its delivery: a tenant with a thousand jobs
  // on a thousand ports used up a Lambda's 1,024 and every tenant's deliveries and the worker's
  // own DynamoDB and SQS calls failed (EMFILE).
  it.each(LOOPBACK_WORKERS)("%s closes it within seconds", async (_, settings, host) => {
    const before = receiver.connections.length;
    const handler = httpHandlerWith(settings);
    expect(await handler(httpContext(`http://${host}:${receiver.port}/hook`))).toEqual({
      status: 200,
    });
    const opened = receiver.connections.slice(before);
    expect(opened).toHaveLength(1);
    await vi.waitFor(() => expect(opened.every((c) => c.closed)).toBe(true), {
      timeout: 20_000,
      interval: 100,
    });
  });
});
