import { createServer as createHttpServer, type Server as HttpServer } from "node:http";
import {
  type AddressInfo,
  createServer as createTcpServer,
  isIP,
  type Server,
  type Socket,
} from "node:net";
import { createServer as createTlsServer } from "node:tls";
import { errors, fetch } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import type { JobHandler } from "../../shared/execution/job-contract.js";
import { addressRefusal, dnsResolver } from "../../shared/execution/outbound.js";
import type { WebhookSettings } from "../../shared/execution/webhook-handler.js";
import type { WorkerDeps } from "../../shared/execution/worker.js";
import { createJob } from "../../shared/jobs/index.js";
import type { HttpTarget, Run } from "../../shared/model.js";
import { type Logger, silentObservability } from "../../shared/observability.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { type FakeDns, fakeDns } from "../support/fake-dns.js";
import { nameMismatch, TEST_TLS_CERT, TEST_TLS_KEY } from "../support/tls-certificate.js";

/**
 * Each way a delivery fails that a tenant must be able to tell for itself, from the run's error
 * in its history and dead letters, driven through the worker as deployed (names resolved by DNS,
 * private addresses refused; 127.0.0.1, where the receivers listen, stands in for a public
 * address) against real receivers on loopback: the error says what went wrong in the tenant's
 * terms, never only that the handler "failed unexpectedly", which is for failures of the
 * deployment's own (its services refusing the worker), and the run is retried or dead as the
 * failure deserves.
 */

interface Line {
  readonly message: string;
  readonly fields: Record<string, unknown>;
}
const lines: Line[] = [];
const capturing: Logger = {
  debug: (message, fields = {}) => void lines.push({ message, fields }),
  info: (message, fields = {}) => void lines.push({ message, fields }),
  warn: (message, fields = {}) => void lines.push({ message, fields }),
  error: (message, fields = {}) => void lines.push({ message, fields }),
};
const UNFORESEEN = "a job's handler failed unexpectedly";

/**
 * The fake DNS server's answers. 127.0.0.1 and 127.0.0.2 stand in for public addresses; a
 * tenant's run error names none of these (it knows the name it wrote, not what the worker's
 * resolver answers for it: a deployed worker's can answer names the tenant cannot ask).
 */
const RECORDS = {
  "receiver.test": ["127.0.0.1"],
  "twice.test": ["127.0.0.1", "127.0.0.2"],
  "private.test": ["10.1.2.3"],
};
const RESOLVED = /127\.0\.0\.[12]|10\.1\.2\.3/;
const standIn = (address: string) =>
  address === "127.0.0.1" || address === "127.0.0.2" ? null : addressRefusal(address);

let f: EngineFixture;
let dns: FakeDns;
let worker: WorkerDeps;
/** Answers by path: a redirect, a 404, a 503, 429s and a 503 with `Retry-After`, an async target's 202 and a 200. */
let http: HttpServer;
/** Speaks raw TCP by path: never answers, resets the connection, or streams without end. */
let raw: Server;
let tls: Server;
const sockets = new Set<Socket>();
let httpPort = 0;
let rawPort = 0;
let tlsPort = 0;
/** A port nothing listens on: a server's, closed again. */
let closedPort = 0;

const listen = async (server: Server | HttpServer): Promise<number> => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
};

