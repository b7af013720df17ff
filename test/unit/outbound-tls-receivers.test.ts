import type { AddressInfo } from "node:net";
import { createServer as createTlsServer, type TLSSocket } from "node:tls";
import { Agent, request } from "undici";
import { describe, expect, it } from "vitest";
import { JobError } from "../../shared/execution/job-contract.js";
import { DELIVERY_TLS_OPTIONS } from "../../shared/execution/outbound.js";
import { meteredConnector, receivedTooMuchIn } from "../../shared/execution/received-bytes.js";
import { httpContext, httpHandlerWith, LOOPBACK_WORKERS } from "../support/http-handler.js";
import { rejection } from "../support/rejection.js";
import { TEST_TLS_CERT, TEST_TLS_KEY } from "../support/tls-certificate.js";

/**
 * What a receiver can make of the delivery's own TCP socket under TLS (received-bytes.ts
 * meteredConnector) and of its TLS options (outbound.ts DELIVERY_TLS_OPTIONS): the port it
 * connects to, renegotiation, and the certificates it takes.
 */

/** How a POST through `dispatcher` failed (an Error of its own if it was answered). */
function postFailure(url: string, dispatcher: Agent): Promise<unknown> {
  return request(url, {
    method: "POST",
    body: "{}",
    dispatcher,
    signal: AbortSignal.timeout(20_000),
  }).then(
    (response) => new Error(`answered ${response.statusCode}`),
    (error: unknown) => error,
  );
}

interface Failure {
  readonly code?: string;
  readonly port?: number;
  readonly message: string;
}

describe("an https URL naming port 0", () => {
  it("is not delivered to port 443, a port the URL does not name", async () => {
    // The API refuses port 0 (TargetSchema), but the worker does not refuse a target stored
    // before it did; undici's own connector connects to port 0, which fails.
    const dispatcher = new Agent({ connect: meteredConnector({ ca: TEST_TLS_CERT }) });
    try {
      const failure = (await postFailure("https://localhost:0/hook", dispatcher)) as Failure;
      expect(failure.port).not.toBe(443);
    } finally {
      await dispatcher.destroy();
    }
  });
});

