import { type AddressInfo, createServer } from "node:net";
import { Response } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobError } from "../../shared/execution/job-contract.js";
import { addressRefusal, dnsResolver } from "../../shared/execution/outbound.js";
import { type WebhookSettings, webhookHandler } from "../../shared/execution/webhook-handler.js";
import { type FakeDns, fakeDns } from "../support/fake-dns.js";
import { nameMismatch } from "../support/tls-certificate.js";

/**
 * Review h75: what a run's error (the tenant's to read) tells of the addresses the worker's
 * resolver answers, and what the masking in `describe`/`addressesAs` does to text that is no
 * address. The handler is called as the worker calls it; its JobError's message is the run's
 * error. Where a fault needs a receiver the machine cannot be (a publicly trusted certificate),
 * fetch is a stub failing as undici does (TypeError "fetch failed" with the socket's error as cause).
 */

let dns: FakeDns;
/** A port nothing listens on: a server's, closed again. */
let closedPort = 0;
beforeAll(async () => {
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, "::", resolve));
  closedPort = (closed.address() as AddressInfo).port;
  await new Promise((resolve) => closed.close(resolve));
  dns = await fakeDns(
    {
      "receiver.test": ["127.0.0.1"],
      "six.test": ["::1"],
      "both.test": ["127.0.0.1", "::1"],
      "mapped.test": ["::ffff:7f00:1"],
    },
    [],
  );
});
afterAll(async () => {
  await dns?.close();
});

/** Loopback stands in for the public addresses a private zone may give a name. */
const STAND_INS = new Set(["127.0.0.1", "::1", "::ffff:127.0.0.1", "::ffff:7f00:1"]);
const standIn = (address: string) => (STAND_INS.has(address) ? null : addressRefusal(address));

function settings(fetchStub?: WebhookSettings["fetch"]): WebhookSettings {
  return {
    signingSecrets: async () => ["whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q="],
    allowPrivateTargets: false,
    resolve: dnsResolver({ servers: [dns.server] }),
    addressRefusal: standIn,
    ...(fetchStub === undefined ? {} : { fetch: fetchStub }),
  };
}

/** The run's error a delivery to `url` ends with. */
async function runError(url: string, fetchStub?: WebhookSettings["fetch"]): Promise<string> {
  const handler = webhookHandler(settings(fetchStub), () => new Date());
  try {
    await handler({
      jobId: "job",
      tenantId: "tenant",
      runId: "run",
      type: "http",
      scheduledFor: "2026-12-06T00:00:00.000Z",
      attempt: 1,
      idempotencyKey: "job@2026-12-06T00:00:00.000Z",
      payload: {},
      target: { url, timeoutSeconds: 5 },
      signal: new AbortController().signal,
      fence: 1,
    });
  } catch (error) {
    if (error instanceof JobError) return error.message;
    throw error;
  }
  throw new Error("the delivery succeeded");
}

/** A stub fetch that fails as undici's does when the connection fails with `cause`. */
const failingWith =
  (cause: Error): WebhookSettings["fetch"] =>
  async () => {
    throw new TypeError("fetch failed", { cause });
  };

describe("a TLS name mismatch at the address the name resolved to", () => {
  it("does not name the certificate's IP address, the receiver's own (what the resolver answered)", async () => {
    // Node's own text for a trusted certificate that does not cover the name: its altnames, IP
    // addresses included. 127.0.0.1 stands in for the public address a private zone gives the name.
    const mismatch = nameMismatch("receiver.test", "DNS:internal.example, IP Address:127.0.0.1");
    const error = await runError("https://receiver.test/hook", failingWith(mismatch));
    expect(error).toMatch(/^POST https:\/\/receiver\.test\/hook: fetch failed: Hostname\/IP/);
    expect(error).not.toContain("127.0.0.1");
  });
});

describe("masking leaves what is no address alone", () => {
  it("a name that starts with a dotted quad, unknown to DNS, is named as the tenant wrote it", async () => {
    // Real DNS (the fake), real undici: `10.9.8.7.nip.test has no A or AAAA record`.
    const error = await runError("http://10.9.8.7.nip.test:8080/hook");
    expect(error).toBe(
      "POST http://10.9.8.7.nip.test:8080/hook: fetch failed: 10.9.8.7.nip.test has no A or AAAA record",
    );
  });
});

describe("masking's cost", () => {
  it("a 64 KB error text that is no address is told within a second", async () => {
    // ADDRESS_LIKE (`[0-9A-Fa-f:.[\]]*[0-9A-Fa-f\]]`) scans a run of `:` or `.` from each of its
    // characters to its end: quadratic, on the worker's event loop that every tenant's runs share.
    const long = new Error(`peer said ${":".repeat(64 * 1024)}!`);
    const started = performance.now();
    const error = await runError("https://receiver.test/hook", failingWith(long));
    const tookMs = performance.now() - started;
    expect(error).toContain("peer said");
    expect(tookMs).toBeLessThan(1000);
  });
});

describe("what masking does not touch", () => {
  it("a receiver's answer: its body's start is told as sent (a version 1.2.3.4 too), its status text not at all", async () => {
    const answering: WebhookSettings["fetch"] = async () =>
      new Response("needs client 1.2.3.4 or later", {
        status: 500,
        statusText: "Upgrade to 1.2.3.4",
      });
    const error = await runError("https://receiver.test/hook", answering);
    expect(error).toBe("POST https://receiver.test/hook: HTTP 500 needs client 1.2.3.4 or later");
  });

  it("an address two causes deep is not told (only the error's message and its cause's are)", async () => {
    const deep = new TypeError("fetch failed", {
      cause: new Error("socket failed", {
        cause: new AggregateError([new Error("connect ECONNREFUSED 127.0.0.1:443")], ""),
      }),
    });
    const error = await runError("https://receiver.test/hook", async () => {
      throw deep;
    });
    expect(error).toBe("POST https://receiver.test/hook: fetch failed: socket failed");
  });
});

describe("a refused connection at a name's IPv6 addresses (real sockets)", () => {
  it.each(["six.test", "both.test", "mapped.test"])(
    "%s: the error names the host only",
    async (name) => {
      const error = await runError(`http://${name}:${closedPort}/hook`);
      expect(error).toMatch(
        new RegExp(`^POST http://${name.replace(".", "\\.")}:\\d+/hook: fetch failed: `),
      );
      expect(error).not.toMatch(/127\.0\.0\.1|::1|ffff/);
    },
  );
});
