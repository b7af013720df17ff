import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { ProvisionedThroughputExceededException } from "@aws-sdk/client-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import type { WorkerDeps } from "../../shared/execution/worker.js";
import {
  type Logger,
  METRICS,
  silentObservability,
  TENANT_LOG_EVENTS,
} from "../../shared/observability.js";
import { receiveRuns } from "../../shared/queue/work-queue.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import {
  type ApiHarness,
  JOB_TYPES,
  KEY_A,
  KEY_B,
  laterJob,
  startApi,
  TENANT_A,
} from "../api/support.js";
import { withFaults } from "../support/faults.js";

/**
 * What the API and the worker log while a tenant's requests, deliveries and async runs pass
 * through them, captured line by line: the operator's logs, read by people and tools no tenant
 * chose, and counted per tenant by the stack's Contributor Insights rules.
 */
interface Line {
  readonly level: string;
  readonly message: string;
  readonly fields: Record<string, unknown>;
}

const lines: Line[] = [];
const capturing: Logger = {
  debug: (message, fields = {}) => void lines.push({ level: "debug", message, fields }),
  info: (message, fields = {}) => void lines.push({ level: "info", message, fields }),
  warn: (message, fields = {}) => void lines.push({ level: "warn", message, fields }),
  error: (message, fields = {}) => void lines.push({ level: "error", message, fields }),
};

let api: ApiHarness;
let worker: WorkerDeps;
let receiver: Server;
let receiverUrl: string;
/** What the receiver was sent, in order: its headers and body. */
const received: { headers: Record<string, unknown>; body: string }[] = [];
/** Whether the receiver takes a delivery over (202) or fails it, echoing what it was sent. */
let receiverMode: "echo-500" | "async-202" = "echo-500";

beforeAll(async () => {
  api = await startApi({ obs: { ...silentObservability, log: capturing } });
  receiver = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      received.push({ headers: { ...request.headers }, body });
      if (receiverMode === "async-202") {
        response.writeHead(202).end();
        return;
      }
      // An error page that quotes the whole request back, as some frameworks' debug pages do.
      response.writeHead(500, { "Content-Type": "text/plain" });
      response.end(`failed ${request.url}\n${JSON.stringify(request.headers)}\n${body}`);
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  const engine = api.fixture.engine;
  worker = {
    engine,
    workerId: "log-secrets",
    handlers: builtInHandlers(
      {
        signingSecrets: cachedSigningSecrets(engine, { ttlMs: 0 }),
        allowPrivateTargets: true,
        apiUrl: api.server.url,
        leaseSeconds: 60,
      },
      engine.clock,
    ),
  };
});
afterAll(async () => {
  await new Promise((resolve) => receiver?.close(resolve));
  await api?.close();
});

/** Runs the job's next queued message as the worker does. */
async function runNext(jobId: string, by: WorkerDeps = worker): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    const batch = await receiveRuns(api.fixture.engine.sqs, api.fixture.engine.queues.normal, {
      max: 10,
      waitSeconds: 1,
    });
    const mine = batch.filter((r) => r.message.jobId === jobId);
    for (const run of mine) await api.fixture.process(by, run);
    if (mine.length > 0) return;
  }
  throw new Error(`no message for job ${jobId}`);
}

const logged = () => lines.map((line) => JSON.stringify(line)).join("\n");

/**
 * None may carry a tenant's credentials: its API key, its webhook signing secrets (read and
 * rotated), its target's headers and URL path, its payload, its receiver's answer echoing all of
 * those, a replay's Idempotency-Key, or an async run's token, good or forged.
 */
