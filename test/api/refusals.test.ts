import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import { receiveRuns } from "../../shared/queue/work-queue.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import { scanTable } from "../support/namespace.js";
import {
  type ApiHarness,
  deadRunVia,
  expectError,
  KEY_B,
  laterJob,
  runOnce,
  startApi,
} from "./support.js";

/**
 * The house rule, swept over every mutating route: a refused request (400, 403, 404, 409, 412,
 * 428) answers its 4xx and writes nothing. Each case reads every item of every table and every
 * queue's message count before and after the request, with jobs in the states that matter
 * (active, recurring, paused, cancelled, completed, with a run queued, with a dependent, dead).
 */
let api: ApiHarness;

interface Jobs {
  readonly active: string;
  readonly recurring: string;
  readonly paused: string;
  readonly cancelled: string;
  readonly completed: string;
  readonly withQueuedRun: string;
  readonly upstream: string;
  readonly dependent: string;
  readonly dead: string;
  /** Tenant B's one job: B's quotas allow one active job at most, and priority low. */
  readonly ofB: string;
}
let jobs: Jobs;
let deadRunId: string;
let endedRunId: string;
let queuedRunId: string;
/** An async http job's run, RUNNING at its target (which took it over with a 202), and its token. */
let running: { jobId: string; runId: string; token: string };
/** The async target: answers 202 to every delivery and keeps each run's token. */
let target: Server;
const tokens: string[] = [];

