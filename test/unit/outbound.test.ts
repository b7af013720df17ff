import type { LookupAddress } from "node:dns";
import { createServer, type Server } from "node:http";
import { type AddressInfo, createServer as createTcpServer } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { TargetSchema } from "../../shared/api/schemas/target.js";
import { isRetryable, JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import {
  addressRefusal,
  isPublicAddress,
  literalTargetRefusal,
  type Resolver,
  refusalIn,
} from "../../shared/execution/outbound.js";
import { httpContext, httpHandlerWith, TEST_SIGNING_SECRET } from "../support/http-handler.js";

const _SECRET = TEST_SIGNING_SECRET;
const contextFor = (url: string) =>
  httpContext(url, { timeoutSeconds: 5, payload: { hello: "world" } });

// Each form as a URL host: the URL parser rewrites IPv4 shorthands (127.1, 0x7f.1, 2130706433, …)
// to dotted quads and IPv6 to its compressed form ([::ffff:127.0.0.1] → [::ffff:7f00:1]).
const REFUSED_HOSTS = [
  // IPv4: loopback in every form inet_aton and the URL parser accept
  "127.0.0.1",
  "127.1",
  "127.0.1",
  "0x7f.1",
  "0x7f000001",
  "2130706433",
  "0177.0.0.1",
  "017700000001",
  "127.255.255.254",
  // IPv4: private, shared, link-local (metadata), unspecified, special-purpose, reserved
  "10.0.0.1",
  "172.16.0.1",
  "172.31.255.255",
  "192.168.1.1",
  "100.64.0.1",
  "169.254.169.254",
  "0.0.0.0",
  "0",
  "192.0.0.1",
  "192.0.2.1",
  "198.18.0.1",
  "198.19.255.255",
  "203.0.113.7",
  "240.0.0.1",
  "224.0.0.1",
  "239.255.255.250",
  "255.255.255.255",
  // IPv6: loopback, unspecified, mapped and compatible IPv4, NAT64, link-, site- and unique-local
  "[::1]",
  "[::]",
  "[0:0:0:0:0:0:0:1]",
  "[::ffff:127.0.0.1]",
  "[::ffff:7f00:1]",
  "[::ffff:a9fe:a9fe]",
  "[::ffff:10.0.0.1]",
  "[::ffff:0:7f00:1]",
  "[::127.0.0.1]",
  "[::7f00:1]",
  "[::a9fe:a9fe]",
  "[64:ff9b::7f00:1]",
  "[64:ff9b::808:808]",
  "[64:ff9b:1::a]",
  "[fe80::1]",
  "[fe90::1]",
  "[febf::1]",
  "[fec0::1]",
  "[feff::1]",
  "[fc00::1]",
  "[fd00:ec2::254]",
  "[ff02::1]",
  "[2002:7f00:1::1]",
  "[2001::1]",
  "[2001:db8::1]",
  "[100::1]",
  "[4000::1]",
];

const PUBLIC_HOSTS = [
  "8.8.8.8",
  "1.1.1.1",
  "0x08080808",
  "134744072",
  "172.32.0.1",
  "100.128.0.1",
  "198.20.0.1",
  "[2606:4700::1111]",
  "[2a00:1450:4001::200e]",
  "[::ffff:8.8.8.8]",
];

describe("the address guard", () => {
  it("has a table of at least 30 refused forms", () => {
    expect(REFUSED_HOSTS.length).toBeGreaterThanOrEqual(30);
  });

  it.each(REFUSED_HOSTS)("refuses http://%s/", (host) => {
    const url = new URL(`http://${host}:8080/hook`);
    const refusal = literalTargetRefusal(url);
    expect(refusal?.message).toMatch(/refused$/);
    expect(isPublicAddress(url.hostname)).toBe(false);
  });

  it.each(PUBLIC_HOSTS)("lets http://%s/ through", (host) => {
    const url = new URL(`http://${host}/hook`);
    expect(literalTargetRefusal(url)).toBeNull();
    expect(isPublicAddress(url.hostname)).toBe(true);
  });

  it("reads IPv4 shorthands itself too, not only after the URL parser", () => {
    for (const raw of [
      "127.1",
      "0x7f.1",
      "2130706433",
      "0177.0.0.1",
      "::ffff:7f00:1",
      "::7f00:1",
    ]) {
      expect(addressRefusal(raw), raw).toBe("loopback");
    }
    expect(addressRefusal("::ffff:a9fe:a9fe")).toBe("linkLocal");
    expect(addressRefusal("64:ff9b::a9fe:a9fe")).toBe("rfc6052");
    expect(addressRefusal("not-an-address")).toBe("not an IP address");
  });

  it("leaves names to the connection's lookup", () => {
    expect(literalTargetRefusal(new URL("http://receiver.example/hook"))).toBeNull();
  });
});

// ---------------------------------------------------------------- deliveries

interface LoopbackServer {
  readonly port: number;
  readonly requests: string[];
  close(): Promise<void>;
}

async function loopbackServer(): Promise<LoopbackServer> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    res.writeHead(200, { "Content-Type": "text/plain" }).end("internal secret page");
  });
  // On 127.0.0.1 only (IPv4-mapped ::ffff:127.0.0.1 reaches it too), not on 127.0.0.2.
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * A deployed worker's handler whose resolver answers a name with 127.0.0.2, then 127.0.0.1.
 * Loopback only: 127.0.0.2 stands in for a public address (nothing listens on it), and
 * 127.0.0.1, where the tests' servers listen, is the private address a rebinding name turns to.
 */