describe("secrets in the logs", () => {
  it("no line carries the API key, a webhook secret, a target's credentials, a payload, a receiver's answer or a run token", async () => {
    const secrets: string[] = [KEY_A];
    const secret = await api.call("GET", "/webhook-secret");
    expect(secret.status, secret.text).toBe(200);
    secrets.push((secret.body as { secret: string }).secret);
    const rotated = await api.call("POST", "/webhook-secret/rotate");
    expect(rotated.status, rotated.text).toBe(200);
    secrets.push((rotated.body as { secret: string }).secret);
    expect(secrets.slice(1).every((s) => s.startsWith("whsec_"))).toBe(true);

    const created = await api.call("POST", "/jobs", {
      body: {
        type: "http",
        name: "nightly export",
        schedule: { runAt: new Date().toISOString() },
        target: {
          url: `${receiverUrl}/hooks/path-credential-s3cret?sig=query-credential-s3cret`,
          headers: { Authorization: "Bearer header-credential-s3cret", "X-Api-Key": "key-s3cret" },
        },
        payload: { password: "payload-s3cret" },
        retry: { maxAttempts: 2, initialDelaySeconds: 0 },
      },
    });
    expect(created.status, created.text).toBe(201);
    const jobId = (created.body as { id: string }).id;
    await runNext(jobId);
    await runNext(jobId);
    const runs = await api.call("GET", `/jobs/${jobId}/runs`);
    const items = (runs.body as { items: { runId: string; status: string; error: string }[] })
      .items;
    expect(items.map((r) => r.status).sort()).toEqual(["dead", "failed"]);
    // The receiver was sent each of them, signed, and quoted them back into the runs' errors.
    expect(received.at(-1)?.body).toContain("payload-s3cret");
    expect(items[0]?.error).toContain("header-credential-s3cret");
    secrets.push("s3cret");

    // Replayed from the dead-letter list, as an operator or the tenant does.
    const dead = items.find((r) => r.status === "dead");
    const replay = await api.call("POST", `/dead-letters/${dead?.runId}/replay`, {
      headers: { "Idempotency-Key": "replay-key-s3cret" },
    });
    expect(replay.status, replay.text).toBe(202);
    await runNext(jobId);

    // An async run: its token, a forged one, and one of another run.
    receiverMode = "async-202";
    const asyncJob = await api.call("POST", "/jobs", {
      body: {
        type: "http",
        schedule: { runAt: new Date().toISOString() },
        target: { url: `${receiverUrl}/long`, mode: "async" },
        timeoutSeconds: 3600,
      },
    });
    expect(asyncJob.status, asyncJob.text).toBe(201);
    await runNext((asyncJob.body as { id: string }).id);
    const handOff = received.at(-1)?.headers ?? {};
    const token = String(handOff["x-scheduler-run-token"]);
    const completeUrl = String(handOff["x-scheduler-complete-url"]);
    expect(token.length).toBeGreaterThan(20);
    secrets.push(token);
    for (const bearer of [`${token}x`, "forged-token-s3cret", token]) {
      await fetch(completeUrl, {
        method: "POST",
        headers: { Authorization: `Bearer ${bearer}`, "Content-Type": "application/json" },
        body: JSON.stringify({ status: "failed", error: "async-error-s3cret" }),
      });
    }

    expect(lines.length).toBeGreaterThan(0);
    const text = logged();
    for (const s of secrets) expect(text).not.toContain(s);
    expect(text).not.toContain("whsec_");
  });
});

/**
 * A handler's failure it did not report as a JobError (the webhook handler's read of the tenant's
 * signing secret refused, a custom handler's bug): its text is the deployment's, not the tenant's.
 * AWS's errors name the account, roles, keys and tables; the tenant reads the run's error in its
 * history and dead letters, the operator reads the worker's log.
 */
describe("a handler's unforeseen failure", () => {
  it("a delivery whose signing secret cannot be read: the run's error names no internals, the worker's log has the cause under the run's keys", async () => {
    const denied =
      "User: arn:aws:sts::123456789012:assumed-role/Scheduler-prod-WorkerRole/worker is not authorized to perform: kms:Decrypt on resource: arn:aws:kms:eu-west-1:123456789012:key/0a1b2c3d";
    const refusedSecrets: WorkerDeps = {
      ...worker,
      handlers: builtInHandlers(
        {
          signingSecrets: async () => {
            throw Object.assign(new Error(denied), { name: "AccessDeniedException" });
          },
          allowPrivateTargets: true,
        },
        api.fixture.engine.clock,
      ),
    };
    receiverMode = "echo-500";
    const created = await api.call("POST", "/jobs", {
      body: {
        type: "http",
        schedule: { runAt: new Date().toISOString() },
        target: { url: `${receiverUrl}/signed` },
        retry: { maxAttempts: 1 },
      },
    });
    expect(created.status, created.text).toBe(201);
    const jobId = (created.body as { id: string }).id;
    const before = lines.length;
    await runNext(jobId, refusedSecrets);

    const runs = await api.call("GET", `/jobs/${jobId}/runs`);
    const [run] = (runs.body as { items: { runId: string; status: string; error: string }[] })
      .items;
    expect(run?.status).toBe("dead");
    expect(run?.error).not.toMatch(/arn:|123456789012|not authorized/);
    expect(run?.error).toBe(
      "the job's handler failed unexpectedly (AccessDeniedException); the operator's worker log has the details",
    );
    const failed = lines
      .slice(before)
      .filter((l) => l.message === "a job's handler failed unexpectedly");
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({
      level: "error",
      fields: { tenantId: TENANT_A, jobId, runId: run?.runId, attempt: 1, type: "http" },
    });
    expect(String(failed[0]?.fields.error)).toContain(denied);
  });
});