const byKey = (items: Record<string, unknown>[]) =>
  items
    .map((item) => ({ key: `${String(item.pk)}|${String(item.sk)}`, item }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .map(({ item }) => item);

/**
 * Documented bookkeeping: a create refused over `activeJobs` or `runsPerMinute` first recounts the
 * tenant's usage (docs/architecture.md, "Quotas"), writing the usage item afresh with the
 * recount's id and time and no `changes` count, which a reservation and its give-back raise
 * otherwise; the counts themselves are compared.
 */
function withoutRecountMark(item: Record<string, unknown>): Record<string, unknown> {
  if (!String(item.pk).startsWith("QUOTA#") || item.sk !== "USAGE") return item;
  const { recount: _recount, recountedAt: _recountedAt, changes: _changes, ...counts } = item;
  return counts;
}

/** Every item of every table, and how many messages each queue holds. */
async function snapshot() {
  const { engine, dlqUrl } = api.fixture;
  const [jobItems, runItems, secretItems] = await Promise.all([
    scanTable(engine.doc, engine.tables.jobs),
    scanTable(engine.doc, engine.tables.runs),
    scanTable(engine.doc, engine.tables.webhookSecrets),
  ]);
  const queues = await Promise.all(
    [engine.queues.high, engine.queues.normal, engine.queues.low, dlqUrl].map(async (url) => {
      const depth = await api.fixture.queueDepth(url);
      return depth.visible + depth.delayed + depth.inFlight;
    }),
  );
  return {
    jobs: byKey(jobItems.map(withoutRecountMark)),
    runs: byKey(runItems),
    secrets: byKey(secretItems),
    queues,
  };
}

interface Request {
  readonly key?: string | null;
  readonly body?: unknown;
  /** Sent as it is, in place of `body`. */
  readonly raw?: string | Uint8Array;
  readonly headers?: Record<string, string>;
}

/** Sends the request, expects its refusal, and that nothing stored changed. */
async function refused(
  method: string,
  path: string,
  request: Request,
  status: number,
  expected: { code?: string; field?: string } = {},
) {
  const before = await snapshot();
  const reply = await api.call(method, path, request);
  const error = expectError(reply, status, expected);
  expect(await snapshot()).toEqual(before);
  return error;
}

async function create(body: Record<string, unknown>, key?: string): Promise<string> {
  const reply = await api.call("POST", "/jobs", { body, ...(key ? { key } : {}) });
  expect(reply.status, reply.text).toBe(201);
  return JobSchema.parse(reply.body).id;
}

async function ok(method: string, path: string, request: Request = {}) {
  const reply = await api.call(method, path, request);
  expect(reply.status, reply.text).toBeLessThan(300);
  return reply;
}

const runsOf = async (jobId: string) =>
  RunPageSchema.parse((await ok("GET", `/jobs/${jobId}/runs`)).body).items;

const UNKNOWN_JOB = "01ZZZZZZZZZZZZZZZZZZZZZZZZ";
const V1 = { "If-Match": '"1"' };

beforeAll(async () => {
  api = await startApi();
  await ok("PUT", "/tenants/tenant-b/quotas", {
    body: { activeJobs: 1, maxPriority: "low", runsPerMinute: 10 },
  });
  const active = await create(laterJob());
  const recurring = await create({
    type: "noop",
    schedule: { cron: "0 3 1 1 *", timezone: "UTC" },
  });
  const paused = await create(laterJob());
  await ok("POST", `/jobs/${paused}/pause`);
  const cancelled = await create(laterJob());
  await ok("POST", `/jobs/${cancelled}/cancel`);
  const completed = await create({ type: "noop", schedule: { runAt: new Date().toISOString() } });
  await runOnce(api, completed);
  // Due in 40 s: the create claims it and sends its message (delayed) at once.
  const withQueuedRun = await create(
    laterJob({ schedule: { runAt: new Date(Date.now() + 40_000).toISOString() } }),
  );
  const upstream = await create({ type: "noop", schedule: { cron: "0 4 1 1 *", timezone: "UTC" } });
  const dependent = await create({
    type: "noop",
    schedule: { after: { jobs: [upstream], on: "success" } },
  });
  const { jobId: dead } = await deadRunVia(api);
  const ofB = await create(laterJob({ priority: "low" }), KEY_B);
  jobs = {
    active,
    recurring,
    paused,
    cancelled,
    completed,
    withQueuedRun,
    upstream,
    dependent,
    dead,
    ofB,
  };
  const [deadRun] = await runsOf(dead);
  const [endedRun] = await runsOf(completed);
  const [queuedRun] = await runsOf(withQueuedRun);
  if (!deadRun || !endedRun || !queuedRun) throw new Error("the runs the sweep needs are missing");
  expect([deadRun.status, endedRun.status, queuedRun.status]).toEqual([
    "dead",
    "succeeded",
    "queued",
  ]);
  running = await runningAtTarget();
  deadRunId = deadRun.runId;
  endedRunId = endedRun.runId;
  queuedRunId = queuedRun.runId;
});
afterAll(async () => {
  await new Promise((resolve) => target?.close(resolve));
  await api?.close();
});

/** An async http job due now, delivered by the worker code to the target, which takes it over. */
async function runningAtTarget(): Promise<{ jobId: string; runId: string; token: string }> {
  target = createServer((request, response) => {
    tokens.push(String(request.headers["x-scheduler-run-token"] ?? ""));
    request.resume();
    request.on("end", () => response.writeHead(202).end());
  });
  await new Promise<void>((resolve) => target.listen(0, "127.0.0.1", resolve));
  const { port } = target.address() as AddressInfo;
  const jobId = await create({
    type: "http",
    schedule: { runAt: new Date().toISOString() },
    target: { url: `http://127.0.0.1:${port}/long`, mode: "async" },
    timeoutSeconds: 3600,
  });
  const { engine } = api.fixture;
  const worker = {
    engine,
    workerId: "refusals-worker",
    handlers: builtInHandlers(
      {
        signingSecrets: cachedSigningSecrets(engine),
        allowPrivateTargets: true,
        apiUrl: api.server.url,
        leaseSeconds: engine.settings.leaseMs / 1000,
      },
      engine.clock,
    ),
  };
  for (let tries = 0; tries < 20 && tokens.length === 0; tries++) {
    const batch = await receiveRuns(engine.sqs, engine.queues.normal, { max: 10, waitSeconds: 1 });
    for (const received of batch.filter((r) => r.message.jobId === jobId)) {
      await api.fixture.process(worker, received);
    }
  }
  const [run] = await runsOf(jobId);
  const [token] = tokens;
  if (run?.status !== "running" || token === undefined) throw new Error("the run is not running");
  return { jobId, runId: run.runId, token };
}

describe("POST /jobs refused writes nothing", () => {
  it("a bad field (400)", async () => {
    await refused(
      "POST",
      "/jobs",
      { body: { type: "noop", schedule: { cron: "61 * * * *" } } },
      400,
      {
        code: "validation_failed",
      },
    );
  });
  it("an upstream that does not exist, or is cancelled (400)", async () => {
    for (const upstream of [UNKNOWN_JOB, jobs.cancelled]) {
      await refused(
        "POST",
        "/jobs",
        { body: { type: "noop", schedule: { after: { jobs: [upstream], on: "success" } } } },
        400,
        { field: "schedule.after.jobs" },
      );
    }
  });
  it("an idempotent repeat with another body (409), a job already created with its key", async () => {
    const headers = { "Idempotency-Key": "refusals-create-1" };
    await ok("POST", "/jobs", { body: laterJob({ name: "first" }), headers });
    await refused("POST", "/jobs", { body: laterJob({ name: "second" }), headers }, 409, {
      code: "idempotency_conflict",
    });
  });
  it("over maxPriority, and over activeJobs (403)", async () => {
    await refused("POST", "/jobs", { key: KEY_B, body: laterJob({ priority: "high" }) }, 403, {
      code: "quota_exceeded",
    });
    await refused("POST", "/jobs", { key: KEY_B, body: laterJob({ priority: "low" }) }, 403, {
      code: "quota_exceeded",
    });
  });
});

describe("POST /jobs:batch refused writes nothing", () => {
  it("a body not of the shape (400): empty, or 26 jobs", async () => {
    await refused("POST", "/jobs:batch", { body: { jobs: [] } }, 400, { field: "jobs" });
    const many = Array.from({ length: 26 }, () => laterJob());
    await refused("POST", "/jobs:batch", { body: { jobs: many } }, 400, { field: "jobs" });
  });
  it("every job of it refused: bad input, a key with another body, over quota, a bad upstream", async () => {
    await ok("POST", "/jobs", {
      key: KEY_B,
      body: laterJob({ name: "b-keyed", priority: "low" }),
      headers: { "Idempotency-Key": "refusals-batch-b" },
    }).catch(() => undefined);
    const before = await snapshot();
    const reply = await api.call("POST", "/jobs:batch", {
      key: KEY_B,
      body: {
        jobs: [
          { type: "noop", schedule: { cron: "61 * * * *" } },
          laterJob({ priority: "high" }),
          laterJob({ priority: "low" }),
          { type: "noop", schedule: { after: { jobs: [UNKNOWN_JOB], on: "success" } } },
        ],
      },
    });
    expect(reply.status, reply.text).toBe(200);
    const statuses = (reply.body as { results: { status: number }[] }).results.map((r) => r.status);
    expect(statuses).toEqual([400, 403, 403, 400]);
    expect(await snapshot()).toEqual(before);
  });
});

describe("POST /jobs:batch: a key used before with another body", () => {
  it("is that job's 409 and writes nothing, its repeat with the same body a 200 writing nothing", async () => {
    const headers = { "Idempotency-Key": "refusals-batch-a" };
    const first = laterJob({ name: "keyed" });
    await ok("POST", "/jobs", { body: first, headers });
    const before = await snapshot();
    const reply = await api.call("POST", "/jobs:batch", {
      body: {
        jobs: [{ ...laterJob({ name: "another" }), idempotencyKey: "refusals-batch-a" }],
      },
    });
    expect(reply.status, reply.text).toBe(200);
    expect(reply.body).toMatchObject({
      results: [{ index: 0, status: 409, error: { code: "idempotency_conflict" } }],
    });
    expect(await snapshot()).toEqual(before);
    const repeat = await api.call("POST", "/jobs:batch", {
      body: { jobs: [{ ...first, idempotencyKey: "refusals-batch-a" }] },
    });
    expect(repeat.body).toMatchObject({ results: [{ index: 0, status: 200 }] });
    expect(await snapshot()).toEqual(before);
  });
});

describe("PATCH /jobs/{id} refused writes nothing", () => {
  /** The jobs each refusal below is swept over: active, recurring, paused, a run queued, upstream. */
  const editable = () => [
    jobs.active,
    jobs.recurring,
    jobs.paused,
    jobs.withQueuedRun,
    jobs.upstream,
  ];
  it("without If-Match (428), stale (412), unknown or another tenant's (404)", async () => {
    for (const id of editable()) {
      await refused("PATCH", `/jobs/${id}`, { body: { name: "x" } }, 428);
      await refused(
        "PATCH",
        `/jobs/${id}`,
        {
          body: { schedule: { cron: "0 5 * * *", timezone: "UTC" } },
          headers: { "If-Match": '"7"' },
        },
        412,
        { code: "version_mismatch" },
      );
    }
    await refused("PATCH", `/jobs/${UNKNOWN_JOB}`, { body: { name: "x" }, headers: V1 }, 404);
    await refused("PATCH", `/jobs/${jobs.ofB}`, { body: { name: "x" }, headers: V1 }, 404);
  });
  it("a bad field (400), in every state", async () => {
    for (const id of editable()) {
      await refused("PATCH", `/jobs/${id}`, { body: { timeoutSeconds: -1 }, headers: V1 }, 400);
      await refused(
        "PATCH",
        `/jobs/${id}`,
        { body: { schedule: { cron: "61 * * * *", timezone: "UTC" } }, headers: V1 },
        400,
      );
    }
  });
  it("a cycle, an unknown upstream, a dependent's own id (400)", async () => {
    await refused(
      "PATCH",
      `/jobs/${jobs.upstream}`,
      { body: { schedule: { after: { jobs: [jobs.dependent], on: "success" } } }, headers: V1 },
      400,
    );
    await refused(
      "PATCH",
      `/jobs/${jobs.dependent}`,
      { body: { schedule: { after: { jobs: [jobs.dependent], on: "success" } } }, headers: V1 },
      400,
    );
    await refused(
      "PATCH",
      `/jobs/${jobs.dependent}`,
      { body: { schedule: { after: { jobs: [UNKNOWN_JOB], on: "success" } } }, headers: V1 },
      400,
    );
  });
  it("a cancelled or completed job (409)", async () => {
    for (const id of [jobs.cancelled, jobs.completed]) {
      await refused(
        "PATCH",
        `/jobs/${id}`,
        {
          body: { schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() } },
          headers: V1,
        },
        409,
        { code: "illegal_transition" },
      );
    }
  });
  it("over maxPriority (403)", async () => {
    await refused(
      "PATCH",
      `/jobs/${jobs.ofB}`,
      { key: KEY_B, body: { priority: "high" }, headers: V1 },
      403,
      {
        code: "quota_exceeded",
      },
    );
  });
});

describe("more refusals of creates and edits write nothing", () => {
  it("an edit over runsPerMinute (403): what it reserved is given back", async () => {
    await refused(
      "PATCH",
      `/jobs/${jobs.ofB}`,
      { key: KEY_B, body: { schedule: { every: "PT1S" } }, headers: V1 },
      403,
      { code: "quota_exceeded" },
    );
  });
  it("a payload over 64 KiB (413), on a create and an edit", async () => {
    const payload = { big: "x".repeat(70 * 1024) };
    await refused("POST", "/jobs", { body: laterJob({ payload }) }, 413);
    await refused("PATCH", `/jobs/${jobs.active}`, { body: { payload }, headers: V1 }, 413);
  });
  it("a key whose job was deleted (409), repeated with the same body", async () => {
    const headers = { "Idempotency-Key": "refusals-deleted-1" };
    const body = laterJob({ name: "to delete" });
    const made = await ok("POST", "/jobs", { body, headers });
    await ok("DELETE", `/jobs/${JobSchema.parse(made.body).id}`);
    await refused("POST", "/jobs", { body, headers }, 409, { code: "idempotency_conflict" });
  });
  it("a create whose body key and Idempotency-Key differ (400)", async () => {
    await refused(
      "POST",
      "/jobs",
      {
        body: laterJob({ idempotencyKey: "refusals-a" }),
        headers: { "Idempotency-Key": "refusals-b" },
      },
      400,
      { field: "idempotencyKey" },
    );
  });
  it("a trigger's or a replay's Idempotency-Key that is not one (400)", async () => {
    for (const key of ["", "k".repeat(1000)]) {
      const headers = { "Idempotency-Key": key };
      await refused("POST", `/jobs/${jobs.recurring}/trigger`, { headers }, 400);
      await refused("POST", `/dead-letters/${deadRunId}/replay`, { headers }, 400);
    }
  });
  it("PUT quotas for a tenant id that cannot be one", async () => {
    const reply = await refusedAny("PUT", "/tenants/%20bad%20/quotas", { body: {} });
    expect([400, 404]).toContain(reply);
  });
  it("a dead letter replayed twice (409)", async () => {
    const { jobId } = await deadRunVia(api);
    const [dead] = await runsOf(jobId);
    if (!dead) throw new Error("no dead run");
    await ok("POST", `/dead-letters/${dead.runId}/replay`);
    await refused("POST", `/dead-letters/${dead.runId}/replay`, {}, 409, {
      code: "not_replayable",
    });
  });
});

describe("pause, resume, cancel, delete and trigger refused write nothing", () => {
  it("an unknown or another tenant's job (404)", async () => {
    for (const id of [UNKNOWN_JOB, jobs.ofB]) {
      for (const action of ["pause", "resume", "cancel", "trigger"]) {
        await refused("POST", `/jobs/${id}/${action}`, {}, 404);
      }
      await refused("DELETE", `/jobs/${id}`, {}, 404);
    }
  });
  it("a transition the job's status does not allow (409)", async () => {
    await refused("POST", `/jobs/${jobs.cancelled}/pause`, {}, 409);
    await refused("POST", `/jobs/${jobs.cancelled}/resume`, {}, 409);
    await refused("POST", `/jobs/${jobs.completed}/pause`, {}, 409);
    await refused("POST", `/jobs/${jobs.completed}/resume`, {}, 409);
    await refused("POST", `/jobs/${jobs.cancelled}/trigger`, {}, 409);
  });
  it("a bad body (400)", async () => {
    for (const id of [jobs.active, jobs.paused, jobs.withQueuedRun, jobs.upstream]) {
      await refused("POST", `/jobs/${id}/pause`, { body: { running: "never" } }, 400);
      await refused("POST", `/jobs/${id}/pause`, { body: { other: 1 } }, 400);
    }
  });
});

describe("a route that takes no body refuses one (400 naming its field), writing nothing", () => {
  // `running` is pause's: sent to cancel, it reads as "let running runs finish", which cancel
  // would not do. Acted on with the body ignored, the job was cancelled and its runs with it.
  const body = { running: "finish" };
  it("resume, cancel, delete and trigger", async () => {
    for (const id of [jobs.active, jobs.paused, jobs.withQueuedRun, jobs.upstream]) {
      for (const action of ["resume", "cancel", "trigger"]) {
        await refused("POST", `/jobs/${id}/${action}`, { body }, 400, { field: "running" });
      }
      await refused("DELETE", `/jobs/${id}`, { body }, 400, { field: "running" });
    }
  });
  it("a run's cancel and a dead letter's replay", async () => {
    await refused("POST", `/jobs/${jobs.withQueuedRun}/runs/${queuedRunId}/cancel`, { body }, 400, {
      field: "running",
    });
    await refused("POST", `/dead-letters/${deadRunId}/replay`, { body }, 400, {
      field: "running",
    });
  });
  it("a webhook secret's rotation", async () => {
    // `keepOldForHours` reads as a shorter overlap; acted on with the body ignored, the replaced
    // secret kept signing for the usual 24 hours.
    await refused("POST", "/webhook-secret/rotate", { body: { keepOldForHours: 0 } }, 400, {
      field: "keepOldForHours",
    });
  });
  it("credentials come first: without them, a body is a 401, not a 400", async () => {
    await refused("POST", `/jobs/${jobs.active}/cancel`, { key: null, body }, 401);
  });
  it("a body that is no object, not UTF-8, compressed or past the read limit is refused, naming no field", async () => {
    const path = `/jobs/${jobs.active}/cancel`;
    const json = { "Content-Type": "application/json" };
    const bodies: { raw: string | Uint8Array; headers?: Record<string, string> }[] = [
      { raw: "null" },
      { raw: "[]" },
      { raw: '""' },
      { raw: "not json" },
      { raw: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]) },
      { raw: gzipSync('{"running": "finish"}'), headers: { "Content-Encoding": "gzip" } },
      // A body far past what the route reads (1 KiB): refused without reading the rest.
      { raw: JSON.stringify({ running: "finish", pad: "x".repeat(4 * 1024 * 1024) }) },
    ];
    for (const { raw, headers } of bodies) {
      const error = await refused("POST", path, { raw, headers: { ...json, ...headers } }, 400, {
        code: "validation_failed",
      });
      expect(error.message).toBe("this request takes no body; send none");
    }
  });
  it("white space alone, and {} with white space around it, are no body", async () => {
    for (const raw of [" \n\t ", " {} \n"]) {
      const reply = await api.call("POST", `/jobs/${jobs.active}/resume`, {
        raw,
        headers: { "Content-Type": "application/json" },
      });
      expect(reply.status, reply.text).toBe(200);
    }
  });
  it("an empty object, or no body, is still accepted", async () => {
    const reply = await api.call("POST", `/jobs/${jobs.active}/resume`, { body: {} });
    expect(reply.status, reply.text).toBe(200);
  });
});

