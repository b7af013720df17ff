import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { type AddressInfo, createServer, type Server, type Socket, connect as tcp } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import {
  MAX_RECEIVED_BYTES,
  meteredConnector,
  receivedTooMuchIn,
} from "../../shared/execution/received-bytes.js";
import { TEST_TLS_CERT, TEST_TLS_KEY } from "../support/tls-certificate.js";

/**
 * The 1 MiB a delivery reads from its connection (received-bytes.ts) over TLS: TLS 1.3 lets a
 * server send post-handshake messages without end, which OpenSSL consumes itself, so a meter of
 * the decrypted application data never saw them. A receiver that sends NewSessionTicket after
 * NewSessionTicket (`openssl s_server -num_tickets`) has each read, decrypted and parsed on the
 * worker's main thread and handed to undici's session cache; the meter counts the TCP socket's
 * bytes, so the connection is closed past 1 MiB rather than lasting to the delivery's timeout (up
 * to 900 s). A counting forwarder in front of the receiver measures what it sent.
 * A receiver with a publicly trusted certificate (any domain's) does this to a deployed worker;
 * here the client trusts the test's certificate, with the connector outboundDispatcher uses.
 */

let dir = "";
let receiver: ChildProcess | undefined;
let forwarder: Server | undefined;
let forwardPort = 0;
/** Bytes the receiver sent through the forwarder. */
let fromReceiver = 0;
const open = new Set<Socket>();

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

async function accepting(port: number): Promise<void> {
  for (let tries = 0; tries < 100; tries++) {
    const up = await new Promise<boolean>((resolve) => {
      const probe = tcp(port, "127.0.0.1");
      probe.once("connect", () => {
        probe.destroy();
        resolve(true);
      });
      probe.once("error", () => resolve(false));
    });
    if (up) return;
    await sleep(50);
  }
  throw new Error(`openssl s_server never listened on ${port}`);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "tls-tickets-"));
  writeFileSync(join(dir, "key.pem"), `${TEST_TLS_KEY}\n`);
  writeFileSync(join(dir, "cert.pem"), `${TEST_TLS_CERT}\n`);
  const port = await freePort();
  // stdin kept open: s_server reads what to send from it, and ends the connection at its end.
  receiver = spawn(
    "openssl",
    [
      ...["s_server", "-quiet", "-tls1_3", "-num_tickets", "10000000"],
      ...["-accept", String(port), "-key", join(dir, "key.pem"), "-cert", join(dir, "cert.pem")],
    ],
    { stdio: ["pipe", "ignore", "ignore"] },
  );
  await accepting(port);
  forwarder = createServer((client) => {
    const upstream = tcp(port, "127.0.0.1");
    open.add(client).add(upstream);
    for (const socket of [client, upstream]) {
      socket.on("error", () => {});
      socket.on("close", () => {
        client.destroy();
        upstream.destroy();
      });
    }
    upstream.on("data", (chunk: Buffer) => {
      fromReceiver += chunk.length;
    });
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => forwarder?.listen(0, "127.0.0.1", resolve));
  forwardPort = (forwarder.address() as AddressInfo).port;
});
afterAll(async () => {
  for (const socket of open) socket.destroy();
  await new Promise((resolve) => (forwarder ? forwarder.close(resolve) : resolve(null)));
  receiver?.kill();
  rmSync(dir, { recursive: true, force: true });
});

describe("a TLS 1.3 receiver that sends session tickets without end", () => {
  it("has its connection closed past 1 MiB, as any receiver sending more does", async () => {
    const dispatcher = new Agent({ connect: meteredConnector({ ca: TEST_TLS_CERT }) });
    try {
      const failure = await request(`https://localhost:${forwardPort}/hook`, {
        method: "POST",
        body: "{}",
        dispatcher,
        signal: AbortSignal.timeout(10_000),
      }).then(
        (response) => new Error(`answered ${response.statusCode}`),
        (error: unknown) => error,
      );
      // Closed at 1 MiB, the receiver gets a few MiB out at most (the sockets' buffers).
      expect(fromReceiver).toBeLessThan(8 * MAX_RECEIVED_BYTES);
      expect(receivedTooMuchIn(failure)?.message).toBe(
        `receiver sent more than ${MAX_RECEIVED_BYTES} bytes for one delivery; connection closed`,
      );
    } finally {
      await dispatcher.destroy();
    }
  }, 20_000);
});