describe("per-tenant lines of an async target's calls", () => {
  it("a 429 an async target's call is answered is logged with the run's tenant", async () => {
    receiverMode = "async-202";
    const created = await api.call("POST", "/jobs", {
      body: {
        type: "http",
        schedule: { runAt: new Date().toISOString() },
        target: { url: `${receiverUrl}/long`, mode: "async" },
        timeoutSeconds: 3600,
      },
    });
    expect(created.status, created.text).toBe(201);
    await runNext((created.body as { id: string }).id);
    const handOff = received.at(-1)?.headers ?? {};
    const token = String(handOff["x-scheduler-run-token"]);
    const heartbeatUrl = String(handOff["x-scheduler-heartbeat-url"]);
    const setRate = (body: Record<string, unknown>) =>
      api.call("PUT", `/tenants/${TENANT_A}/quotas`, { body });
    expect((await setRate({ requestsPerSecond: 1 })).status).toBe(200);
    const before = lines.length;
    try {
      const beats = await Promise.all(
        Array.from({ length: 8 }, () =>
          fetch(heartbeatUrl, { method: "POST", headers: { Authorization: `Bearer ${token}` } }),
        ),
      );
      expect(beats.filter((b) => b.status === 429).length).toBeGreaterThanOrEqual(1);
    } finally {
      const deadline = Date.now() + 10_000;
      while ((await setRate({})).status === 429 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
    const throttled = lines
      .slice(before)
      .filter(
        (l) => l.message === TENANT_LOG_EVENTS.requestThrottled && l.fields.path !== undefined,
      )
      .filter((l) => String(l.fields.path).endsWith("/heartbeat"));
    expect(throttled.length).toBeGreaterThanOrEqual(1);
    for (const line of throttled) expect(line.fields.tenantId).toBe(TENANT_A);
  });
});

/**
 * A 503 `busy` answers a request that met another request's write (a tenant's two rotations of
 * its webhook secret at once, its edits of one job): its own contention, which a retry passes.
 * API Gateway counts it among the 5xx the `ApiServerErrors` alarm watches, so the API counts
 * them (`BusyAnswers`) for the alarm to leave out, and logs them as the refusals they are, not as
 * its failures: a tenant must not page the operator, or fill the log the alarm points to, at will.
 */
describe("busy answers", () => {
  it("are counted as BusyAnswers and logged as busy, not as failed requests", async () => {
    const before = lines.length;
    const answers = await Promise.all(
      // Tenant B's: tenant A's request rate is lowered by the other cases here.
      Array.from({ length: 20 }, () => api.call("POST", "/webhook-secret/rotate", { key: KEY_B })),
    );
    const busy = answers.filter((a) => a.status === 503);
    expect(busy.length).toBeGreaterThanOrEqual(1);
    expect(busy[0]?.body).toMatchObject({ error: { code: "busy" } });
    expect(api.fixture.metrics.sum(METRICS.busyAnswers)).toBe(busy.length);
    const logged = lines.slice(before);
    expect(logged.filter((l) => l.level === "error")).toEqual([]);
    expect(logged.filter((l) => l.message === "request busy")).toHaveLength(busy.length);
    expect(logged.find((l) => l.message === "request busy")?.fields).toMatchObject({
      tenantId: "tenant-b",
      method: "POST",
      path: "/webhook-secret/rotate",
    });
  });

  it("a write whose storage stayed throttled past the SDK's retries is a server error: not counted busy, logged as failed with its cause", async () => {
    // The table's or the account's capacity ran out: an outage of the API's, not a tenant's own
    // contention; the server-error alarm must count it, and its log line must say why.
    const throttled = withFaults(api.fixture.engine, {
      operation: "PutItem",
      times: 1,
      // The job's own put (a job due a day on is its due entry's put and then its own).
      match: (input) => (input.Item as { sk?: unknown } | undefined)?.sk === "JOB",
      error: () =>
        new ProvisionedThroughputExceededException({
          message: "The level of configured provisioned throughput for the table was exceeded",
          $metadata: { httpStatusCode: 400, attempts: 3 },
        }),
    });
    const busyBefore = api.fixture.metrics.sum(METRICS.busyAnswers);
    const before = lines.length;
    try {
      const app = createApiApp({
        engine: throttled.engine,
        jobTypes: JOB_TYPES,
        authenticate: bearerAuthenticator(new Map([[KEY_B, "tenant-b"]])),
      });
      const answer = await app.request("/jobs", {
        method: "POST",
        headers: { Authorization: `Bearer ${KEY_B}`, "Content-Type": "application/json" },
        body: JSON.stringify(laterJob()),
      });
      expect(answer.status).toBe(503);
      expect(throttled.injected.count).toBe(1);
    } finally {
      throttled.destroy();
    }
    expect(api.fixture.metrics.sum(METRICS.busyAnswers) - busyBefore).toBe(0);
    const logged = lines.slice(before);
    expect(logged.filter((l) => l.message === "request busy")).toEqual([]);
    const failed = logged.filter((l) => l.level === "error" && l.message === "api request failed");
    expect(failed).toHaveLength(1);
    expect(String(failed[0]?.fields.error)).toContain("ProvisionedThroughputExceeded");
    // Whose request failed: the alarm's first question, and the tenant to tell.
    expect(failed[0]?.fields).toMatchObject({
      tenantId: "tenant-b",
      method: "POST",
      path: "/jobs",
    });
  });

  it("a batch's job whose write failed is logged with the caller's tenant", async () => {
    const refused = withFaults(api.fixture.engine, {
      operation: "TransactWriteItems",
      times: 1,
      reason: "ValidationError",
    });
    const before = lines.length;
    try {
      const app = createApiApp({
        engine: refused.engine,
        jobTypes: JOB_TYPES,
        authenticate: bearerAuthenticator(new Map([[KEY_B, "tenant-b"]])),
      });
      const answer = await app.request("/jobs:batch", {
        method: "POST",
        headers: { Authorization: `Bearer ${KEY_B}`, "Content-Type": "application/json" },
        body: JSON.stringify({ jobs: [{ ...laterJob(), idempotencyKey: "batch-log-key" }] }),
      });
      expect(answer.status).toBe(200);
      const { results } = (await answer.json()) as { results: { status: number }[] };
      expect(results.map((r) => r.status)).toEqual([500]);
      expect(refused.injected.count).toBe(1);
    } finally {
      refused.destroy();
    }
    const failed = lines
      .slice(before)
      .filter((l) => l.message === "a job of a batch create failed");
    expect(failed).toHaveLength(1);
    expect(failed[0]?.fields).toMatchObject({ tenantId: "tenant-b", index: 0 });
  });
});

describe("per-tenant lines of a tenant over its request rate", () => {
  it("a 429 for the tenant's requestsPerSecond is logged with the tenant", async () => {
    const setRate = (body: Record<string, unknown>) =>
      api.call("PUT", `/tenants/${TENANT_A}/quotas`, { body });
    expect((await setRate({ requestsPerSecond: 1 })).status).toBe(200);
    const before = lines.length;
    try {
      const answers = await Promise.all(
        Array.from({ length: 8 }, () => api.call("GET", "/jobs?limit=1")),
      );
      expect(answers.filter((a) => a.status === 429).length).toBeGreaterThanOrEqual(1);
    } finally {
      const deadline = Date.now() + 10_000;
      while ((await setRate({})).status === 429 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
    const throttled = lines
      .slice(before)
      .filter((l) => l.message === TENANT_LOG_EVENTS.requestThrottled && l.fields.path === "/jobs");
    expect(throttled.length).toBeGreaterThanOrEqual(1);
    for (const line of throttled)
      expect(line.fields).toMatchObject({ tenantId: TENANT_A, code: "rate_limited" });
  });
});

/**
 * Runs last, over every line the cases above made the API and the worker write: failed and dead
 * deliveries, a replay, async hand-overs, a handler's unforeseen failure. An operator follows a
 * run by one query over the log groups, by its `runId` or its `tenantId`.
 */
describe("lines about a run", () => {
  it("each names it by tenantId, jobId, runId and attempt", () => {
    const aboutARun = lines.filter((l) => "runId" in l.fields);
    expect(aboutARun.length).toBeGreaterThan(5);
    const lacking = aboutARun
      .filter((l) => ["tenantId", "jobId", "runId", "attempt"].some((key) => !(key in l.fields)))
      .map((l) => l.message);
    expect(lacking).toEqual([]);
  });
});