describe("a TLS 1.2 receiver that renegotiates without end", () => {
  it("gets no renegotiation from the worker: each is a full handshake on the worker's main thread", async () => {
    // The meter ends such a delivery at 1 MiB, but 1 MiB is thousands of handshakes (4,262 in
    // 2.6 s, 1.1 s of the worker's CPU), each an ECDHE exchange and a certificate check.
    let renegotiations = 0;
    const open = new Set<TLSSocket>();
    const server = createTlsServer(
      { key: TEST_TLS_KEY, cert: TEST_TLS_CERT, maxVersion: "TLSv1.2" },
      (socket) => {
        open.add(socket);
        // Node's server counts its own renegotiations as an attack and says so; it goes on.
        socket.on("error", () => {});
        socket.once("data", () => {
          // A worker that takes no renegotiation is not held to its delivery's timeout.
          setTimeout(() => {
            if (!socket.destroyed) socket.end("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
          }, 1_000);
          const again = (): void => {
            if (socket.destroyed) return;
            socket.renegotiate({ rejectUnauthorized: false }, (error) => {
              if (error) return;
              renegotiations++;
              again();
            });
          };
          again();
        });
      },
    );
    server.on("tlsClientError", () => {});
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    const dispatcher = new Agent({
      connect: meteredConnector({ ...DELIVERY_TLS_OPTIONS, ca: TEST_TLS_CERT }),
    });
    try {
      const failure = await postFailure(`https://localhost:${port}/hook`, dispatcher);
      // However the delivery ends (the receiver gives up on its renegotiation), it cost none.
      expect(failure).toBeInstanceOf(Error);
      expect({ renegotiations, tooMuch: receivedTooMuchIn(failure) !== undefined }).toEqual({
        renegotiations: 0,
        tooMuch: false,
      });
    } finally {
      await dispatcher.destroy();
      for (const socket of open) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  }, 30_000);
});

/** An ECDSA certificate on P-521 for localhost (self-signed: a delivery refuses it, after the handshake). */
const P521_KEY = `-----BEGIN PRIVATE KEY-----
MIHuAgEAMBAGByqGSM49AgEGBSuBBAAjBIHWMIHTAgEBBEIAzmmVe2YEzioZlkNx
xmXtHIqaWLebNKll6lBpA00MRlfuivZ3V455UP7XAJBW39FuobMRRCq+B0b2cHHf
rfZz71uhgYkDgYYABAC6WuPbRRz7fthYDOxenrgddEXKsYKxRjKFqwWFN/gu6+5/
2jmonMWDuJ8F1u7IgTRaI9sAFa4XA9qe6TE5laLatgH9/WbhQKr44akaVeySl38K
XNkOViV3N1oDbGq24WzNmXMMrm4T61cfpilzyc2z4Q7Dkz6DEGqK5tkHSg92PVrU
DQ==
-----END PRIVATE KEY-----`;
const P521_CERT = `-----BEGIN CERTIFICATE-----
MIICGzCCAXygAwIBAgIUFnmyRRtoTskUjqEljsa4K2dWHZcwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MB4XDTI2MTIwNzAxNDEwM1oXDTM2MTIwNDAx
NDEwM1owFDESMBAGA1UEAwwJbG9jYWxob3N0MIGbMBAGByqGSM49AgEGBSuBBAAj
A4GGAAQAulrj20Uc+37YWAzsXp64HXRFyrGCsUYyhasFhTf4Luvuf9o5qJzFg7if
BdbuyIE0WiPbABWuFwPanukxOZWi2rYB/f1m4UCq+OGpGlXskpd/ClzZDlYldzda
A2xqtuFszZlzDK5uE+tXH6Ypc8nNs+EOw5M+gxBqiubZB0oPdj1a1A2jaTBnMB0G
A1UdDgQWBBTjuujwiQ1g52EjPbloteeRvmlArjAfBgNVHSMEGDAWgBTjuujwiQ1g
52EjPbloteeRvmlArjAPBgNVHRMBAf8EBTADAQH/MBQGA1UdEQQNMAuCCWxvY2Fs
aG9zdDAKBggqhkjOPQQDAgOBjAAwgYgCQgD18vlTFJs8kuH072bcylgNaEhy9SqO
CdYJ9TeC2uKgeBRScwIUwzS4qyfq3+O4wPf5nnqCDnGDB47kHWrlGXJDWQJCAKy/
YZ4rAEtwDVIkeGB46Y4v4ZyIful7Y79UqfwoFgFKMFroxp1Kcq8/lnC2+um50f0J
5fGwbuh35GNuEiKgOKmY
-----END CERTIFICATE-----`;

describe("a TLS 1.2 receiver whose certificate is ECDSA on P-521", () => {
  it("gets through the handshake, its ECDHE on X25519 or P-256 as the worker offers", async () => {
    // TLS 1.2 (RFC 8422) holds an ECDSA certificate's curve to the groups the client offers, so a
    // receiver taking X25519 for its key exchange failed while DELIVERY_GROUPS lacked P-521.
    const server = createTlsServer(
      { key: P521_KEY, cert: P521_CERT, maxVersion: "TLSv1.2" },
      (socket) => {
        socket.on("error", () => {});
        socket.end("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
      },
    );
    server.on("tlsClientError", () => {});
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    const [, deployed, host] = LOOPBACK_WORKERS[0];
    try {
      const error = await rejection(
        httpHandlerWith(deployed)(httpContext(`https://${host}:${port}/hook`)),
        JobError,
      );
      // The certificate's refusal (self-signed, for another name), which comes after the handshake.
      expect(error.message).not.toMatch(/handshake failure/);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