describe("a job whose run is running at its async target: refusals write nothing", () => {
  it("edits (428, 412, 400), a pause's bad body, bodies sent to routes that take none", async () => {
    const path = `/jobs/${running.jobId}`;
    await refused("PATCH", path, { body: { name: "x" } }, 428);
    await refused("PATCH", path, { body: { name: "x" }, headers: { "If-Match": '"9"' } }, 412);
    await refused("PATCH", path, { body: { timeoutSeconds: 0 }, headers: V1 }, 400);
    await refused("POST", `${path}/pause`, { body: { running: "never" } }, 400);
    for (const action of ["resume", "cancel", "trigger"]) {
      await refused("POST", `${path}/${action}`, { body: { running: "finish" } }, 400);
    }
    await refused("DELETE", path, { body: { running: "finish" } }, 400);
    await refused(
      "POST",
      `${path}/runs/${running.runId}/cancel`,
      { body: { running: "finish" } },
      400,
    );
  });
  it("its target's complete with a bad body (400), heartbeat and complete with a bad token (401)", async () => {
    const auth = { key: null, headers: { Authorization: `Bearer ${running.token}` } };
    await refused(
      "POST",
      `/runs/${running.runId}/complete`,
      { ...auth, body: { status: "maybe" } },
      400,
    );
    const forged = { key: null, headers: { Authorization: `Bearer ${running.token}x` } };
    await refused("POST", `/runs/${running.runId}/heartbeat`, forged, 401);
    await refused(
      "POST",
      `/runs/${running.runId}/complete`,
      { ...forged, body: { status: "succeeded" } },
      401,
    );
  });
});

