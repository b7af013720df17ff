import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob, replayDeadLetter, triggerJob } from "../../shared/jobs/index.js";
import { listDeadLetters } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { backoffCeiling } from "../../shared/retry.js";
import { tenantWebhookSecrets } from "../../shared/webhooks/secrets.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { waitFor } from "../support/wait.js";

const RETRY = { maxAttempts: 3, initialDelayMs: 1000, maxDelayMs: 2000 };

function runsOf(f: EngineFixture, jobId: string): Promise<Run[]> {
  return f
    .runs()
    .then((runs) => runs.filter((r) => r.jobId === jobId).sort((a, b) => a.attempt - b.attempt));
}

async function settled(
  f: EngineFixture,
  jobId: string,
  predicate: (runs: Run[]) => boolean,
  timeoutMs = 20_000,
) {
  return waitFor(
    `runs of ${jobId} to settle`,
    async () => {
      const runs = await runsOf(f, jobId);
      return predicate(runs) ? runs : undefined;
    },
    timeoutMs,
  );
}

describe("retries, dead letters and replay", () => {
  let f: EngineFixture;
  const stop = new AbortController();
  let loop: Promise<void>;
  beforeAll(async () => {
    f = await createEngineFixture();
    loop = runWorkerLoop(f.workerDeps("loop"), { concurrency: 4, signal: stop.signal });
  });
  afterAll(async () => {
    stop.abort();
    await loop;
    await f.destroy();
  });

  const oneOff = (type: string, payload: unknown) =>
    createJob(
      f.engine,
      testJob({
        type,
        payload,
        schedule: { runAt: new Date().toISOString() },
        policies: { ...testJob().policies, retry: RETRY },
      }),
    );

  it("a retryable failure runs attempts 1..maxAttempts within the backoff bounds, then goes DEAD with the last error", async () => {
    const { job } = await oneOff("fail", { times: 99, retryable: true });
    const runs = await settled(f, job.jobId, (rs) => rs.some((r) => r.status === "DEAD"));
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "FAILED"],
      [3, "DEAD"],
    ]);
    for (const [i, run] of runs.slice(1).entries()) {
      const previous = runs[i];
      // The retry is due within [0, ceiling] of the failure, and the message appears on that second.
      const delay = Date.parse(run.dueAt) - Date.parse(previous?.finishedAt ?? "");
      expect(delay).toBeGreaterThanOrEqual(0);
      expect(delay).toBeLessThanOrEqual(backoffCeiling(run.attempt - 1, RETRY));
      const lag = Date.parse(run.startedAt ?? "") - Date.parse(run.dueAt);
      expect(lag).toBeGreaterThanOrEqual(-50);
      expect(lag).toBeLessThan(1500);
    }
    const dead = runs[2];
    expect(dead?.error).toBe("fail: attempt 3 of 99 planned failures");
    expect(dead?.reason).toBe("gave up after 3 attempts: fail: attempt 3 of 99 planned failures");
    const listed = await listDeadLetters(f.engine, job.tenantId, { limit: 50 });
    expect(listed.items.map((r) => r.runId)).toContain(dead?.runId);
  }, 30_000);

  it("a non-retryable error goes DEAD at once", async () => {
    const { job } = await oneOff("fail", { times: 99, retryable: false });
    const runs = await settled(f, job.jobId, (rs) => rs.some((r) => r.status === "DEAD"));
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([[1, "DEAD"]]);
    expect(runs[0]?.reason).toMatch(/^non-retryable error: /);
  });

  it("replay makes a new attempt that can succeed, and takes the run off the dead letters", async () => {
    // Fails attempts 1–3 (all its retries), then succeeds: the replay is attempt 4.
    const { job } = await oneOff("fail", { times: 3, retryable: true });
    const runs = await settled(f, job.jobId, (rs) => rs.some((r) => r.status === "DEAD"));
    const dead = runs.at(-1);
    if (!dead) throw new Error("no dead run");
    const replay = (await replayDeadLetter(f.engine, job.tenantId, dead.runId)).run;
    expect(replay).toMatchObject({ attempt: 4, status: "QUEUED", scheduledFor: dead.scheduledFor });
    const after = await settled(f, job.jobId, (rs) => rs.some((r) => r.status === "SUCCEEDED"));
    expect(after.map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "FAILED"],
      [3, "DEAD"],
      [4, "SUCCEEDED"],
    ]);
    expect(after[2]?.replayedBy).toBe(replay.runId);
    const listed = await listDeadLetters(f.engine, job.tenantId, { limit: 50 });
    expect(listed.items.map((r) => r.runId)).not.toContain(dead.runId);
    await expect(replayDeadLetter(f.engine, job.tenantId, dead.runId)).rejects.toThrow(
      /already replayed/,
    );
    const completed = (await f.jobs()).find((j) => j.jobId === job.jobId);
    expect(completed?.status).toBe("COMPLETED");
  }, 30_000);
});