function rebindingHandler(): { handler: JobHandler; calls: () => number } {
  const answers: LookupAddress[][] = [
    [{ address: "127.0.0.2", family: 4 }],
    [{ address: "127.0.0.1", family: 4 }],
  ];
  let calls = 0;
  const rebinding: Resolver = async () => answers[Math.min(calls++, answers.length - 1)] ?? [];
  const standIn = (address: string) =>
    address === "127.0.0.2" ? null : (addressRefusal(address) ?? null);
  const handler = httpHandlerWith({ resolve: rebinding, addressRefusal: standIn });
  return { handler, calls: () => calls };
}

async function refusalOf(promise: Promise<unknown>): Promise<JobError> {
  const outcome = await promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  if (!("error" in outcome))
    throw new Error(`delivered, answered ${JSON.stringify(outcome.value)}`);
  expect(outcome.error).toBeInstanceOf(JobError);
  return outcome.error as JobError;
}

describe("http deliveries with private targets refused", () => {
  let server: LoopbackServer;
  beforeAll(async () => {
    server = await loopbackServer();
  });
  afterAll(async () => {
    await server.close();
  });

  it("do not reach loopback through an IPv4-mapped literal ([::ffff:127.0.0.1] → [::ffff:7f00:1])", async () => {
    const before = server.requests.length;
    const error = await refusalOf(
      httpHandlerWith({})(contextFor(`http://[::ffff:127.0.0.1]:${server.port}/admin`)),
    );
    expect(error.message).toMatch(/\[::ffff:7f00:1\] is loopback; refused/);
    expect(isRetryable(error)).toBe(false);
    expect(server.requests.length).toBe(before);
    // The response body of a refused target is never read, so it cannot be stored either.
    expect(error.message).not.toMatch(/internal secret page/);
  });

  it("do not reach a name that resolves to a private address (system resolver: localhost)", async () => {
    const before = server.requests.length;
    const error = await refusalOf(
      httpHandlerWith({})(contextFor(`http://localhost:${server.port}/admin`)),
    );
    expect(error.message).toBe(
      "target localhost resolves to a non-public address (loopback); refused",
    );
    expect(isRetryable(error)).toBe(false);
    expect(server.requests.length).toBe(before);
  });

  it("do not reach a name an injected resolver maps to a private address", async () => {
    const before = server.requests.length;
    const resolve: Resolver = async () => [{ address: "10.0.0.7", family: 4 }];
    const error = await refusalOf(
      httpHandlerWith({ resolve })(contextFor(`http://intranet.test:${server.port}/`)),
    );
    expect(error.message).toBe(
      "target intranet.test resolves to a non-public address (private); refused",
    );
    expect(refusalIn(error)?.context).toEqual({ hostname: "intranet.test", address: "10.0.0.7" });
    expect(server.requests.length).toBe(before);
  });

  it("refuse a name if any of its addresses is private, even when one is public", async () => {
    const resolve: Resolver = async () => [
      { address: "93.184.215.14", family: 4 },
      { address: "127.0.0.1", family: 4 },
    ];
    const error = await refusalOf(
      httpHandlerWith({ resolve })(contextFor(`http://mixed.test:${server.port}/`)),
    );
    expect(error.message).toMatch(/resolves to a non-public address \(loopback\); refused/);
    expect(refusalIn(error)?.context.address).toBe("127.0.0.1");
  });

  it("connect to the address that was vetted: a resolver answering public, then private, reaches nothing", async () => {
    const { handler, calls } = rebindingHandler();
    const before = server.requests.length;
    const error = await refusalOf(handler(contextFor(`http://rebind.test:${server.port}/admin`)));
    // The public answer was used to connect (and refused there: nothing listens on 127.0.0.2).
    expect(error.message).toMatch(/ECONNREFUSED/);
    expect(isRetryable(error)).toBe(true);
    expect(calls()).toBe(1);
    expect(server.requests.length).toBe(before);

    // The next delivery resolves afresh, gets the private answer, and is refused before connecting.
    const second = await refusalOf(handler(contextFor(`http://rebind.test:${server.port}/admin`)));
    expect(second.message).toMatch(/rebind\.test resolves to a non-public address \(loopback\)/);
    expect(refusalIn(second)?.context.address).toBe("127.0.0.1");
    expect(server.requests.length).toBe(before);
  });

  it("over https too: the TCP socket the TLS one is wrapped around connects to the vetted address only", async () => {
    // received-bytes.ts opens that socket itself (to meter it), with the vetted lookup.
    let accepted = 0;
    const tcp = createTcpServer((socket) => {
      accepted++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => tcp.listen(0, "127.0.0.1", resolve));
    const port = (tcp.address() as AddressInfo).port;
    const { handler, calls } = rebindingHandler();
    try {
      const error = await refusalOf(handler(contextFor(`https://rebind.test:${port}/admin`)));
      expect(error.message).toMatch(/ECONNREFUSED/);
      expect(calls()).toBe(1);
      const second = await refusalOf(handler(contextFor(`https://rebind.test:${port}/admin`)));
      expect(second.message).toBe(
        "target rebind.test resolves to a non-public address (loopback); refused",
      );
      expect(isRetryable(second)).toBe(false);
      expect(refusalIn(second)?.context.address).toBe("127.0.0.1");
      expect(accepted).toBe(0);
    } finally {
      await new Promise((resolve) => tcp.close(resolve));
    }
  });

  it("follow no redirect: a 3xx is the receiver's answer", async () => {
    const redirecting = createServer((_req, res) =>
      res.writeHead(307, { Location: "http://169.254.169.254/latest/meta-data/" }).end(),
    );
    await new Promise<void>((resolve) => redirecting.listen(0, "127.0.0.1", resolve));
    const port = (redirecting.address() as AddressInfo).port;
    try {
      const local = httpHandlerWith({ allowPrivateTargets: true });
      const error = await refusalOf(local(contextFor(`http://127.0.0.1:${port}/`)));
      expect(error.message).toMatch(/HTTP 307/);
      expect(isRetryable(error)).toBe(false);
    } finally {
      redirecting.closeAllConnections();
      await new Promise((resolve) => redirecting.close(resolve));
    }
  });

  it("read at most the start of a receiver's answer: a huge one is cut off, not held", async () => {
    // 32 MiB in 64 KiB chunks, each written once the one before was taken: the server writes what
    // the worker reads. Read whole, a receiver's gigabytes would take down a worker that runs
    // other tenants' runs too.
    const total = 32 * 1024 * 1024;
    const chunk = Buffer.alloc(64 * 1024, "x");
    const answers: { written: number; closed: boolean; finished: boolean }[] = [];
    const flooding = createServer((req, res) => {
      const answer = { written: 0, closed: false, finished: false };
      answers.push(answer);
      res.on("close", () => {
        answer.closed = true;
        answer.finished = res.writableFinished;
      });
      res.writeHead(Number(req.url?.slice(1)), { "Content-Type": "text/plain" });
      const more = () => {
        while (answer.written < total && !res.destroyed) {
          answer.written += chunk.length;
          if (!res.write(chunk)) return void res.once("drain", more);
        }
        if (answer.written >= total) res.end();
      };
      more();
    });
    await new Promise<void>((resolve) => flooding.listen(0, "127.0.0.1", resolve));
    const port = (flooding.address() as AddressInfo).port;
    try {
      const local = httpHandlerWith({ allowPrivateTargets: true });
      expect(await local(contextFor(`http://127.0.0.1:${port}/200`))).toEqual({ status: 200 });
      const error = await refusalOf(local(contextFor(`http://127.0.0.1:${port}/500`)));
      // A failure still says what the receiver answered, from the start of its answer.
      expect(error.message).toBe(`POST http://127.0.0.1:${port}/500: HTTP 500 ${"x".repeat(200)}`);
      expect(isRetryable(error)).toBe(true);
      expect(answers).toHaveLength(2);
      await vi.waitFor(() => expect(answers.every((a) => a.closed)).toBe(true));
      for (const answer of answers) {
        expect(answer.finished).toBe(false);
        expect(answer.written).toBeLessThan(total / 4);
      }
    } finally {
      flooding.closeAllConnections();
      await new Promise((resolve) => flooding.close(resolve));
    }
  });

  it("retry 5xx only: a status past 599 is no HTTP status, not retried like any other answer", async () => {
    // HTTP statuses run 100 to 599; a receiver's parser takes any three digits, so a 600 to 999 is
    // a receiver's mistake that a retry repeats, as a 4xx is, not a server's passing failure.
    const answering = createServer((req, res) => res.writeHead(Number(req.url?.slice(1))).end());
    await new Promise<void>((resolve) => answering.listen(0, "127.0.0.1", resolve));
    const port = (answering.address() as AddressInfo).port;
    try {
      const local = httpHandlerWith({ allowPrivateTargets: true });
      const outcomes: Record<string, boolean> = {};
      for (const status of [500, 599, 600, 999]) {
        const error = await refusalOf(local(contextFor(`http://127.0.0.1:${port}/${status}`)));
        expect(error.message).toMatch(new RegExp(`HTTP ${status}`));
        outcomes[status] = isRetryable(error);
      }
      expect(outcomes).toEqual({ 500: true, 599: true, 600: false, 999: false });
    } finally {
      answering.closeAllConnections();
      await new Promise((resolve) => answering.close(resolve));
    }
  });

  it("quote whole characters of a receiver's answer: a character its 200th cuts in two is left out", async () => {
    // 199 characters, then one outside the BMP (two UTF-16 units): cut at 200 units, the error
    // ended in half of it, an unpaired surrogate, which is no Unicode text to store or answer.
    const answer = `${"x".repeat(199)}\u{1F600} and more`;
    const answering = createServer((_req, res) => res.writeHead(500).end(answer));
    await new Promise<void>((resolve) => answering.listen(0, "127.0.0.1", resolve));
    const port = (answering.address() as AddressInfo).port;
    try {
      const local = httpHandlerWith({ allowPrivateTargets: true });
      const error = await refusalOf(local(contextFor(`http://127.0.0.1:${port}/`)));
      expect(error.message).toBe(`POST http://127.0.0.1:${port}/: HTTP 500 ${"x".repeat(199)}`);
    } finally {
      answering.closeAllConnections();
      await new Promise((resolve) => answering.close(resolve));
    }
  });

  it("with private targets allowed (the sandbox's default), the same URLs reach loopback", async () => {
    const before = server.requests.length;
    const handler = httpHandlerWith({ allowPrivateTargets: true });
    for (const host of ["127.0.0.1", "[::ffff:127.0.0.1]", "localhost"]) {
      expect(await handler(contextFor(`http://${host}:${server.port}/hook`))).toEqual({
        status: 200,
      });
    }
    expect(server.requests.length).toBe(before + 3);
  });
});

describe("targets the API accepts", () => {
  let server: LoopbackServer;
  beforeAll(async () => {
    server = await loopbackServer();
  });
  afterAll(async () => {
    await server.close();
  });

  /** A target as the API's schema takes it: its refusal's fields, or the delivery's outcome. */
  async function outcomeOf(target: Record<string, unknown>): Promise<string> {
    const parsed = TargetSchema.safeParse(target);
    if (!parsed.success)
      return `refused ${parsed.error.issues.map((i) => i.path.join(".")).join(",")}`;
    const { url, headers } = parsed.data;
    return httpHandlerWith({ allowPrivateTargets: true })({
      ...contextFor(url),
      target: { url, ...(headers ? { headers } : {}) },
    }).then(
      (answer) => JSON.stringify(answer),
      (error: unknown) => `failed: ${(error as Error).message}`,
    );
  }

  // Headers the delivery's HTTP client refuses to send: each was accepted (201), and then every
  // attempt of every run failed ("fetch failed: invalid upgrade header") until the run was dead.
  it.each([
    [{ Upgrade: "h2c" }, "refused headers.Upgrade"],
    [{ "keep-alive": "timeout=5" }, "refused headers.keep-alive"],
    [{ Expect: "100-continue" }, "refused headers.Expect"],
    [{ Authorization: "Bearer t", TE: "trailers", Cookie: "a=b" }, JSON.stringify({ status: 200 })],
  ])("headers %o: %s", async (headers, outcome) => {
    expect(await outcomeOf({ url: `http://127.0.0.1:${server.port}/hook`, headers })).toBe(outcome);
  });

  // fetch refuses a URL with credentials ("Request cannot be constructed from a URL that includes
  // credentials"): such a job ran until dead, its password in each run's error.
  it.each([
    ["user:secret@", "refused url"],
    ["user@", "refused url"],
    ["", JSON.stringify({ status: 200 })],
  ])("url with userinfo %o: %s", async (userinfo, outcome) => {
    expect(await outcomeOf({ url: `http://${userinfo}127.0.0.1:${server.port}/hook` })).toBe(
      outcome,
    );
  });

  // TCP has no port 0: every attempt of every run failed to connect until the run was dead.
  it.each([
    ["http://127.0.0.1:0/hook", "refused url"],
    ["https://receiver.example:0/hook", "refused url"],
    ["http://127.0.0.1:00/hook", "refused url"],
  ])("url %s: %s", async (url, outcome) => {
    expect(await outcomeOf({ url })).toBe(outcome);
  });
});
