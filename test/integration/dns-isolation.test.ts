import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import { addressRefusal, dnsResolver } from "../../shared/execution/outbound.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob } from "../../shared/jobs/index.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { type FakeDns, fakeDns } from "../support/fake-dns.js";
import { waitFor } from "../support/wait.js";

/**
 * One tenant's webhook host whose DNS never answers (its own domain, black-holed) does not delay
 * another tenant's delivery from the same worker: a deployed worker's resolution of webhook hosts
 * runs on the event loop (c-ares), not on libuv's 4-thread pool, where six such lookups held
 * every thread for the system resolver's timeouts. The worker resolves through a fake DNS server
 * on loopback; 127.0.0.1, where the receiver listens, stands in for a public address.
 */
describe("a worker delivering to a black-holed host", () => {
  let f: EngineFixture;
  let dns: FakeDns;
  let server: Server;
  let port = 0;
  const received: { at: number; headers: IncomingHttpHeaders }[] = [];
  const stop = new AbortController();
  let loop: Promise<void>;

  beforeAll(async () => {
    f = await createEngineFixture();
    dns = await fakeDns({ "receiver.test": ["127.0.0.1"] }, ["blackhole.test"]);
    server = createServer((req, res) => {
      received.push({ at: Date.now(), headers: req.headers });
      req.resume();
      req.on("end", () => res.writeHead(204).end());
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
    const deployed = builtInHandlers(
      {
        signingSecrets: cachedSigningSecrets(f.engine),
        allowPrivateTargets: false,
        resolve: dnsResolver({ servers: [dns.server] }),
        addressRefusal: (address) => (address === "127.0.0.1" ? null : addressRefusal(address)),
      },
      f.engine.clock,
    ).get("http");
    if (!deployed) throw new Error("no http handler");
    loop = runWorkerLoop(f.workerDeps("dns-worker", { http: deployed }), {
      concurrency: 8,
      signal: stop.signal,
    });
  });
  afterAll(async () => {
    stop.abort();
    await loop;
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await dns.close();
    await f.destroy();
  });

  const webhookJob = (tenantId: string, host: string) =>
    createJob(
      f.engine,
      testJob({
        tenantId,
        type: "http",
        target: { url: `http://${host}:${port}/hook`, timeoutSeconds: 30 },
        schedule: { runAt: new Date().toISOString() },
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 1, initialDelayMs: 500, maxDelayMs: 500 },
        },
      }),
    );

  it("delivers another tenant's run within 1.5 s while six runs' names go unanswered", async () => {
    const attacker = await Promise.all(
      Array.from({ length: 6 }, () => webhookJob("tenant-attacker", "blackhole.test")),
    );
    // All six are resolving (each asked A and AAAA) before the other tenant's job is made.
    await waitFor(
      "six deliveries resolving blackhole.test",
      () => (dns.queries.get("blackhole.test") ?? 0) >= 12,
      10_000,
      20,
    );
    const createdAt = Date.now();
    const victim = await webhookJob("tenant-victim", "receiver.test");
    const delivery = await waitFor(
      "the other tenant's delivery",
      () => received.find((r) => r.headers["x-scheduler-job-id"] === victim.job.jobId),
      10_000,
      20,
    );
    expect(delivery.at - createdAt).toBeLessThan(1500);
    // The black-holed runs were still resolving when it arrived, and end at the 5 s bound,
    // retryably, each naming the host.
    const ids = new Set(attacker.map((a) => a.job.jobId));
    expect((await f.runs()).filter((r) => ids.has(r.jobId) && typeof r.error === "string")).toEqual(
      [],
    );
    const ended = await waitFor(
      "the black-holed runs to fail",
      async () => {
        const runs = (await f.runs()).filter((r) => ids.has(r.jobId));
        return runs.length === 6 && runs.every((r) => typeof r.error === "string")
          ? runs
          : undefined;
      },
      15_000,
    );
    for (const run of ended)
      expect(run.error).toBe(
        `POST http://blackhole.test:${port}/hook: fetch failed: blackhole.test: no A or AAAA answer within 5000 ms`,
      );
    expect(received.filter((r) => ids.has(String(r.headers["x-scheduler-job-id"])))).toEqual([]);
  }, 60_000);
});