interface Delivery {
  readonly headers: IncomingMessage["headers"];
  readonly body: string;
}

describe("job types", () => {
  let f: EngineFixture;
  let server: Server;
  let base: string;
  const deliveries: Delivery[] = [];
  const stop = new AbortController();
  let loop: Promise<void>;

  beforeAll(async () => {
    f = await createEngineFixture();
    server = createServer((req, res) => {
      let body = "";
      req.on("data", (chunk) => {
        body += chunk;
      });
      req.on("end", () => {
        deliveries.push({ headers: req.headers, body });
        const status = Number(
          new URL(req.url ?? "/", "http://x").searchParams.get("status") ?? "200",
        );
        const hang = req.url?.includes("hang");
        if (hang) return; // never answers: the client's timeout must fire
        res.writeHead(status).end(`status ${status}`);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    loop = runWorkerLoop(f.workerDeps("loop"), { concurrency: 4, signal: stop.signal });
  });
  afterAll(async () => {
    stop.abort();
    await loop;
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await f.destroy();
  });

  const webhook = (path: string, timeoutSeconds = 5) =>
    createJob(
      f.engine,
      testJob({
        type: "http",
        payload: { order: 42, note: "ünïcode" },
        target: { url: `${base}${path}`, headers: { "X-Custom": "yes" }, timeoutSeconds },
        schedule: { runAt: new Date().toISOString() },
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 2, initialDelayMs: 500, maxDelayMs: 500 },
        },
      }),
    );

  it("http posts the payload with the idempotency key, attempt and a verifiable signature; 2xx succeeds", async () => {
    const { job } = await webhook("/ok?status=204");
    const [run] = await settled(f, job.jobId, (rs) => rs[0]?.status === "SUCCEEDED");
    const delivery = deliveries.find((d) => d.headers["x-scheduler-job-id"] === job.jobId);
    if (!delivery || !run) throw new Error("no delivery");
    expect(JSON.parse(delivery.body)).toEqual({ order: 42, note: "ünïcode" });
    expect(delivery.headers["idempotency-key"]).toBe(`${job.jobId}@${run.scheduledFor}`);
    expect(delivery.headers["x-scheduler-attempt"]).toBe("1");
    expect(delivery.headers["x-custom"]).toBe("yes");
    // The documented check (Standard Webhooks) with the tenant's secret, made on first use.
    expect(delivery.headers["webhook-id"]).toBe(delivery.headers["idempotency-key"]);
    const { current } = await tenantWebhookSecrets(f.engine, job.tenantId);
    const headers = {
      "webhook-id": String(delivery.headers["webhook-id"]),
      "webhook-timestamp": String(delivery.headers["webhook-timestamp"]),
      "webhook-signature": String(delivery.headers["webhook-signature"]),
    };
    expect(new Webhook(current).verify(delivery.body, headers)).toEqual({
      order: 42,
      note: "ünïcode",
    });
    expect(delivery.headers["x-scheduler-signature"]).toBeUndefined();
  });

  it.each([
    ["500", true, "/fail?status=500"],
    ["429", true, "/busy?status=429"],
    ["408", true, "/slow?status=408"],
    ["404", false, "/missing?status=404"],
    ["400", false, "/bad?status=400"],
  ])("an HTTP %s answer is retryable: %s", async (status, retryable, path) => {
    const { job } = await webhook(path);
    const runs = await settled(f, job.jobId, (rs) => rs.some((r) => r.status === "DEAD"));
    expect(runs.map((r) => r.status)).toEqual(retryable ? ["FAILED", "DEAD"] : ["DEAD"]);
    expect(runs[0]?.error).toMatch(new RegExp(`HTTP ${status}`));
  });

  it("a timeout and a refused connection are retryable", async () => {
    const { job: hanging } = await webhook("/hang", 1);
    const { job: refused } = await createJob(
      f.engine,
      testJob({
        type: "http",
        target: { url: "http://127.0.0.1:2/nothing-listens" },
        schedule: { runAt: new Date().toISOString() },
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 2, initialDelayMs: 500, maxDelayMs: 500 },
        },
      }),
    );
    const timedOut = await settled(f, hanging.jobId, (rs) => rs.some((r) => r.status === "DEAD"));
    expect(timedOut.map((r) => r.status)).toEqual(["FAILED", "DEAD"]);
    expect(timedOut[0]?.error).toMatch(/timed out after 1 s/);
    const unreachable = await settled(f, refused.jobId, (rs) =>
      rs.some((r) => r.status === "DEAD"),
    );
    expect(unreachable.map((r) => r.status)).toEqual(["FAILED", "DEAD"]);
  });

  it("noop succeeds, sleep sleeps for its ms, fail fails its first n attempts", async () => {
    const { job: noop } = await createJob(
      f.engine,
      testJob({ type: "noop", schedule: { runAt: new Date().toISOString() } }),
    );
    const { job: sleeper } = await createJob(
      f.engine,
      testJob({
        type: "sleep",
        payload: { ms: 700 },
        schedule: { runAt: new Date().toISOString() },
      }),
    );
    const { job: flaky } = await createJob(
      f.engine,
      testJob({
        type: "fail",
        payload: { times: 1, retryable: true },
        schedule: { runAt: new Date().toISOString() },
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 3, initialDelayMs: 500, maxDelayMs: 500 },
        },
      }),
    );
    expect((await settled(f, noop.jobId, (rs) => rs[0]?.status === "SUCCEEDED"))[0]?.attempt).toBe(
      1,
    );
    const [slept] = await settled(f, sleeper.jobId, (rs) => rs[0]?.status === "SUCCEEDED");
    expect(slept?.durationMs).toBeGreaterThanOrEqual(700);
    const flakyRuns = await settled(f, flaky.jobId, (rs) =>
      rs.some((r) => r.status === "SUCCEEDED"),
    );
    expect(flakyRuns.map((r) => r.status)).toEqual(["FAILED", "SUCCEEDED"]);
  });
});

