import { createServer as createHttpServer } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import { createServer as createTlsServer } from "node:tls";
import { Agent, request } from "undici";
import { afterEach, describe, expect, it, vi } from "vitest";
import { isRetryable, JobError } from "../../shared/execution/job-contract.js";
import {
  MAX_RECEIVED_BYTES,
  meteredConnector,
  receivedTooMuchIn,
} from "../../shared/execution/received-bytes.js";
import { httpContext, httpHandlerWith, LOOPBACK_WORKERS } from "../support/http-handler.js";
import { rejection } from "../support/rejection.js";
import { TEST_TLS_CERT, TEST_TLS_KEY } from "../support/tls-certificate.js";

/**
 * What a receiver can make a worker read for one delivery, whatever the form: undici's parser
 * bounds a head (16 KiB) and the handler reads 64 KiB of a body, but neither sees chunk
 * extensions or interim (1xx) answers, which a receiver can send without end.
 */

/** A raw TCP receiver: each connection is answered `head`, then `filler` for as long as it is open. */
interface Flooding {
  readonly port: number;
  /** Per connection: bytes written, and whether the worker closed it. */
  readonly connections: { written: number; closed: boolean }[];
  close(): Promise<void>;
}

async function floodingReceiver(head: string, filler: Buffer): Promise<Flooding> {
  const connections: { written: number; closed: boolean }[] = [];
  const open = new Set<Socket>();
  const server: Server = createServer((socket: Socket) => {
    const connection = { written: 0, closed: false };
    connections.push(connection);
    open.add(socket);
    // The worker closing the connection mid-write resets it: that is what is tested, no failure.
    socket.on("error", () => {});
    socket.on("close", () => {
      connection.closed = true;
      open.delete(socket);
    });
    // Answer once the request has come in; then write what the worker takes, no more.
    socket.once("data", () => {
      socket.write(head);
      const more = () => {
        while (!socket.destroyed) {
          connection.written += filler.length;
          if (!socket.write(filler)) return void socket.once("drain", more);
        }
      };
      more();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    connections,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of open) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

const FLOODS = [
  [
    "a chunk-size line whose extension never ends",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=",
    Buffer.alloc(16 * 1024, "a"),
  ],
  [
    "interim 103 answers without end",
    "",
    Buffer.from("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n".repeat(256)),
  ],
] as const;

describe.each(LOOPBACK_WORKERS)("%s, delivering to a receiver that floods", (_, settings, host) => {
  let receiver: Flooding | undefined;
  afterEach(async () => {
    await receiver?.close();
  });

  // Before, either ran until the target's timeout (up to 900 s), the worker's core parsing what
  // came in (3.4 GiB in 5 s locally).
  it.each(FLOODS)(
    "%s fails the delivery past 1 MiB, retried, its connection closed",
    async (__, head, filler) => {
      receiver = await floodingReceiver(head, filler);
      const handler = httpHandlerWith(settings);
      const error = await rejection(
        handler(httpContext(`http://${host}:${receiver.port}/hook`, { timeoutSeconds: 20 })),
        JobError,
      );
      expect(error.message).toBe(
        `POST http://${host}:${receiver.port}/hook: receiver sent more than ${MAX_RECEIVED_BYTES} bytes for one delivery; connection closed`,
      );
      expect(isRetryable(error)).toBe(true);
      const connections = receiver.connections;
      expect(connections).toHaveLength(1);
      await vi.waitFor(() => expect(connections.every((c) => c.closed)).toBe(true));
      // What the receiver got written: what the worker read, and what the sockets' buffers held.
      for (const c of connections) expect(c.written).toBeLessThan(16 * MAX_RECEIVED_BYTES);
    },
  );
});

describe("a receiver's kept-alive connection", () => {
  it("carries many deliveries whose answers add up to more than 1 MiB", async () => {
    // 60 KiB answers, each read whole (under the 64 KiB the handler reads), so the connection is
    // kept for the next: 40 of them are 2.3 MiB, over the one or two connections undici keeps for the origin, each
    // delivery's under the bound.
    const answer = "x".repeat(60 * 1024);
    const answered = new Map<Socket, number>();
    const server = createHttpServer((req, res) => {
      answered.set(req.socket, (answered.get(req.socket) ?? 0) + 1);
      req.resume();
      req.on("end", () => res.writeHead(200).end(answer));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const handler = httpHandlerWith({ allowPrivateTargets: true });
      for (let i = 0; i < 40; i++)
        expect(await handler(httpContext(`http://127.0.0.1:${port}/hook`))).toEqual({
          status: 200,
        });
      const most = Math.max(...answered.values());
      expect(most * answer.length).toBeGreaterThan(MAX_RECEIVED_BYTES);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe("a TLS connection", () => {
  it("carries many deliveries whose answers add up to more than 1 MiB, counting each from its request", async () => {
    // As over plain HTTP: the count over TLS starts again when undici writes a request through the
    // TLS socket, though what is counted is the TCP socket's bytes.
    const answer = "x".repeat(60 * 1024);
    const answered = new Map<Socket, number>();
    const server = createHttpsServer({ key: TEST_TLS_KEY, cert: TEST_TLS_CERT }, (req, res) => {
      answered.set(req.socket, (answered.get(req.socket) ?? 0) + 1);
      req.resume();
      req.on("end", () => res.writeHead(200).end(answer));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    const dispatcher = new Agent({ connect: meteredConnector({ ca: TEST_TLS_CERT }) });
    try {
      for (let i = 0; i < 40; i++) {
        const response = await request(`https://localhost:${port}/hook`, {
          method: "POST",
          body: "{}",
          dispatcher,
        });
        expect((await response.body.text()).length).toBe(answer.length);
      }
      const most = Math.max(...answered.values());
      expect(most * answer.length).toBeGreaterThan(MAX_RECEIVED_BYTES);
    } finally {
      await dispatcher.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it("is metered on what it receives: endless chunk extensions over https close it past 1 MiB", async () => {
    const state = { written: 0, closed: false };
    const server = createTlsServer({ key: TEST_TLS_KEY, cert: TEST_TLS_CERT }, (socket) => {
      socket.on("error", () => {});
      socket.on("close", () => {
        state.closed = true;
      });
      socket.once("data", () => {
        socket.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=");
        const filler = Buffer.alloc(16 * 1024, "a");
        const more = () => {
          while (!socket.destroyed) {
            state.written += filler.length;
            if (!socket.write(filler)) return void socket.once("drain", more);
          }
        };
        more();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    // The connector outboundDispatcher uses, trusting the test's certificate.
    const dispatcher = new Agent({ connect: meteredConnector({ ca: TEST_TLS_CERT }) });
    try {
      const failure = await request(`https://localhost:${port}/hook`, {
        method: "POST",
        body: "{}",
        dispatcher,
      })
        .then((response) => response.body.text())
        .then(
          (text) => new Error(`read whole: ${text.length} characters`),
          (error: unknown) => error,
        );
      expect(receivedTooMuchIn(failure)?.message).toBe(
        `receiver sent more than ${MAX_RECEIVED_BYTES} bytes for one delivery; connection closed`,
      );
      await vi.waitFor(() => expect(state.closed).toBe(true));
      expect(state.written).toBeLessThan(16 * MAX_RECEIVED_BYTES);
    } finally {
      await dispatcher.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