beforeAll(async () => {
  f = await createEngineFixture({ obs: { ...silentObservability, log: capturing } });
  dns = await fakeDns(RECORDS, []);
  http = createHttpServer((request, response) => {
    request.resume();
    request.on("end", () => {
      if (request.url === "/redirect")
        response.writeHead(302, { Location: "http://169.254.169.254/latest/meta-data/" }).end();
      else if (request.url === "/not-found") response.writeHead(404).end("no such hook");
      else if (request.url === "/unavailable") response.writeHead(503).end("down for upkeep");
      else if (request.url === "/taken-over") response.writeHead(202).end();
      else if (request.url === "/slow-down")
        response.writeHead(429, { "Retry-After": "90" }).end("too many");
      else if (request.url === "/back-at")
        response
          .writeHead(503, { "Retry-After": new Date(Date.now() + 120_000).toUTCString() })
          .end("down for upkeep");
      else if (request.url === "/slow-down-for-ever")
        response.writeHead(429, { "Retry-After": "9".repeat(400) }).end("too many");
      else if (request.url === "/not-found-after")
        response.writeHead(404, { "Retry-After": "90" }).end("no such hook");
      else response.writeHead(200, { "Content-Type": "application/json" }).end('{"ok":true}');
    });
  });
  httpPort = await listen(http);
  raw = createTcpServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    socket.once("data", (head: Buffer) => {
      const path = head.toString("latin1").split(" ")[1];
      if (path === "/reset") socket.resetAndDestroy();
      else if (path === "/endless") {
        // A chunk extension without end: no parser above the socket bounds it.
        socket.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=");
        const filler = Buffer.alloc(16 * 1024, "a");
        const more = () => {
          while (!socket.destroyed)
            if (!socket.write(filler)) return void socket.once("drain", more);
        };
        more();
      }
      // "/hang": read, never answered.
    });
  });
  rawPort = await listen(raw);
  tls = createTlsServer({ key: TEST_TLS_KEY, cert: TEST_TLS_CERT }, (socket) => {
    socket.on("error", () => {});
    socket.end("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  });
  tls.on("tlsClientError", () => {});
  tlsPort = await listen(tls);
  const closed = createTcpServer();
  closedPort = await listen(closed);
  await new Promise((resolve) => closed.close(resolve));
  worker = workerWith({ apiUrl: "http://api.test", leaseSeconds: 60 });
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  http?.closeAllConnections();
  await Promise.all(
    [http, raw, tls].map((s) => new Promise((resolve) => (s ? s.close(resolve) : resolve(null)))),
  );
  await dns?.close();
  await f?.destroy();
});

/** A worker as deployed (names resolved by the fake DNS, private addresses refused) with `settings`. */
function workerWith(settings: Partial<WebhookSettings>): WorkerDeps {
  return {
    engine: f.engine,
    workerId: "delivery-failures",
    handlers: builtInHandlers(
      {
        signingSecrets: cachedSigningSecrets(f.engine),
        allowPrivateTargets: false,
        resolve: dnsResolver({ servers: [dns.server] }),
        addressRefusal: standIn,
        ...settings,
      },
      f.engine.clock,
    ),
  };
}

/** The first run of a one-off due now delivering to `target` (two attempts, the second an hour on), once the worker has processed it. */
async function firstRun(target: HttpTarget, by: WorkerDeps = worker): Promise<Run> {
  const { job } = await createJob(
    f.engine,
    testJob({
      type: "http",
      target,
      payload: {},
      schedule: { runAt: new Date().toISOString() },
      policies: {
        ...testJob().policies,
        retry: { maxAttempts: 2, initialDelayMs: 3_600_000, maxDelayMs: 3_600_000 },
      },
    }),
  );
  await f.process(by, await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000));
  const run = (await f.runs()).find((r) => r.jobId === job.jobId && r.attempt === 1);
  if (!run) throw new Error(`job ${job.jobId} has no first run`);
  return run;
}