describe("run cancel and replay refused write nothing", () => {
  it("an unknown run, a run of another job (404)", async () => {
    await refused("POST", `/jobs/${jobs.active}/runs/${queuedRunId}/cancel`, {}, 404);
    await refused("POST", `/jobs/${UNKNOWN_JOB}/runs/${queuedRunId}/cancel`, {}, 404);
    await refused("POST", `/dead-letters/${queuedRunId.slice(0, -1)}9/replay`, {}, 404);
  });
  it("an ended run's cancel (409), a replay of a run not dead (409), another tenant's (404)", async () => {
    await refused("POST", `/jobs/${jobs.completed}/runs/${endedRunId}/cancel`, {}, 409);
    await refused("POST", `/jobs/${jobs.dead}/runs/${deadRunId}/cancel`, {}, 409);
    await refused("POST", `/dead-letters/${endedRunId}/replay`, {}, 409);
    await refused("POST", `/dead-letters/${queuedRunId}/replay`, {}, 409);
    await refused("POST", `/dead-letters/${deadRunId}/replay`, { key: KEY_B }, 404);
  });
});

describe("quotas, webhook secret and a run's own routes refused write nothing", () => {
  it("PUT tenant quotas: a bad field (400), a tenant not an admin (403)", async () => {
    await refused("PUT", "/tenants/tenant-b/quotas", { body: { activeJobs: -1 } }, 400);
    await refused("PUT", "/tenants/tenant-b/quotas", { body: { other: 1 } }, 400);
    await refused("PUT", "/tenants/tenant-a/quotas", { key: KEY_B, body: {} }, 403);
  });
  it("webhook-secret rotate with a bad Idempotency-Key (400)", async () => {
    await ok("GET", "/webhook-secret");
    await refused("POST", "/webhook-secret/rotate", { headers: { "Idempotency-Key": "" } }, 400);
    await refused(
      "POST",
      "/webhook-secret/rotate",
      { headers: { "Idempotency-Key": "k".repeat(1000) } },
      400,
    );
  });
  it("heartbeat and complete with a bad run token", async () => {
    for (const runId of [queuedRunId, deadRunId, endedRunId]) {
      const auth = { key: null, headers: { Authorization: "Bearer not-a-run-token" } };
      const hb = await refusedAny("POST", `/runs/${runId}/heartbeat`, auth);
      const done = await refusedAny("POST", `/runs/${runId}/complete`, {
        ...auth,
        body: { status: "succeeded" },
      });
      expect([hb, done].every((s) => s >= 400 && s < 500)).toBe(true);
    }
  });
});