describe("priority", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("the worker loop drains high before normal before low", async () => {
    const order: string[] = [];
    const jobs = await Promise.all(
      (["low", "normal", "high"] as const).map(async (priority) => {
        // Far-future schedules: only the triggered runs below exist.
        const { job } = await createJob(
          f.engine,
          testJob({
            type: "record",
            priority,
            payload: { priority },
            schedule: { runAt: "2099-01-01T00:00:00.000Z" },
          }),
        );
        return job;
      }),
    );
    for (const job of jobs)
      for (let i = 0; i < 4; i++) await triggerJob(f.engine, job.tenantId, job.jobId);
    const stop = new AbortController();
    const deps = f.workerDeps("loop", {
      record: async (ctx) => {
        order.push((ctx.payload as { priority: string }).priority);
      },
    });
    const loop = runWorkerLoop(deps, { concurrency: 1, signal: stop.signal });
    await waitFor("all 12 runs", () => order.length === 12);
    stop.abort();
    await loop;
    expect(order).toEqual([
      ...Array(4).fill("high"),
      ...Array(4).fill("normal"),
      ...Array(4).fill("low"),
    ]);
  });
});

describe("a worker near its own deadline", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("cuts a run short before the worker (a Lambda) is stopped, and records a retryable failure", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "sleep",
        payload: { ms: 20_000 },
        schedule: { runAt: new Date().toISOString() },
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // 11 s left: the run gets 1 s, leaving the 10 s margin to record its result.
    const deps = { ...f.workerDeps("lambda"), remainingMs: () => 11_000 };
    const started = Date.now();
    expect(await f.process(deps, received)).toBe("ack");
    expect(Date.now() - started).toBeLessThan(5000);
    const runs = await runsOf(f, job.jobId);
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "QUEUED"],
    ]);
    expect(runs[0]?.error).toBe("stopped after 1 s: the worker's own time limit was near");
  });
});