/** The error a tenant must be able to act on, and whether a retry is worth its while. */
const FAILURES: readonly {
  readonly failure: string;
  readonly target: () => HttpTarget;
  readonly error: RegExp;
  /** FAILED: a next attempt is due; DEAD: not retried (the same answer would come again). */
  readonly status: "FAILED" | "DEAD";
}[] = [
  {
    failure: "a name DNS does not know",
    target: () => ({ url: `http://nowhere.test:${httpPort}/hook` }),
    error:
      /^POST http:\/\/nowhere\.test:\d+\/hook: fetch failed: nowhere\.test has no A or AAAA record$/,
    status: "FAILED",
  },
  {
    failure: "a connection refused",
    target: () => ({ url: `http://receiver.test:${closedPort}/hook` }),
    error:
      /^POST http:\/\/receiver\.test:\d+\/hook: fetch failed: connect ECONNREFUSED receiver\.test:\d+$/,
    status: "FAILED",
  },
  {
    failure: "a connection refused at each of the name's addresses",
    target: () => ({ url: `http://twice.test:${closedPort}/hook` }),
    error:
      /^POST http:\/\/twice\.test:\d+\/hook: fetch failed: connect ECONNREFUSED twice\.test:\d+$/,
    status: "FAILED",
  },
  {
    failure: "a certificate the worker does not trust",
    target: () => ({ url: `https://receiver.test:${tlsPort}/hook` }),
    error: /^POST https:\/\/receiver\.test:\d+\/hook: fetch failed: self[- ]signed certificate/,
    status: "FAILED",
  },
  {
    failure: "a name that resolves to a private address",
    target: () => ({ url: `http://private.test:${httpPort}/hook` }),
    error: /^target private\.test resolves to a non-public address \(private\); refused$/,
    status: "DEAD",
  },
  {
    failure: "a private address",
    target: () => ({ url: "http://10.1.2.3/hook" }),
    error: /^target 10\.1\.2\.3 is private; refused$/,
    status: "DEAD",
  },
  {
    failure: "a redirect, not followed",
    target: () => ({ url: `http://receiver.test:${httpPort}/redirect` }),
    error: /^POST http:\/\/receiver\.test:\d+\/redirect: HTTP 302$/,
    status: "DEAD",
  },
  {
    failure: "no answer within the target's timeout",
    target: () => ({ url: `http://receiver.test:${rawPort}/hang`, timeoutSeconds: 1 }),
    error: /^POST http:\/\/receiver\.test:\d+\/hang: timed out after 1 s$/,
    status: "FAILED",
  },
  {
    failure: "a connection reset",
    target: () => ({ url: `http://receiver.test:${rawPort}/reset` }),
    error:
      /^POST http:\/\/receiver\.test:\d+\/reset: fetch failed: (read ECONNRESET|other side closed)$/,
    status: "FAILED",
  },
  {
    failure: "an answer past what a delivery reads",
    target: () => ({ url: `http://receiver.test:${rawPort}/endless` }),
    error:
      /^POST http:\/\/receiver\.test:\d+\/endless: .*receiver sent more than 1048576 bytes for one delivery; connection closed$/,
    status: "FAILED",
  },
  {
    failure: "a 4xx answer",
    target: () => ({ url: `http://receiver.test:${httpPort}/not-found` }),
    error: /^POST http:\/\/receiver\.test:\d+\/not-found: HTTP 404 no such hook$/,
    status: "DEAD",
  },
  {
    failure: "a 5xx answer",
    target: () => ({ url: `http://receiver.test:${httpPort}/unavailable` }),
    error: /^POST http:\/\/receiver\.test:\d+\/unavailable: HTTP 503 down for upkeep$/,
    status: "FAILED",
  },
  {
    // A job stored before the API checked its URL so (or written by another path): every attempt
    // would fail the same way.
    failure: "a stored URL that does not parse",
    target: () => ({ url: "http://receiver test/hook" }),
    error: /^the target's URL "http:\/\/receiver test\/hook" is not a valid URL$/,
    status: "DEAD",
  },
];

describe("a delivery that fails", () => {
  it.each(FAILURES)("$failure: the run's error says so", async ({ target, error, status }) => {
    const before = lines.length;
    const url = target().url;
    const run = await firstRun(target());
    expect(run.error).toMatch(error);
    expect(run.status).toBe(status);
    // A literal address is the tenant's own; a name's addresses are the worker's resolver's.
    if (URL.canParse(url) && isIP(new URL(url).hostname) === 0)
      expect(run.error).not.toMatch(RESOLVED);
    expect(lines.slice(before).filter((l) => l.message === UNFORESEEN)).toEqual([]);
  });
});