/** As `refused`, for routes whose refusal status is the point of no other check: returns it. */
async function refusedAny(method: string, path: string, request: Request): Promise<number> {
  const before = await snapshot();
  const reply = await api.call(method, path, request);
  expect(reply.status, reply.text).toBeGreaterThanOrEqual(400);
  expect(await snapshot()).toEqual(before);
  return reply.status;
}

describe("a request over requestsPerSecond (429) writes nothing", () => {
  it("of eight triggers at once at one request a second, each 429 queued no run", async () => {
    await ok("PUT", "/tenants/tenant-b/quotas", {
      body: { activeJobs: 1, maxPriority: "low", runsPerMinute: 10, requestsPerSecond: 1 },
    });
    const runsOfB = async () => (await api.fixture.runs()).filter((r) => r.jobId === jobs.ofB);
    const before = (await runsOfB()).length;
    const replies = await Promise.all(
      Array.from({ length: 8 }, () =>
        api.call("POST", `/jobs/${jobs.ofB}/trigger`, { key: KEY_B }),
      ),
    );
    const statuses = replies.map((r) => r.status);
    expect(statuses).toContain(429);
    for (const reply of replies.filter((r) => r.status === 429)) {
      expectError(reply, 429, { code: "rate_limited" });
    }
    const queued = statuses.filter((s) => s === 202).length;
    // Triggers of one job at once may also meet each other (503 busy, nothing written).
    expect(statuses.filter((s) => s !== 202 && s !== 429 && s !== 503)).toEqual([]);
    expect((await runsOfB()).length - before).toBe(queued);
  });
});
