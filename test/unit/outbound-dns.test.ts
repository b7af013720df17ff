import { lookup } from "node:dns/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRetryable, JobError } from "../../shared/execution/job-contract.js";
import { addressRefusal, dnsResolver, refusalIn } from "../../shared/execution/outbound.js";
import { type BlockedThreadpool, blockThreadpool } from "../support/blocked-threadpool.js";
import { type FakeDns, fakeDns } from "../support/fake-dns.js";
import { httpContext, httpHandlerWith } from "../support/http-handler.js";

/**
 * A deployed worker resolves webhook hosts without libuv's threadpool (4 threads, shared with
 * fs, zlib and crypto in the process): `dns.lookup` is getaddrinfo on that pool, so a tenant whose
 * host's DNS never answers held every thread for the resolver's timeouts with a few deliveries,
 * and every other tenant's deliveries waited behind it. Each test here runs with the pool taken
 * (blockThreadpool) and bounds how long a delivery's resolution takes.
 */

/** Settles within `ms`, or says it did not. */
async function within<T>(ms: number, promise: Promise<T>): Promise<{ value: T } | "still waiting"> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"still waiting">((resolve) => {
    timer = setTimeout(() => resolve("still waiting"), ms);
  });
  try {
    return await Promise.race([promise.then((value) => ({ value })), late]);
  } finally {
    clearTimeout(timer);
  }
}

async function failureOf(promise: Promise<unknown>): Promise<JobError> {
  const error = await promise.then(
    (value) => new Error(`delivered: ${JSON.stringify(value)}`),
    (thrown: unknown) => thrown,
  );
  expect(error).toBeInstanceOf(JobError);
  return error as JobError;
}

/** 127.0.0.1, where the receiver listens, stands in for a public address; all else as deployed. */
const standIn = (address: string) => (address === "127.0.0.1" ? null : addressRefusal(address));

let server: Server;
let port = 0;
let dns: FakeDns;
beforeAll(async () => {
  dns = await fakeDns(
    {
      "receiver.test": ["127.0.0.1"],
      "dual.test": ["93.184.215.14", "2606:2800:220:1::1"],
      "sneaky.test": ["93.184.215.14", "::1"],
      "v6only.test": ["fd00::7"],
    },
    ["blackhole.test"],
  );
  server = createServer((_req, res) => res.writeHead(200).end("ok"));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  await dns.close();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe("with libuv's threadpool taken", () => {
  let pool: BlockedThreadpool | undefined;
  beforeAll(async () => {
    pool = await blockThreadpool();
  });
  afterAll(async () => {
    await pool?.release();
  });

  it("the system's lookup (getaddrinfo) cannot resolve even localhost", async () => {
    expect(await within(1000, lookup("localhost", { all: true }))).toBe("still waiting");
  });

  it("a deployed worker's default resolver still refuses localhost, at once", async () => {
    const outcome = await within(
      2000,
      failureOf(httpHandlerWith({})(httpContext(`http://localhost:${port}/admin`))),
    );
    expect(outcome).not.toBe("still waiting");
    const error = (outcome as { value: JobError }).value;
    expect(error.message).toBe(
      "target localhost resolves to a non-public address (loopback); refused",
    );
    expect(refusalIn(error)?.context.address).toMatch(/^(127\.0\.0\.1|::1)$/);
    expect(isRetryable(error)).toBe(false);
  });

  it("a name resolves through DNS, A and AAAA combined, and its delivery is made", async () => {
    const resolve = dnsResolver({ servers: [dns.server] });
    expect(await within(2000, resolve("dual.test"))).toEqual({
      value: [
        { address: "93.184.215.14", family: 4 },
        { address: "2606:2800:220:1::1", family: 6 },
      ],
    });
    const delivery = httpHandlerWith({ resolve, addressRefusal: standIn })(
      httpContext(`http://receiver.test:${port}/hook`),
    );
    expect(await within(2000, delivery)).toEqual({ value: { status: 200 } });
  });

  it("every address a name resolves to is vetted, an AAAA's too", async () => {
    const resolve = dnsResolver({ servers: [dns.server] });
    for (const [host, address, why] of [
      ["sneaky.test", "::1", "loopback"],
      ["v6only.test", "fd00::7", "uniqueLocal"],
    ] as const) {
      const outcome = await within(
        2000,
        failureOf(httpHandlerWith({ resolve })(httpContext(`http://${host}:${port}/`))),
      );
      expect(outcome).toHaveProperty("value");
      const error = (outcome as { value: JobError }).value;
      expect(error.message).toBe(
        `target ${host} resolves to a non-public address (${why}); refused`,
      );
      expect(refusalIn(error)?.context.address).toBe(address);
      expect(isRetryable(error)).toBe(false);
    }
  });

  it("a name DNS does not know fails the attempt, retryably, naming it", async () => {
    const resolve = dnsResolver({ servers: [dns.server] });
    const outcome = await within(
      2000,
      failureOf(httpHandlerWith({ resolve })(httpContext(`http://nope.test:${port}/hook`))),
    );
    expect(outcome).toHaveProperty("value");
    const error = (outcome as { value: JobError }).value;
    expect(error.message).toBe(
      `POST http://nope.test:${port}/hook: fetch failed: nope.test has no A or AAAA record`,
    );
    expect(isRetryable(error)).toBe(true);
  });

  it("a black-holed name fails within the 5 s bound, retryably, naming it", async () => {
    const resolve = dnsResolver({ servers: [dns.server] });
    const started = Date.now();
    const error = await failureOf(
      httpHandlerWith({ resolve })(httpContext(`http://blackhole.test:${port}/hook`)),
    );
    const tookMs = Date.now() - started;
    expect(error.message).toBe(
      `POST http://blackhole.test:${port}/hook: fetch failed: blackhole.test: no A or AAAA answer within 5000 ms`,
    );
    expect(isRetryable(error)).toBe(true);
    expect(tookMs).toBeGreaterThanOrEqual(4900);
    expect(tookMs).toBeLessThan(6500);
    // Both families were asked, and asked again (c-ares's tries), all on the event loop.
    expect(dns.queries.get("blackhole.test")).toBeGreaterThanOrEqual(4);
  });
});