/**
 * What the worker's resolver answered for a tenant's name stays with the operator: a worker that
 * resolves names the tenant cannot (a private DNS zone) would otherwise map them for any tenant
 * that creates jobs and reads their runs' errors.
 */
describe("the address a target's name resolves to", () => {
  it("of a refused name is in the operator's log line for the refusal, not in the run's error", async () => {
    const before = lines.length;
    const run = await firstRun({ url: `http://private.test:${httpPort}/hook`, mode: "async" });
    expect(run.status).toBe("DEAD");
    expect(run.error).not.toContain("10.1.2.3");
    const refused = lines
      .slice(before)
      .filter((l) => l.message === "a delivery's target was refused");
    expect(refused.map((l) => l.fields)).toEqual([
      expect.objectContaining({
        runId: run.runId,
        tenantId: run.tenantId,
        hostname: "private.test",
        address: "10.1.2.3",
      }),
    ]);
  });

  it("is not in a connect timeout's error, which names the addresses undici attempted", async () => {
    // A connect that never completes needs an address that drops SYNs, which loopback does not:
    // the stub fails the fetch as undici does at its connect timeout (onConnectTimeout's text).
    const timingOut = workerWith({
      fetch: async () => {
        throw new TypeError("fetch failed", {
          cause: new errors.ConnectTimeoutError(
            "Connect Timeout Error (attempted addresses: 127.0.0.1:443, 127.0.0.2:443, timeout: 10000ms)",
          ),
        });
      },
    });
    const run = await firstRun({ url: "https://twice.test/hook" }, timingOut);
    expect(run.status).toBe("FAILED");
    expect(run.error).toBe(
      "POST https://twice.test/hook: fetch failed: Connect Timeout Error (attempted addresses: twice.test:443, twice.test:443, timeout: 10000ms)",
    );
  });
});

describe("an async target's answers", () => {
  it("a 202 hands the run over; a 200 is its result; without the API's URL the run fails saying why", async () => {
    const url = (path: string) => `http://receiver.test:${httpPort}${path}`;
    const handedOver = await firstRun({ url: url("/taken-over"), mode: "async" });
    expect(handedOver.status).toBe("RUNNING");
    const answered = await firstRun({ url: url("/answered"), mode: "async" });
    expect(answered.status).toBe("SUCCEEDED");
    const noApi = workerWith({});
    const unconfigured = await firstRun({ url: url("/taken-over"), mode: "async" }, noApi);
    expect(unconfigured.status).toBe("DEAD");
    expect(unconfigured.error).toMatch(/^async mode needs the scheduler API's URL/);
  });
});

/**
 * A custom handler's unforeseen failure is logged whole (its stack): an error that carries the
 * request it failed (undici's cause) or the service's answer (an AWS SDK error's `$response`)
 * must not bring the tenant's credentials into the operator's log with it.
 */
describe("an unforeseen failure's log line", () => {
  it("holds the error's stack, not its cause's request headers or an SDK error's $response", async () => {
    const credential = "Bearer custom-handler-s3cret";
    const fetching: JobHandler = async () => {
      await fetch(`http://127.0.0.1:${closedPort}/hook`, {
        method: "POST",
        headers: { Authorization: credential },
        body: "{}",
      });
    };
    const sdkLike: JobHandler = async () => {
      throw Object.assign(new Error("The security token included in the request is invalid."), {
        name: "UnrecognizedClientException",
        $response: { statusCode: 400, headers: { authorization: credential } },
        $metadata: { httpStatusCode: 400 },
      });
    };
    const custom: WorkerDeps = {
      ...worker,
      handlers: new Map([...worker.handlers, ["noop", fetching], ["sleep", sdkLike]]),
    };
    for (const type of ["noop", "sleep"]) {
      const before = lines.length;
      const { job } = await createJob(
        f.engine,
        testJob({ type, payload: {}, schedule: { runAt: new Date().toISOString() } }),
      );
      await f.process(custom, await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000));
      const logged = lines.slice(before).filter((l) => l.message === UNFORESEEN);
      expect(logged).toHaveLength(1);
      expect(String(logged[0]?.fields.error)).toMatch(
        /^(TypeError: fetch failed|UnrecognizedClientException)/,
      );
      expect(JSON.stringify(lines.slice(before))).not.toContain("s3cret");
      const run = (await f.runs()).find((r) => r.jobId === job.jobId);
      expect(run?.error).toMatch(
        /^the job's handler failed unexpectedly \((TypeError|UnrecognizedClientException)\)/,
      );
    }
  });
});

describe("a receiver's Retry-After", () => {
  /**
   * The first run of a one-off due now delivering to `path`, retried after 1 s at the most by its
   * policy and never more than `maxDelayMs` later, and the time its next attempt is due after
   * its failure (a QUEUED run: every wait here is within the fast path's window).
   */
  async function retryWait(path: string, maxDelayMs = 600_000) {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "http",
        target: { url: `http://receiver.test:${httpPort}${path}` },
        payload: {},
        schedule: { runAt: new Date().toISOString() },
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 2, initialDelayMs: 1000, maxDelayMs },
        },
      }),
    );
    await f.process(worker, await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000));
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    const failed = runs.find((r) => r.attempt === 1);
    const next = runs.find((r) => r.attempt === 2);
    expect(failed?.status).toBe("FAILED");
    if (!failed?.finishedAt || !next) throw new Error(`job ${job.jobId} has no next attempt`);
    return Date.parse(next.dueAt) - Date.parse(failed.finishedAt);
  }

  it("in seconds on a 429 holds the retry back that long, past its backoff", async () => {
    expect(await retryWait("/slow-down")).toBe(90_000);
  });

  it("as a date on a 503 holds the retry back until then", async () => {
    const wait = await retryWait("/back-at");
    // The date has whole seconds, written before the failure's time was taken.
    expect(wait).toBeGreaterThan(110_000);
    expect(wait).toBeLessThanOrEqual(120_000);
  });

  it("further out than the job's maxDelaySeconds waits that long instead", async () => {
    expect(await retryWait("/slow-down-for-ever", 240_000)).toBe(240_000);
  });

  it("on an answer that is not retried changes nothing: the run is dead", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "http",
        target: { url: `http://receiver.test:${httpPort}/not-found-after` },
        payload: {},
        schedule: { runAt: new Date().toISOString() },
      }),
    );
    await f.process(worker, await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000));
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([[1, "DEAD"]]);
  });
});

/**
 * Review h75: a run's error, read through the run as the API, CLI and console show it, after a
 * real pass of the worker. The TLS case's fetch is a stub failing as undici does, since a name
 * mismatch is only reached with a certificate the worker trusts, which this machine cannot be.
 */
describe("masking a run's error (review h75)", () => {
  it("an async target's TLS name mismatch does not name the certificate's IP address", async () => {
    const mismatch = nameMismatch("receiver.test", "DNS:internal.example, IP Address:127.0.0.1");
    const mismatched = workerWith({
      apiUrl: "http://api.test",
      fetch: async () => {
        throw new TypeError("fetch failed", { cause: mismatch });
      },
    });
    const run = await firstRun({ url: "https://receiver.test/hook", mode: "async" }, mismatched);
    expect(run.status).toBe("FAILED");
    expect(run.error).toMatch(/^POST https:\/\/receiver\.test\/hook: fetch failed: Hostname\/IP/);
    expect(run.error).not.toMatch(RESOLVED);
  });

  it("a name that starts with a dotted quad, unknown to DNS, is named as the tenant wrote it", async () => {
    const run = await firstRun({ url: `http://10.9.8.7.nip.test:${httpPort}/hook` });
    expect(run.status).toBe("FAILED");
    expect(run.error).toBe(
      `POST http://10.9.8.7.nip.test:${httpPort}/hook: fetch failed: 10.9.8.7.nip.test has no A or AAAA record`,
    );
  });
});
