import { createHmac } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { GetCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { completeAsyncRun, heartbeatAsyncRun } from "../../shared/execution/async-runs.js";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import type { WorkerDeps } from "../../shared/execution/worker.js";
import { processRun } from "../../shared/execution/worker.js";
import { cancelJob } from "../../shared/jobs/cancel.js";
import { cancelRun } from "../../shared/jobs/cancel-run.js";
import { editJob } from "../../shared/jobs/edit.js";
import { pauseJob } from "../../shared/jobs/pause.js";
import { resumeJob } from "../../shared/jobs/resume.js";
import { parseRunId, runId as runIdOf } from "../../shared/keys.js";
import { METRICS, MetricsRecorder } from "../../shared/observability.js";
import { receiveRuns } from "../../shared/queue/work-queue.js";
import { requestRunCancel } from "../../shared/storage/run-cancel.js";
import { getJob, getRun, runKeyOf } from "../../shared/storage/run-reads.js";
import { cachedSigningSecrets, tenantWebhookSecrets } from "../../shared/webhooks/secrets.js";
import { type ApiHarness, KEY_B, startApi, TENANT_A } from "../api/support.js";
import { dailyAwayFrom } from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";
import { createTestClients } from "../support/namespace.js";

/**
 * Long jobs: an `http` job whose target has `mode: "async"` answers 202 and takes the run over.
 * The target heartbeats and completes the run over the API with the run token its delivery
 * carried; the engine's clock is fixed and moved by hand, so a 30-minute run takes seconds.
 */

const LEASE_MS = 60_000;
/**
 * How far from the clock a test's one-off is due: under a second, so its run's message goes out
 * with no SQS delay (whole seconds, rounded down) and the worker receives it at once, not a second
 * of real time later, which each delivery waited.
 */
const DUE_IN_MS = 999;
let now = new Date(Math.ceil(Date.now() / 1000) * 1000);
let api: ApiHarness;
let target: AsyncTarget;
let worker: WorkerDeps;

interface HandOff {
  readonly runId: string;
  readonly attempt: number;
  readonly token: string;
  readonly heartbeatUrl: string;
  readonly completeUrl: string;
  readonly leaseSeconds: string;
}

interface AsyncTarget {
  readonly url: string;
  readonly handOffs: HandOff[];
  close(): Promise<void>;
}

/**
 * A long-job service: takes every delivery over with 202 (or `answer`) and keeps what it was
 * handed; with `before`, it makes its own calls back first, as a target may before it answers.
 */
async function startAsyncTarget({
  answer = 202,
  before,
}: {
  readonly answer?: number;
  readonly before?: (handOff: HandOff) => Promise<void>;
} = {}): Promise<AsyncTarget> {
  const handOffs: HandOff[] = [];
  const header = (headers: IncomingHttpHeaders, name: string) => String(headers[name] ?? "");
  const server: Server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      const handOff = {
        runId: header(request.headers, "x-scheduler-run-id"),
        attempt: Number(header(request.headers, "x-scheduler-attempt")),
        token: header(request.headers, "x-scheduler-run-token"),
        heartbeatUrl: header(request.headers, "x-scheduler-heartbeat-url"),
        completeUrl: header(request.headers, "x-scheduler-complete-url"),
        leaseSeconds: header(request.headers, "x-scheduler-lease-seconds"),
      };
      handOffs.push(handOff);
      void (before?.(handOff) ?? Promise.resolve()).finally(() => response.writeHead(answer).end());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/long`,
    handOffs,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

beforeAll(async () => {
  api = await startApi({ clock: () => now, settings: { leaseMs: LEASE_MS } });
  target = await startAsyncTarget();
  const engine = api.fixture.engine;
  worker = {
    engine,
    workerId: "long-jobs-worker",
    handlers: builtInHandlers(
      {
        signingSecrets: cachedSigningSecrets(engine),
        allowPrivateTargets: true,
        apiUrl: api.server.url,
        leaseSeconds: LEASE_MS / 1000,
      },
      engine.clock,
    ),
  };
});
afterAll(async () => {
  await target?.close();
  await api?.close();
});

const advance = (ms: number) => {
  now = new Date(now.getTime() + ms);
};

/** Creates an async http job due just under a second from the clock, and sets the clock to its time. */
async function createAsyncJob(overrides: Record<string, unknown> = {}): Promise<string> {
  const runAt = new Date(now.getTime() + DUE_IN_MS);
  const created = await api.call("POST", "/jobs", {
    body: {
      type: "http",
      schedule: { runAt: runAt.toISOString() },
      target: { url: target.url, mode: "async" },
      timeoutSeconds: 3600,
      ...overrides,
    },
  });
  expect(created.status, created.text).toBe(201);
  now = runAt;
  return (created.body as { id: string }).id;
}

/**
 * How long a look for a delivery that must not come waits after a reaper's pass: what the pass
 * sent is in the queue when it returns, visible at once (due by the engine's clock, so sent with
 * no SQS delay), and one receive finds it.
 */
const NO_DELIVERY_WAIT_MS = 1_000;

/** Has the worker process the job's next queued messages (within `waitMs`); returns how many. */
async function processNext(
  jobId: string,
  by: WorkerDeps = worker,
  waitMs = 20_000,
): Promise<number> {
  const deadline = Date.now() + waitMs;
  while (Date.now() < deadline) {
    const batch = await receiveRuns(api.fixture.engine.sqs, api.fixture.engine.queues.normal, {
      max: 10,
      waitSeconds: 1,
    });
    const mine = batch.filter((r) => r.message.jobId === jobId);
    for (const received of mine) await api.fixture.process(by, received);
    if (mine.length > 0) return mine.length;
  }
  return 0;
}

/** Delivers the job's next queued message to the worker; returns what the target was handed. */
async function deliver(jobId: string, by: WorkerDeps = worker, to = target): Promise<HandOff> {
  const before = to.handOffs.length;
  await processNext(jobId, by);
  const handOff = to.handOffs[before];
  if (handOff === undefined) throw new Error(`job ${jobId} was not delivered`);
  return handOff;
}

/**
 * A delivery whose worker dies once the target has taken the run over (its 202 in): the hand-over
 * is never recorded, and the target holds the run with its token.
 */
async function deliverWorkerDyingAfter202(jobId: string): Promise<HandOff> {
  const dying = withFaults(api.fixture.engine, {
    operation: "UpdateItem",
    times: 1,
    match: (input) => String(input.UpdateExpression).includes("handedOverAt"),
    error: () => new Error("worker died"),
  });
  const before = target.handOffs.length;
  try {
    await expect(processNext(jobId, { ...worker, engine: dying.engine })).rejects.toThrow(
      "worker died",
    );
  } finally {
    dying.destroy();
  }
  const handOff = target.handOffs[before];
  if (handOff === undefined) throw new Error(`job ${jobId} was not delivered`);
  return handOff;
}

/** What the target does with its token: a POST to one of the URLs it was handed. */
async function callBack(url: string, token: string | null, body?: unknown) {
  const headers: Record<string, string> = {};
  if (token !== null) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method: "POST",
    headers,
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  return {
    status: response.status,
    headers: response.headers,
    text,
    body: (text === "" ? null : JSON.parse(text)) as Record<string, unknown>,
  };
}

/**
 * A token as anyone holding the tenant's webhook signing secret could make one under the `rt1`
 * scheme (`rt1.<{r, f, t}>.<HMAC>` keyed by HMAC(secret, "scheduler run token v1")): what a second
 * receiver of the tenant's deliveries tries.
 */
function forgedWithWebhookSecret(
  secret: string,
  claims: { runId: string; fence: number; tenantId: string },
): string {
  const raw = Buffer.from(secret.slice("whsec_".length), "base64");
  const key = createHmac("sha256", raw).update("scheduler run token v1").digest();
  const body = Buffer.from(
    JSON.stringify({ r: claims.runId, f: claims.fence, t: claims.tenantId }),
  ).toString("base64url");
  const signed = `rt1.${body}`;
  return `${signed}.${createHmac("sha256", key).update(signed).digest("base64url")}`;
}

function parseRunIdOrThrow(runId: string) {
  const ref = parseRunId(runId);
  if (ref === null) throw new Error(`not a run id: ${runId}`);
  return ref;
}

/**
 * Runs `call` on the API's engine dying at its first write of a job's lastRun, between a run's
 * ending and its job's write, as an API function that dies there does.
 */
async function dyingAtTheJobWrite(call: (engine: Engine) => Promise<unknown>): Promise<void> {
  const dying = withFaults(api.fixture.engine, {
    operation: "UpdateItem",
    times: 1,
    match: (input) => String(input.UpdateExpression).includes("lastRun = :lastRun"),
    error: () => new Error("api function died"),
  });
  try {
    await expect(call(dying.engine)).rejects.toThrow("api function died");
  } finally {
    dying.destroy();
  }
}

/** An engine whose first run write matching `update` lets `first` run before it is sent. */
function racing(update: string, first: () => Promise<void>) {
  const clients = createTestClients();
  let raced = false;
  clients.doc.middlewareStack.add(
    (next) => async (args) => {
      const input: object = args.input;
      const expression = "UpdateExpression" in input ? String(input.UpdateExpression) : "";
      if (!raced && expression.includes(update)) {
        raced = true;
        await first();
      }
      return next(args);
    },
    { step: "initialize", name: "raceAhead" },
  );
  return {
    engine: { ...api.fixture.engine, doc: clients.doc },
    destroy: () => clients.destroy(),
  };
}

/**
 * A target heartbeating its run `beats` times 50 s apart, of which its first and last are made:
 * each beat writes the run's lease (`extendLease`) and its job's view of it (`extendAdmission`)
 * over the one before, from its own time, so the last leaves what all of them do. Only for a
 * stretch nothing reads the lease in (no reaper pass, no other call on the run).
 */
async function heartbeatsFor(
  handOff: HandOff,
  beats: number,
  timesOutAt: Date | null = null,
): Promise<void> {
  for (const stretch of [50_000, (beats - 1) * 50_000]) {
    advance(stretch);
    const reply = await callBack(handOff.heartbeatUrl, handOff.token);
    expect(reply.status, reply.text).toBe(200);
    const leaseUntil = new Date(now.getTime() + LEASE_MS).toISOString();
    expect(reply.body).toEqual(
      timesOutAt === null
        ? expect.objectContaining({ leaseUntil })
        : { leaseUntil, timesOutAt: timesOutAt.toISOString() },
    );
  }
}

async function runOf(jobId: string, runId: string) {
  const reply = await api.call("GET", `/jobs/${jobId}/runs/${runId}`);
  expect(reply.status, reply.text).toBe(200);
  return reply.body as Record<string, unknown>;
}

describe("async mode (long jobs)", () => {
  it("a 30-minute run heartbeated by its target ends SUCCEEDED; the worker let go at the 202", async () => {
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    const runId = runIdOf(jobId, now, 1);
    expect(handOff.runId).toBe(runId);
    expect(handOff.heartbeatUrl).toBe(`${api.server.url}/runs/${runId}/heartbeat`);
    expect(handOff.completeUrl).toBe(`${api.server.url}/runs/${runId}/complete`);
    expect(handOff.leaseSeconds).toBe("60");
    const startedAt = now.getTime();

    // The worker acknowledged the message and stopped heartbeating: the run waits on its target.
    const handedOver = await runOf(jobId, runId);
    expect(handedOver).toMatchObject({
      status: "running",
      fence: 1,
      handedOverAt: now.toISOString(),
      leaseUntil: new Date(startedAt + LEASE_MS).toISOString(),
      timesOutAt: new Date(startedAt + 3600_000).toISOString(),
    });
    expect(await api.fixture.queueDepth(api.fixture.engine.queues.normal)).toMatchObject({
      inFlight: 0,
    });

    // 36 heartbeats 50 s apart: each extends the lease a minute from its own time, and the
    // reaper, looking every sixth beat (five minutes), finds a live lease and sends nothing.
    for (let look = 1; look <= 6; look++) {
      await heartbeatsFor(handOff, 6, new Date(startedAt + 3600_000));
      expect((await reap(api.fixture.engine, { now })).resent).toBe(0);
    }
    expect(now.getTime() - startedAt).toBe(30 * 60_000);

    const completed = await callBack(handOff.completeUrl, handOff.token, {
      status: "succeeded",
      result: { rows: 1200 },
    });
    expect(completed.status, completed.text).toBe(200);
    expect(completed.body).toMatchObject({
      runId,
      status: "succeeded",
      attempt: 1,
      durationMs: 30 * 60_000,
      finishedAt: now.toISOString(),
      executedVersion: 1,
    });
    const job = await api.call("GET", `/jobs/${jobId}`);
    expect(job.body).toMatchObject({
      status: "completed",
      lastRun: { runId, status: "succeeded" },
    });

    // Its token is spent: the run has ended.
    const late = await callBack(handOff.heartbeatUrl, handOff.token);
    expect(late.status, late.text).toBe(409);
    expect(late.body).toMatchObject({ error: { code: "stale_run_token" } });
  });

  it("a handed-over run is kept for the retention after it can time out, not after it was queued: TTL does not delete it while its target runs it", async () => {
    const jobId = await createAsyncJob({ timeoutSeconds: 86_400 });
    const handOff = await deliver(jobId);
    const ref = parseRunId(handOff.runId);
    if (ref === null) throw new Error(`not a run id: ${handOff.runId}`);
    const { engine } = api.fixture;
    const { Item: item } = await engine.doc.send(
      new GetCommand({ TableName: engine.tables.runs, Key: runKeyOf(ref), ConsistentRead: true }),
    );
    const timesOutAt = Date.parse(String(item?.timesOutAt));
    expect(timesOutAt).toBe(now.getTime() + 86_400_000);
    expect(item?.expiresAt).toBe(
      Math.floor(timesOutAt / 1000) + engine.settings.retentionDays * 86_400,
    );
    const completed = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(completed.status, completed.text).toBe(200);
  });

  it("the worker records the run's scheduling lag when it hands the run over; the completion in the API records none", async () => {
    // In the stack the worker's and the API's metrics carry their own service dimension, and the
    // p99 lag alarm reads the worker's: the worker gets a recorder of its own here.
    const workerMetrics = new MetricsRecorder();
    const separateWorker: WorkerDeps = {
      ...worker,
      engine: { ...worker.engine, obs: { ...worker.engine.obs, metrics: workerMetrics } },
    };
    const apiMetrics = api.fixture.metrics;
    const apiLagBefore = apiMetrics.points.filter((p) => p.name === METRICS.schedulingLagMs).length;
    const jobId = await createAsyncJob();
    advance(3_000); // started 3 s after it was due
    const handOff = await deliver(jobId, separateWorker);
    const lagPoints = (recorder: MetricsRecorder) =>
      recorder.points.filter((p) => p.name === METRICS.schedulingLagMs).map((p) => p.value);
    expect(lagPoints(workerMetrics)).toEqual([3_000]);

    advance(20 * 60_000);
    const completed = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(completed.status, completed.text).toBe(200);
    expect(completed.body).toMatchObject({ status: "succeeded" });
    expect(lagPoints(workerMetrics)).toEqual([3_000]);
    expect(lagPoints(apiMetrics).length - apiLagBefore).toBe(0);
    expect(apiMetrics.sum(METRICS.runOutcome, { status: "SUCCEEDED" })).toBeGreaterThan(0);
  });

  it("a lease with no heartbeat lapses and the run is started again, like a crashed one; the old token is stale", async () => {
    const jobId = await createAsyncJob();
    const first = await deliver(jobId);
    const runId = first.runId;

    // The target goes quiet: at its lease's end the run is still live; once the reaper reads that
    // far (its passes settle a few seconds behind their clock) it finds it lapsed and sends it again.
    advance(LEASE_MS - 1);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(0);
    advance(2 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const second = await deliver(jobId);
    expect(second).toMatchObject({ runId, attempt: 1 });
    expect(second.token).not.toBe(first.token);
    expect(await runOf(jobId, runId)).toMatchObject({ status: "running", fence: 2, attempt: 1 });

    for (const url of [first.heartbeatUrl, first.completeUrl]) {
      const stale = await callBack(
        url,
        first.token,
        url.endsWith("complete") ? { status: "succeeded" } : undefined,
      );
      expect(stale.status, stale.text).toBe(409);
      expect(stale.body).toMatchObject({ error: { code: "stale_run_token" } });
      expect(String((stale.body.error as { message: string }).message)).toContain("fence 2");
    }
    expect((await callBack(second.heartbeatUrl, second.token)).status).toBe(200);
    const done = await callBack(second.completeUrl, second.token, { status: "succeeded" });
    expect(done.body).toMatchObject({ status: "succeeded", fence: 2 });
  });

  it("a target that takes the run over and goes quiet every time is not delivered past the timeout: the attempt times out", async () => {
    const jobId = await createAsyncJob({ timeoutSeconds: 120, retry: { maxAttempts: 1 } });
    const first = await deliver(jobId);
    const { timesOutAt } = await runOf(jobId, first.runId);
    // Quiet: the lease lapses, the reaper sends the run again, and within the timeout it is
    // delivered again, with the time the first start left.
    advance(LEASE_MS + 1 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const second = await deliver(jobId);
    expect(second).toMatchObject({ runId: first.runId, attempt: 1 });
    expect(await runOf(jobId, first.runId)).toMatchObject({ fence: 2, timesOutAt });
    // Quiet again: past 120 s from the attempt's first start, its next start ends it as timed
    // out (one attempt: dead) instead of delivering it once more, a lease apart, for good.
    advance(LEASE_MS + 1 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const delivered = target.handOffs.length;
    expect(await processNext(jobId)).toBe(1);
    expect(target.handOffs.length).toBe(delivered);
    expect(await runOf(jobId, first.runId)).toMatchObject({
      status: "dead",
      error: "timed out after 120 s",
    });
    expect((await callBack(second.heartbeatUrl, second.token)).status).toBe(409);
  });

  it("a run whose worker died after the target's 202, before recording the hand-over, keeps its first start's timeout when started again", async () => {
    const jobId = await createAsyncJob({ timeoutSeconds: 120, retry: { maxAttempts: 1 } });
    const first = await deliverWorkerDyingAfter202(jobId);
    const firstStart = Date.parse(String((await runOf(jobId, first.runId)).startedAt));
    const timesOutAt = new Date(firstStart + 120_000).toISOString();

    // The target goes quiet: the lease lapses, the reaper sends the run again, and the target
    // takes the new delivery over. The attempt still times out 120 s after its first start.
    advance(LEASE_MS + 1 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const second = await deliver(jobId);
    expect(second).toMatchObject({ runId: first.runId, attempt: 1 });
    expect(await runOf(jobId, first.runId)).toMatchObject({
      status: "running",
      fence: 2,
      timesOutAt,
    });
    const beat = await callBack(second.heartbeatUrl, second.token);
    expect(beat.body).toMatchObject({ timesOutAt });

    // Quiet again, past 120 s from the first start: the next start ends the attempt as timed out
    // instead of delivering it with a timeout of its own.
    advance(LEASE_MS + 1 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const delivered = target.handOffs.length;
    expect(await processNext(jobId)).toBeGreaterThanOrEqual(1);
    expect(target.handOffs.length).toBe(delivered);
    expect(await runOf(jobId, first.runId)).toMatchObject({
      status: "dead",
      error: "timed out after 120 s",
    });
  });

  it("a handed-over attempt past its timeout is not delivered again after an edit of the job to sync mode: it times out", async () => {
    const jobId = await createAsyncJob({ timeoutSeconds: 30, retry: { maxAttempts: 1 } });
    const handOff = await deliver(jobId);
    const edited = await api.call("PATCH", `/jobs/${jobId}`, {
      body: { target: { url: target.url } },
      headers: { "If-Match": '"1"' },
    });
    expect(edited.status, edited.text).toBe(200);
    // Quiet: the lease lapses past the attempt's 30 s, and the reaper sends the run again.
    advance(LEASE_MS + 1 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const delivered = target.handOffs.length;
    expect(await processNext(jobId)).toBe(1);
    expect(target.handOffs.length).toBe(delivered);
    expect(await runOf(jobId, handOff.runId)).toMatchObject({
      status: "dead",
      error: "timed out after 30 s",
      executedVersion: 1,
    });
  });

  it("a run times out after the timeout it was handed over with, and says so, after an edit of the job's timeout", async () => {
    // Handed over under a 200 s timeout; the job is then edited to 60 s. The attempt keeps its
    // deadline (its heartbeats at 50 to 150 s are taken, the one at 200 s refused), and its
    // ending names the timeout it ran under, not the edited job's.
    const editTimeout = async (jobId: string, timeoutSeconds: number) => {
      const edited = await api.call("PATCH", `/jobs/${jobId}`, {
        body: { timeoutSeconds },
        headers: { "If-Match": '"1"' },
      });
      expect(edited.status, edited.text).toBe(200);
    };
    const heartbeaten = await createAsyncJob({ timeoutSeconds: 200, retry: { maxAttempts: 1 } });
    const beating = await deliver(heartbeaten);
    await editTimeout(heartbeaten, 60);
    let refused: Awaited<ReturnType<typeof callBack>> | null = null;
    for (let beat = 1; beat <= 4 && refused === null; beat++) {
      advance(50_000);
      const reply = await callBack(beating.heartbeatUrl, beating.token);
      if (reply.status !== 200) refused = reply;
    }
    if (refused === null) throw new Error("no heartbeat was refused");
    expect(refused.status, refused.text).toBe(409);
    expect(String((refused.body.error as { message: string }).message)).toContain(
      "timed out after 200 s",
    );
    expect(await runOf(heartbeaten, beating.runId)).toMatchObject({
      status: "dead",
      error: "timed out after 200 s",
      durationMs: 200_000,
      executedVersion: 1,
    });

    // A quiet target's run, ended by the worker that starts it past its deadline.
    const quiet = await createAsyncJob({ timeoutSeconds: 120, retry: { maxAttempts: 1 } });
    const handOff = await deliver(quiet);
    await editTimeout(quiet, 30);
    advance(121_000 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    expect(await processNext(quiet)).toBe(1);
    expect(await runOf(quiet, handOff.runId)).toMatchObject({
      status: "dead",
      error: "timed out after 120 s",
      executedVersion: 1,
    });
  });

  it("a token two starts old is not the run's any more (401); the one before the latest is stale (409)", async () => {
    const jobId = await createAsyncJob();
    const tokens: HandOff[] = [await deliver(jobId)];
    for (const _restart of [1, 2]) {
      advance(LEASE_MS + 2 + REAPER_SETTLE_MS);
      expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
      tokens.push(await deliver(jobId));
    }
    const [first, second, third] = tokens;
    if (first === undefined || second === undefined || third === undefined)
      throw new Error("three deliveries expected");
    expect(await runOf(jobId, first.runId)).toMatchObject({ status: "running", fence: 3 });
    expect((await callBack(first.heartbeatUrl, first.token)).status).toBe(401);
    expect((await callBack(second.heartbeatUrl, second.token)).status).toBe(409);
    const done = await callBack(third.completeUrl, third.token, { status: "succeeded" });
    expect(done.body).toMatchObject({ status: "succeeded", fence: 3 });
  });

  it("a run handed over before the upgrade (an rt1 token, no hash on the run) is refused, lapses and is delivered again with a token that works", async () => {
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    const ref = parseRunIdOrThrow(handOff.runId);
    // The run as the version before left it: RUNNING under its hand-over, no token hash; its
    // target holds the rt1 token that version signed.
    await api.fixture.engine.doc.send(
      new UpdateCommand({
        TableName: api.fixture.engine.tables.runs,
        Key: runKeyOf(ref),
        UpdateExpression: "REMOVE runTokenHash, previousRunTokenHash",
      }),
    );
    const secret = (await tenantWebhookSecrets(api.fixture.engine, TENANT_A)).current;
    const oldToken = forgedWithWebhookSecret(secret, {
      runId: handOff.runId,
      fence: 1,
      tenantId: TENANT_A,
    });
    advance(20_000);
    const refused = await callBack(handOff.heartbeatUrl, oldToken);
    expect(refused.status, refused.text).toBe(401);

    // Its heartbeats refused, the lease lapses; the reaper re-sends the run and a worker delivers
    // it again under fence 2 with a token of the new form.
    advance(LEASE_MS - 20_000 + 2 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const again = await deliver(jobId);
    expect(again).toMatchObject({ runId: handOff.runId, attempt: 1 });
    expect(again.token).toMatch(/^rt2\.2\./);
    expect((await callBack(again.heartbeatUrl, again.token)).status).toBe(200);
    const done = await callBack(again.completeUrl, again.token, { status: "succeeded" });
    expect(done.body).toMatchObject({ status: "succeeded", fence: 2, attempt: 1 });
  });

  it("two deliveries of one run in one batch (one worker, one instant) hand it over once, under one token", async () => {
    // A Lambda worker runs a batch's records at once under one worker id, so two messages of one
    // run in a batch (a duplicate, a re-send) take it at the same instant with the same start.
    const jobId = await createAsyncJob();
    const received = await api.fixture.nextDelivery(api.fixture.engine.queues.normal, jobId);
    const before = target.handOffs.length;
    const dispositions = await Promise.all([
      api.fixture.process(worker, received),
      api.fixture.process(worker, received),
    ]);
    expect(dispositions).toEqual(["ack", "ack"]);
    const handOffs = target.handOffs.slice(before);
    expect(handOffs).toHaveLength(1);
    const [handOff] = handOffs;
    if (handOff === undefined) throw new Error("the target was handed nothing");
    const run = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
    expect(run).toMatchObject({ status: "RUNNING", fence: 1 });
    const done = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(done.body).toMatchObject({ status: "succeeded", fence: 1 });
  });

  it("a token write sent again (its answer lost) keeps the token before it stale (409), on a first start and a later one", async () => {
    // The SDK sends a request again when its answer is lost (a timeout, a dropped connection),
    // though the write applied: here every run token write is sent twice.
    const clients = createTestClients();
    let sentTwice = 0;
    clients.doc.middlewareStack.add(
      (next) => async (args) => {
        const input: object = args.input;
        const update = "UpdateExpression" in input ? String(input.UpdateExpression) : "";
        if (update.includes("runTokenHash = :tokenHash")) {
          sentTwice++;
          await next(args).catch(() => undefined);
        }
        return next(args);
      },
      { step: "initialize", name: "sendTokenWritesTwice" },
    );
    const resending: WorkerDeps = {
      ...worker,
      engine: { ...api.fixture.engine, doc: clients.doc },
    };
    try {
      const jobId = await createAsyncJob();
      const before = target.handOffs.length;
      const first = await deliver(jobId, resending);
      expect(first.token).toMatch(/^rt2\.1\./);
      advance(LEASE_MS + 2 + REAPER_SETTLE_MS);
      expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
      const second = await deliver(jobId, resending);
      expect(second.token).toMatch(/^rt2\.2\./);
      expect(sentTwice).toBe(2);
      expect(target.handOffs.length - before).toBe(2);
      const stale = await callBack(first.heartbeatUrl, first.token);
      expect(stale.status, stale.text).toBe(409);
      expect(stale.body).toMatchObject({ error: { code: "stale_run_token" } });
      const done = await callBack(second.completeUrl, second.token, { status: "succeeded" });
      expect(done.body).toMatchObject({ status: "succeeded", fence: 2 });
    } finally {
      clients.destroy();
    }
  });

  it("a cancel asked before a delivery's token is written ends the run CANCELLED, and the target is not called", async () => {
    const jobId = await createAsyncJob();
    const first = await deliver(jobId);
    advance(LEASE_MS + 2 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    // The lapsed run's cancel is asked as its re-send is on its way (as the stored request the
    // cancel route makes first).
    const run = await getRun(api.fixture.engine, parseRunIdOrThrow(first.runId));
    if (run === null) throw new Error("no run");
    expect((await requestRunCancel(api.fixture.engine, run, "api", now))?.cancelRequestedAt).toBe(
      now.toISOString(),
    );
    const handOffsBefore = target.handOffs.length;
    const deadline = Date.now() + 20_000;
    let processed = false;
    while (!processed && Date.now() < deadline) {
      const batch = await receiveRuns(api.fixture.engine.sqs, api.fixture.engine.queues.normal, {
        max: 10,
        waitSeconds: 1,
      });
      for (const received of batch.filter((r) => r.message.jobId === jobId)) {
        expect(await api.fixture.process(worker, received)).toBe("ack");
        processed = true;
      }
    }
    expect(processed).toBe(true);
    expect(target.handOffs.length).toBe(handOffsBefore);
    expect(await runOf(jobId, first.runId)).toMatchObject({
      status: "cancelled",
      fence: 2,
      cancelledBy: "api",
    });
  });

  it("a cancel of a handed-over run ends it CANCELLED at once; the target's heartbeat and completion are then 409, and no retry follows", async () => {
    const jobId = await createAsyncJob({ retry: { maxAttempts: 3 } });
    const handOff = await deliver(jobId);
    const asked = await api.call("POST", `/jobs/${jobId}/runs/${handOff.runId}/cancel`);
    expect(asked.status, asked.text).toBe(200);
    expect(asked.body).toMatchObject({ status: "cancelled", cancelledBy: "api" });

    for (const url of [handOff.heartbeatUrl, handOff.completeUrl]) {
      const stale = await callBack(
        url,
        handOff.token,
        url.endsWith("complete") ? { status: "succeeded" } : undefined,
      );
      expect(stale.status, stale.text).toBe(409);
      expect(stale.body).toMatchObject({ error: { code: "stale_run_token" } });
    }
    const runs = await api.call("GET", `/jobs/${jobId}/runs`);
    expect(
      (runs.body as { items: { status: string; cancelledBy: string | null }[] }).items.map((r) => [
        r.status,
        r.cancelledBy,
      ]),
    ).toEqual([["cancelled", "api"]]);
    // The one-off has nothing left to run.
    expect((await api.call("GET", `/jobs/${jobId}`)).body).toMatchObject({ status: "completed" });
  });

  it("a handed-over run cancelled by the API (a run, or its job) is its job's lastRun: its target ran it", async () => {
    for (const how of ["run", "job"] as const) {
      const jobId = await createAsyncJob(
        how === "job" ? { schedule: { cron: "0 0 1 1 *", timezone: "UTC" } } : {},
      );
      if (how === "job") {
        const triggered = await api.call("POST", `/jobs/${jobId}/trigger`);
        expect(triggered.status, triggered.text).toBe(202);
      }
      const handOff = await deliver(jobId);
      advance(2000);
      const asked =
        how === "run"
          ? await api.call("POST", `/jobs/${jobId}/runs/${handOff.runId}/cancel`)
          : await api.call("POST", `/jobs/${jobId}/cancel`);
      expect(asked.status, asked.text).toBe(200);
      const run = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
      expect(run).toMatchObject({ status: "CANCELLED", executedVersion: 1, durationMs: 2000 });
      const job = await api.call("GET", `/jobs/${jobId}`);
      expect((job.body as { lastRun: unknown }).lastRun, how).toEqual({
        runId: handOff.runId,
        status: "cancelled",
        scheduledFor: run?.scheduledFor,
        attempt: 1,
        finishedAt: run?.finishedAt,
      });
    }
  });

  it("a run started by a worker whose clock is ahead of the API's and ended in the API (a completion, a cancel) has a durationMs of 0, never negative", async () => {
    const ahead: WorkerDeps = {
      ...worker,
      engine: { ...api.fixture.engine, clock: () => new Date(now.getTime() + 5_000) },
    };
    for (const how of ["completion", "cancel"] as const) {
      const jobId = await createAsyncJob();
      const handOff = await deliver(jobId, ahead);
      advance(1_000);
      if (how === "completion") {
        const done = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
        expect(done.status, done.text).toBe(200);
      } else {
        const asked = await api.call("POST", `/jobs/${jobId}/runs/${handOff.runId}/cancel`);
        expect(asked.status, asked.text).toBe(200);
      }
      const shown = await runOf(jobId, handOff.runId);
      // The API's clock ended it 4 s before the worker's clock started it.
      expect(Date.parse(String(shown.finishedAt)) - Date.parse(String(shown.startedAt)), how).toBe(
        -4_000,
      );
      expect(shown.durationMs, how).toBe(0);
      const stored = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
      expect(stored?.durationMs, how).toBe(0);
      expect((await api.call("GET", `/jobs/${jobId}`)).body, how).toMatchObject({
        lastRun: { runId: handOff.runId },
      });
    }
  });

  it("a negative durationMs an earlier version stored is shown as 0", async () => {
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    const done = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(done.status, done.text).toBe(200);
    await api.fixture.engine.doc.send(
      new UpdateCommand({
        TableName: api.fixture.engine.tables.runs,
        Key: runKeyOf(parseRunIdOrThrow(handOff.runId)),
        UpdateExpression: "SET durationMs = :negative",
        ExpressionAttributeValues: { ":negative": -4_000 },
      }),
    );
    expect(await runOf(jobId, handOff.runId)).toMatchObject({ durationMs: 0 });
  });

  it("a cancel asked while the worker hands the run over ends it at the target's first call (409)", async () => {
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    // As if the request had landed before the hand-over was recorded: a live run with a request.
    const run = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
    if (run === null) throw new Error("no run");
    const asked = await requestRunCancel(api.fixture.engine, run, "job-cancel", now);
    expect(asked?.cancelRequestedAt).not.toBeNull();

    const stale = await callBack(handOff.heartbeatUrl, handOff.token);
    expect(stale.status, stale.text).toBe(409);
    expect(String((stale.body.error as { message: string }).message)).toContain("cancelled");
    expect(await runOf(jobId, handOff.runId)).toMatchObject({
      status: "cancelled",
      cancelledBy: "job-cancel",
      reason: "job cancelled",
    });
  });

  it("a completion that failed is retried by the job's policy, then dead", async () => {
    const jobId = await createAsyncJob({ retry: { maxAttempts: 2, initialDelaySeconds: 0 } });
    const first = await deliver(jobId);
    const failed = await callBack(first.completeUrl, first.token, {
      status: "failed",
      error: "export failed upstream",
    });
    expect(failed.status, failed.text).toBe(200);
    expect(failed.body).toMatchObject({
      status: "failed",
      attempt: 1,
      error: "export failed upstream",
    });

    const second = await deliver(jobId);
    expect(second.attempt).toBe(2);
    const dead = await callBack(second.completeUrl, second.token, {
      status: "failed",
      error: "still failing",
    });
    expect(dead.body).toMatchObject({ status: "dead", attempt: 2, error: "still failing" });
    const letters = await api.call("GET", "/dead-letters");
    expect(JSON.stringify(letters.body)).toContain(second.runId);
  });

  it("a failure reported with retryAfterSeconds is retried no sooner, and never past the job's maxDelaySeconds", async () => {
    const retryWait = async (retryAfterSeconds: number, maxDelaySeconds: number) => {
      const jobId = await createAsyncJob({
        retry: { maxAttempts: 2, initialDelaySeconds: 0, maxDelaySeconds },
      });
      const handOff = await deliver(jobId);
      const failed = await callBack(handOff.completeUrl, handOff.token, {
        status: "failed",
        error: "rate limited upstream",
        retryAfterSeconds,
      });
      expect(failed.body).toMatchObject({ status: "failed", attempt: 1 });
      const listed = await api.call("GET", `/jobs/${jobId}/runs`);
      const runs = (listed.body as { items: { attempt: number; dueAt: string }[] }).items;
      const next = runs.find((r) => r.attempt === 2);
      if (!next) throw new Error(`job ${jobId} has no next attempt: ${listed.text}`);
      // Its queued retry would otherwise be the reaper's to re-send in the cases after this one.
      expect((await api.call("POST", `/jobs/${jobId}/cancel`)).status).toBe(200);
      return Date.parse(next.dueAt) - Date.parse(String(failed.body.finishedAt));
    };
    expect(await retryWait(120, 600)).toBe(120_000);
    expect(await retryWait(120, 45)).toBe(45_000);
  });

  it("a failure reported not retryable goes dead at once", async () => {
    const jobId = await createAsyncJob({ retry: { maxAttempts: 5, initialDelaySeconds: 0 } });
    const handOff = await deliver(jobId);
    const dead = await callBack(handOff.completeUrl, handOff.token, {
      status: "failed",
      error: "bad input",
      retryable: false,
    });
    expect(dead.body).toMatchObject({ status: "dead", attempt: 1 });
  });

  it("a 409 naming a long error quotes whole characters of it: one its 200th unit cuts in two is left out", async () => {
    const jobId = await createAsyncJob({ retry: { maxAttempts: 1 } });
    const handOff = await deliver(jobId);
    // 199 characters, then one outside the BMP (two UTF-16 units) across the 200th.
    const error = `${"x".repeat(199)}\u{1F600} and the rest`;
    const ended = await callBack(handOff.completeUrl, handOff.token, { status: "failed", error });
    expect(ended.body).toMatchObject({ status: "dead", error });
    const refused = await callBack(handOff.heartbeatUrl, handOff.token);
    expect(refused.status, refused.text).toBe(409);
    // Cut at 200 units, the message ended in half the character, an unpaired surrogate, which
    // is no Unicode text: the API refuses one in any input for that reason.
    expect(String((refused.body.error as { message: string }).message)).toBe(
      `run ${handOff.runId}: the run has ended dead (${"x".repeat(199)}…)`,
    );
  });

  it("a completion sent again (its answer lost) answers as the first did; another outcome after it is 409 naming how the run ended", async () => {
    const message = (reply: { body: Record<string, unknown> }) =>
      String((reply.body.error as { message: string }).message);
    const succeeding = await createAsyncJob({ retry: { maxAttempts: 3 } });
    const handOff = await deliver(succeeding);
    const first = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(first.status, first.text).toBe(200);
    advance(5_000);
    const again = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(again.status, again.text).toBe(200);
    expect(again.body).toEqual(first.body);
    // The same token reporting a failure after its success: the run stands SUCCEEDED.
    const otherwise = await callBack(handOff.completeUrl, handOff.token, {
      status: "failed",
      error: "changed its mind",
    });
    expect(otherwise.status, otherwise.text).toBe(409);
    expect(otherwise.body).toMatchObject({ error: { code: "stale_run_token" } });
    expect(message(otherwise)).toContain("the run has ended succeeded");
    // A heartbeat after its own completion: the run keeps no lease any more.
    const beat = await callBack(handOff.heartbeatUrl, handOff.token);
    expect(beat.status, beat.text).toBe(409);
    expect(message(beat)).toBe(`run ${handOff.runId}: the run has ended succeeded`);
    expect(await runOf(succeeding, handOff.runId)).toMatchObject({ status: "succeeded" });

    // A failure sent again, retried or not: the same run, and no second next attempt.
    const failing = await createAsyncJob({ retry: { maxAttempts: 2, initialDelaySeconds: 0 } });
    const failed = await deliver(failing);
    const report = { status: "failed", error: "export failed upstream" };
    const once = await callBack(failed.completeUrl, failed.token, report);
    expect(once.body).toMatchObject({ status: "failed", error: "export failed upstream" });
    const twice = await callBack(failed.completeUrl, failed.token, report);
    expect(twice.status, twice.text).toBe(200);
    expect(twice.body).toEqual(once.body);
    for (const different of [
      { status: "succeeded" },
      { status: "failed", error: "another error" },
      { ...report, retryable: false },
    ]) {
      const refused = await callBack(failed.completeUrl, failed.token, different);
      expect(refused.status, refused.text).toBe(409);
      expect(message(refused)).toContain("the run has ended failed (export failed upstream)");
    }
    const runs = await api.call("GET", `/jobs/${failing}/runs`);
    expect((runs.body as { items: unknown[] }).items).toHaveLength(2);
    const retry = await deliver(failing);
    expect(retry.attempt).toBe(2);
    expect((await callBack(retry.completeUrl, retry.token, { status: "succeeded" })).status).toBe(
      200,
    );
    const notRetryable = await createAsyncJob({ retry: { maxAttempts: 5 } });
    const given = await deliver(notRetryable);
    const bad = { status: "failed", error: "bad input", retryable: false };
    const deadOnce = await callBack(given.completeUrl, given.token, bad);
    expect(deadOnce.body).toMatchObject({ status: "dead", attempt: 1 });
    const deadTwice = await callBack(given.completeUrl, given.token, bad);
    expect(deadTwice.status, deadTwice.text).toBe(200);
    expect(deadTwice.body).toEqual(deadOnce.body);
  });

  it("a completion after the run timed out is 409 naming the timeout, the first time and every repeat", async () => {
    const jobId = await createAsyncJob({ timeoutSeconds: 60, retry: { maxAttempts: 1 } });
    const handOff = await deliver(jobId);
    advance(61_000);
    for (const report of [
      { status: "succeeded" },
      { status: "succeeded" },
      { status: "failed", error: "timed out after 60 s" },
    ]) {
      const refused = await callBack(handOff.completeUrl, handOff.token, report);
      expect(refused.status, refused.text).toBe(409);
      expect(refused.body).toMatchObject({ error: { code: "stale_run_token" } });
      expect(String((refused.body.error as { message: string }).message)).toContain(
        "timed out after 60 s",
      );
    }
    expect(await runOf(jobId, handOff.runId)).toMatchObject({ status: "dead" });
  });

  it("another delivery's ending is 409 to the token before it, naming the start that took the run", async () => {
    const jobId = await createAsyncJob();
    const first = await deliver(jobId);
    advance(LEASE_MS + 2 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const second = await deliver(jobId);
    const done = await callBack(second.completeUrl, second.token, { status: "succeeded" });
    expect(done.status, done.text).toBe(200);
    const late = await callBack(first.completeUrl, first.token, { status: "succeeded" });
    expect(late.status, late.text).toBe(409);
    expect(String((late.body.error as { message: string }).message)).toContain(
      "the run was started again (fence 2); this token is of fence 1",
    );
    expect(
      (await callBack(second.completeUrl, second.token, { status: "succeeded" })).body,
    ).toEqual(done.body);
  });

  it("a repeat of a completion whose job write was lost makes that write: the one-off job completes", async () => {
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    // The API function dies between the run's ending and its job's write.
    await dyingAtTheJobWrite((engine) =>
      completeAsyncRun(engine, handOff.runId, handOff.token, { status: "succeeded" }),
    );
    expect((await api.call("GET", `/jobs/${jobId}`)).body).toMatchObject({ status: "active" });
    const again = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(again.status, again.text).toBe(200);
    expect((await api.call("GET", `/jobs/${jobId}`)).body).toMatchObject({
      status: "completed",
      lastRun: { runId: handOff.runId, status: "succeeded" },
    });
  });

  it("a job cancel's or a pause's (running: cancel) answer is the job after its writes: the handed-over run it ended is its lastRun, as GET /jobs/{id} then shows", async () => {
    for (const how of ["cancel", "pause"] as const)
      for (const kind of ["one-off", "recurring"] as const) {
        const jobId = await createAsyncJob(
          kind === "recurring" ? { schedule: { cron: "0 0 1 1 *", timezone: "UTC" } } : {},
        );
        if (kind === "recurring") {
          const triggered = await api.call("POST", `/jobs/${jobId}/trigger`);
          expect(triggered.status, triggered.text).toBe(202);
        }
        const handOff = await deliver(jobId);
        advance(1000);
        const asked =
          how === "cancel"
            ? await api.call("POST", `/jobs/${jobId}/cancel`)
            : await api.call("POST", `/jobs/${jobId}/pause`, { body: { running: "cancel" } });
        expect(asked.status, asked.text).toBe(200);
        const run = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
        expect(run, `${how} ${kind}`).toMatchObject({ status: "CANCELLED", durationMs: 1000 });
        expect(asked.body, `${how} ${kind}`).toMatchObject({
          status: how === "cancel" ? "cancelled" : "paused",
          lastRun: { runId: handOff.runId, status: "cancelled", finishedAt: run?.finishedAt },
        });
        const shown = await api.call("GET", `/jobs/${jobId}`);
        expect(asked.body, `${how} ${kind}`).toEqual(shown.body);
        expect(asked.headers.get("etag"), `${how} ${kind}`).toBe(shown.headers.get("etag"));
      }
  });

  it("a repeat of a handed-over run's cancel whose job write was lost makes that write: the one-off completes, the run its lastRun", async () => {
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    advance(1000);
    // The API function dies between the run's CANCELLED ending and its job's write.
    await dyingAtTheJobWrite((engine) => cancelRun(engine, TENANT_A, jobId, handOff.runId));
    expect((await api.call("GET", `/jobs/${jobId}`)).body).toMatchObject({
      status: "active",
      lastRun: null,
    });
    // The caller, answered 500, asks again: the cancel's answer (200), and its job's write is made.
    const again = await api.call("POST", `/jobs/${jobId}/runs/${handOff.runId}/cancel`);
    expect(again.status, again.text).toBe(200);
    expect(again.body).toMatchObject({ runId: handOff.runId, status: "cancelled" });
    const run = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
    expect(run).toMatchObject({ status: "CANCELLED", durationMs: 1000 });
    expect((await api.call("GET", `/jobs/${jobId}`)).body).toMatchObject({
      status: "completed",
      lastRun: { runId: handOff.runId, status: "cancelled", finishedAt: run?.finishedAt },
    });
  });

  it("a repeat of a pause with running: cancel whose write of its handed-over run on the job was lost makes that write: the run is its lastRun", async () => {
    const jobId = await createAsyncJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" } });
    const triggered = await api.call("POST", `/jobs/${jobId}/trigger`);
    expect(triggered.status, triggered.text).toBe(202);
    const handOff = await deliver(jobId);
    advance(1000);
    // The API function dies between the run's CANCELLED ending and its job's write.
    await dyingAtTheJobWrite((engine) => pauseJob(engine, TENANT_A, jobId, { running: "cancel" }));
    // The job's write is lost (its readers show the run it still lists as its lastRun meanwhile).
    expect(await getJob(api.fixture.engine, jobId)).toMatchObject({
      status: "PAUSED",
      lastRun: null,
    });
    // The caller, answered 500, asks again.
    const again = await api.call("POST", `/jobs/${jobId}/pause`, { body: { running: "cancel" } });
    expect(again.status, again.text).toBe(200);
    const run = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
    expect(run).toMatchObject({ status: "CANCELLED", cancelledBy: "pause", durationMs: 1000 });
    const shown = await api.call("GET", `/jobs/${jobId}`);
    expect(shown.body).toMatchObject({
      status: "paused",
      lastRun: { runId: handOff.runId, status: "cancelled", finishedAt: run?.finishedAt },
    });
    // The repeat answers the job as its write left it.
    expect(again.body).toEqual(shown.body);
    expect(await getJob(api.fixture.engine, jobId)).toMatchObject({
      lastRun: { runId: handOff.runId },
      activeRuns: {},
    });
  });

  it("a repeat of a job cancel whose write of its handed-over run on the job was lost makes that write: the run is its lastRun", async () => {
    for (const how of ["one-off", "recurring"] as const) {
      const jobId = await createAsyncJob(
        how === "recurring" ? { schedule: { cron: "0 0 1 1 *", timezone: "UTC" } } : {},
      );
      if (how === "recurring") {
        const triggered = await api.call("POST", `/jobs/${jobId}/trigger`);
        expect(triggered.status, triggered.text).toBe(202);
      }
      const handOff = await deliver(jobId);
      advance(1000);
      // The API function dies between the run's CANCELLED ending and its job's write.
      await dyingAtTheJobWrite((engine) => cancelJob(engine, TENANT_A, jobId));
      // The job's write is lost (a recurring job's readers show the run it lists meanwhile).
      expect(await getJob(api.fixture.engine, jobId), how).toMatchObject({
        status: "CANCELLED",
        lastRun: null,
      });
      // The caller, answered 500, asks again.
      const again = await api.call("POST", `/jobs/${jobId}/cancel`);
      expect(again.status, again.text).toBe(200);
      const run = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
      expect(run, how).toMatchObject({
        status: "CANCELLED",
        cancelledBy: "job-cancel",
        durationMs: 1000,
      });
      const shown = await api.call("GET", `/jobs/${jobId}`);
      expect(shown.body, how).toMatchObject({
        status: "cancelled",
        lastRun: { runId: handOff.runId, status: "cancelled", finishedAt: run?.finishedAt },
      });
      // The repeat answers the job as its write left it.
      expect(again.body, how).toEqual(shown.body);
      expect(await getJob(api.fixture.engine, jobId), how).toMatchObject({
        lastRun: { runId: handOff.runId },
        activeRuns: {},
      });
    }
  });

  it("a repeat of a job cancel, or of a pause with running: cancel, whose write of a handed-over run older than the lookahead was lost makes that write", async () => {
    for (const how of ["cancel", "pause"] as const) {
      const jobId = await createAsyncJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" } });
      const triggered = await api.call("POST", `/jobs/${jobId}/trigger`);
      expect(triggered.status, triggered.text).toBe(202);
      const handOff = await deliver(jobId);
      // Its target runs it for 20 minutes, heartbeating: its occurrence lies well behind the
      // lookahead (5 minutes), the run listed in its job's activeRuns alone.
      await heartbeatsFor(handOff, 24);
      const ending = (engine: Engine) =>
        how === "cancel"
          ? cancelJob(engine, TENANT_A, jobId)
          : pauseJob(engine, TENANT_A, jobId, { running: "cancel" });
      // The API function dies between the run's CANCELLED ending and its job's write.
      await dyingAtTheJobWrite(ending);
      const run = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
      expect(run, how).toMatchObject({ status: "CANCELLED", durationMs: 20 * 60_000 });
      // The job still lists the run: its readers show it as the job's lastRun meanwhile.
      const lastRun = { runId: handOff.runId, status: "cancelled", finishedAt: run?.finishedAt };
      expect((await api.call("GET", `/jobs/${jobId}`)).body, how).toMatchObject({ lastRun });
      // The caller, answered 500, asks again.
      const again =
        how === "cancel"
          ? await api.call("POST", `/jobs/${jobId}/cancel`)
          : await api.call("POST", `/jobs/${jobId}/pause`, { body: { running: "cancel" } });
      expect(again.status, again.text).toBe(200);
      const shown = await api.call("GET", `/jobs/${jobId}`);
      expect(shown.body, how).toMatchObject({
        status: how === "cancel" ? "cancelled" : "paused",
        lastRun,
      });
      // The repeat answers the job as its write left it.
      expect(again.body, how).toEqual(shown.body);
      // Written on the job itself, the run no longer listed.
      const stored = await getJob(api.fixture.engine, jobId);
      expect(stored?.lastRun, how).toMatchObject({ runId: handOff.runId, status: "CANCELLED" });
      expect(stored?.activeRuns, how).toEqual({});
    }
  });

  it("a job cancel, its repeat and the target's completion at once: the run ends once, and that ending is its job's lastRun", async () => {
    const endings = new Set<string>();
    for (let round = 0; round < 4; round++) {
      const jobId = await createAsyncJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" } });
      const triggered = await api.call("POST", `/jobs/${jobId}/trigger`);
      expect(triggered.status, triggered.text).toBe(202);
      const handOff = await deliver(jobId);
      advance(1000);
      const complete = () => callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
      const cancels = Promise.all([
        api.call("POST", `/jobs/${jobId}/cancel`),
        api.call("POST", `/jobs/${jobId}/cancel`),
      ]);
      // Later each round: the cancels' writes land after it, amid it, and (the last) before it.
      const [[first, repeat], completed] = await Promise.all([
        cancels,
        round < 3 ? sleep(round * 40).then(complete) : cancels.then(complete),
      ]);
      expect([first.status, repeat.status], first.text + repeat.text).toEqual([200, 200]);
      const run = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
      const status = run?.status;
      expect(status === "CANCELLED" || status === "SUCCEEDED", String(status)).toBe(true);
      endings.add(String(status));
      expect(completed.status, completed.text).toBe(status === "SUCCEEDED" ? 200 : 409);
      expect(run?.durationMs).toBe(1000);
      const history = await api.call("GET", `/jobs/${jobId}/runs`);
      expect((history.body as { items: unknown[] }).items).toHaveLength(1);
      expect(await getJob(api.fixture.engine, jobId)).toMatchObject({
        status: "CANCELLED",
        lastRun: { runId: handOff.runId, status, finishedAt: run?.finishedAt },
        activeRuns: {},
      });
    }
    // The last round's cancels end the run; whether an earlier one's did is timing's.
    expect(endings.has("CANCELLED")).toBe(true);
  });

  it("a repeat of a dead attempt's completion after its replay does not complete the one-off the replay runs for", async () => {
    const jobId = await createAsyncJob({ retry: { maxAttempts: 1 } });
    const handOff = await deliver(jobId);
    // Paused, the dead ending leaves the one-off ACTIVE to its resume; the replay is parked until then.
    expect((await api.call("POST", `/jobs/${jobId}/pause`, { body: {} })).status).toBe(200);
    const bad = { status: "failed", error: "bad input", retryable: false };
    const dead = await callBack(handOff.completeUrl, handOff.token, bad);
    expect(dead.body).toMatchObject({ status: "dead", attempt: 1 });
    const replay = await api.call("POST", `/dead-letters/${handOff.runId}/replay`);
    expect(replay.status, replay.text).toBe(202);
    expect(await processNext(jobId)).toBe(1);
    const resumed = await api.call("POST", `/jobs/${jobId}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    expect(resumed.body).toMatchObject({ status: "active" });
    // The target sends its completion again (its answer lost): its own ending, so 200, but the
    // occurrence is the replay's now, and the job waits for it.
    const again = await callBack(handOff.completeUrl, handOff.token, bad);
    expect(again.status, again.text).toBe(200);
    expect(again.body).toMatchObject({ status: "dead", attempt: 1 });
    expect((await api.call("GET", `/jobs/${jobId}`)).body).toMatchObject({ status: "active" });
    const second = await deliver(jobId);
    expect(second.attempt).toBe(2);
    const done = await callBack(second.completeUrl, second.token, { status: "succeeded" });
    expect(done.status, done.text).toBe(200);
    expect((await api.call("GET", `/jobs/${jobId}`)).body).toMatchObject({
      status: "completed",
      lastRun: { runId: second.runId, status: "succeeded" },
    });
  });

  it("a run an older version delivered with no timesOutAt, timed out, is not taken for a completion copying the timeout's text after an edit of the job's timeout", async () => {
    const jobId = await createAsyncJob({
      timeoutSeconds: 60,
      retry: { maxAttempts: 2, initialDelaySeconds: 0 },
    });
    const handOff = await deliver(jobId);
    // As an older version left a run whose worker died after the 202: no timesOutAt on its token's write.
    await api.fixture.engine.doc.send(
      new UpdateCommand({
        TableName: api.fixture.engine.tables.runs,
        Key: runKeyOf(parseRunIdOrThrow(handOff.runId)),
        UpdateExpression: "REMOVE timesOutAt, handedOverTimeoutSeconds, handedOverAt",
      }),
    );
    advance(61_000);
    const late = await callBack(handOff.heartbeatUrl, handOff.token);
    expect(late.status, late.text).toBe(409);
    const edited = await api.call("PATCH", `/jobs/${jobId}`, {
      body: { timeoutSeconds: 3600 },
      headers: { "If-Match": '"1"' },
    });
    expect(edited.status, edited.text).toBe(200);
    const copied = await callBack(handOff.completeUrl, handOff.token, {
      status: "failed",
      error: "timed out after 60 s",
    });
    expect(copied.status, copied.text).toBe(409);
    expect(String((copied.body.error as { message: string }).message)).toContain(
      "the run has ended failed (timed out after 60 s)",
    );
  });

  it("a repeat racing the first completion answers as it; a heartbeat racing it answers as one after it", async () => {
    const { engine } = api.fixture;

    // Same outcome: the repeat lands first, a millisecond on; the first answers the run as ended.
    const sameJob = await createAsyncJob();
    const same = await deliver(sameJob);
    const ahead = racing("finishedAt = :finishedAt", async () => {
      advance(1);
      await completeAsyncRun(engine, same.runId, same.token, { status: "succeeded" });
    });
    try {
      const run = await completeAsyncRun(ahead.engine, same.runId, same.token, {
        status: "succeeded",
      });
      expect(run).toMatchObject({ status: "SUCCEEDED", fence: 1 });
    } finally {
      ahead.destroy();
    }

    // Another outcome lands first: refused, naming it.
    const otherJob = await createAsyncJob({ retry: { maxAttempts: 1 } });
    const other = await deliver(otherJob);
    const failing = racing("finishedAt = :finishedAt", async () => {
      advance(1);
      await completeAsyncRun(engine, other.runId, other.token, {
        status: "failed",
        error: "gave up",
      });
    });
    try {
      await expect(
        completeAsyncRun(failing.engine, other.runId, other.token, { status: "succeeded" }),
      ).rejects.toMatchObject({
        code: "run_token_stale",
        message: expect.stringContaining("the run has ended dead (gave up)"),
        context: { status: "DEAD" },
      });
    } finally {
      failing.destroy();
    }

    // A heartbeat whose lease write comes after its own token's completion.
    const beatJob = await createAsyncJob();
    const beating = await deliver(beatJob);
    const completing = racing("leaseUntil = :leaseUntil", async () => {
      advance(1);
      await completeAsyncRun(engine, beating.runId, beating.token, { status: "succeeded" });
    });
    try {
      await expect(
        heartbeatAsyncRun(completing.engine, beating.runId, beating.token),
      ).rejects.toMatchObject({
        code: "run_token_stale",
        message: `run ${beating.runId}: the run has ended succeeded`,
        context: { status: "SUCCEEDED" },
      });
    } finally {
      completing.destroy();
    }
  });

  it("past the job's timeout a heartbeat ends the run as timed out (retried) and is refused", async () => {
    const jobId = await createAsyncJob({
      timeoutSeconds: 120,
      retry: { maxAttempts: 2, initialDelaySeconds: 0 },
    });
    const handOff = await deliver(jobId);
    advance(50_000);
    expect((await callBack(handOff.heartbeatUrl, handOff.token)).status).toBe(200);
    advance(50_000);
    expect((await callBack(handOff.heartbeatUrl, handOff.token)).status).toBe(200);
    advance(20_000);
    const late = await callBack(handOff.heartbeatUrl, handOff.token);
    expect(late.status, late.text).toBe(409);
    expect(late.body).toMatchObject({ error: { code: "stale_run_token" } });
    expect(await runOf(jobId, handOff.runId)).toMatchObject({
      status: "failed",
      error: "timed out after 120 s",
    });
    expect((await deliver(jobId)).attempt).toBe(2);
  });

  it("a run whose worker died after the target's 202, before recording the hand-over, still times out: heartbeats do not keep it past its timeout", async () => {
    const jobId = await createAsyncJob({ timeoutSeconds: 120, retry: { maxAttempts: 1 } });
    const handOff = await deliverWorkerDyingAfter202(jobId);
    const item = await getRun(api.fixture.engine, parseRunIdOrThrow(handOff.runId));
    expect(item).toMatchObject({ status: "RUNNING", fence: 1 });
    expect(item?.handedOverAt).toBeUndefined();
    // Its history is kept for the retention after it can time out, as a handed-over run's is: the
    // token's write sets it, before the delivery.
    const { engine } = api.fixture;
    const { Item: stored } = await engine.doc.send(
      new GetCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(parseRunIdOrThrow(handOff.runId)),
        ConsistentRead: true,
      }),
    );
    expect(stored?.expiresAt).toBe(
      Math.floor((Date.parse(String(item?.startedAt)) + 120_000) / 1000) +
        engine.settings.retentionDays * 86_400,
    );

    // The target heartbeats well inside its lease, as told, and past the attempt's timeout. Its
    // heartbeat answers when that is: the run's start plus the job's timeout.
    advance(50_000);
    const beat = await callBack(handOff.heartbeatUrl, handOff.token);
    expect(beat.status, beat.text).toBe(200);
    expect(beat.body.timesOutAt).toBe(
      new Date(Date.parse(String(item?.startedAt)) + 120_000).toISOString(),
    );
    advance(50_000);
    expect((await callBack(handOff.heartbeatUrl, handOff.token)).status).toBe(200);
    advance(20_000);
    const late = await callBack(handOff.heartbeatUrl, handOff.token);
    expect(late.status, late.text).toBe(409);
    expect(late.body).toMatchObject({ error: { code: "stale_run_token" } });
    expect(await runOf(jobId, handOff.runId)).toMatchObject({
      status: "dead",
      error: "timed out after 120 s",
    });
  });

  it("refuses a missing, malformed, misdirected or another tenant's token with 401", async () => {
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    const handedOverAt = now.getTime();
    const expect401 = async (token: string | null, url = handOff.heartbeatUrl) => {
      const reply = await callBack(url, token);
      expect(reply.status, reply.text).toBe(401);
      expect(reply.body).toMatchObject({ error: { code: "unauthorized" } });
      expect(reply.headers.get("www-authenticate")).toMatch(/^Bearer /);
    };
    await expect401(null);
    await expect401("not-a-token");
    // A signature that does not match its claims: one character of the MAC changed.
    const tampered = `${handOff.token.slice(0, -2)}${handOff.token.endsWith("A") ? "B" : "A"}A`;
    await expect401(tampered);
    // A good token of one run presented for another.
    const otherJob = await createAsyncJob();
    const other = await deliver(otherJob);
    await expect401(handOff.token, other.heartbeatUrl);
    // A token of the old form naming A as its tenant, signed with B's secret.
    const secretOfB = (await tenantWebhookSecrets(api.fixture.engine, "tenant-b")).current;
    await expect401(
      forgedWithWebhookSecret(secretOfB, { runId: handOff.runId, fence: 1, tenantId: TENANT_A }),
    );
    // Tenant credentials are not a run token.
    await expect401(KEY_B);
    // Nothing of the above touched the run.
    const run = await getRun(api.fixture.engine, {
      jobId,
      scheduledFor: (await runOf(jobId, handOff.runId)).scheduledFor as string,
      attempt: 1,
    });
    expect(run).toMatchObject({ status: "RUNNING", fence: 1, tenantId: TENANT_A });
    expect(run?.leaseUntil).toBe(new Date(handedOverAt + LEASE_MS).toISOString());
  });

  it("a target may call back with its token before it answers: the run holds the token's hash from before the delivery", async () => {
    const early: { status: number; fence: unknown }[] = [];
    const handedOff: { token: string; completeUrl: string }[] = [];
    const eager = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        const token = String(request.headers["x-scheduler-run-token"] ?? "");
        const url = String(request.headers["x-scheduler-heartbeat-url"] ?? "");
        void (async () => {
          const beat = await callBack(url, token);
          const runId = String(request.headers["x-scheduler-run-id"] ?? "");
          const run = await getRun(api.fixture.engine, parseRunIdOrThrow(runId));
          early.push({ status: beat.status, fence: run?.fence });
          handedOff.push({
            token,
            completeUrl: String(request.headers["x-scheduler-complete-url"] ?? ""),
          });
          response.writeHead(202).end();
        })();
      });
    });
    await new Promise<void>((resolve) => eager.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = eager.address() as AddressInfo;
      const runAt = new Date(now.getTime() + DUE_IN_MS);
      const created = await api.call("POST", "/jobs", {
        body: {
          type: "http",
          schedule: { runAt: runAt.toISOString() },
          target: { url: `http://127.0.0.1:${port}/eager`, mode: "async" },
          timeoutSeconds: 3600,
        },
      });
      expect(created.status, created.text).toBe(201);
      now = runAt;
      const jobId = (created.body as { id: string }).id;
      const deadline = Date.now() + 20_000;
      while (early.length === 0 && Date.now() < deadline) {
        const batch = await receiveRuns(api.fixture.engine.sqs, api.fixture.engine.queues.normal, {
          max: 10,
          waitSeconds: 1,
        });
        for (const received of batch.filter((r) => r.message.jobId === jobId))
          await api.fixture.process(worker, received);
      }
      expect(early).toEqual([{ status: 200, fence: 1 }]);
      expect(await runOf(jobId, runIdOf(jobId, now, 1))).toMatchObject({
        status: "running",
        fence: 1,
        handedOverAt: now.toISOString(),
      });
      const [taken] = handedOff;
      if (taken === undefined) throw new Error("the target was handed nothing");
      const done = await callBack(taken.completeUrl, taken.token, { status: "succeeded" });
      expect(done.body).toMatchObject({ status: "succeeded" });
    } finally {
      await new Promise((resolve) => eager.close(resolve));
    }
  });

  it("a target that completes its run before its 202 reaches the worker: the worker lets go, and counts no lost fence", async () => {
    const workerMetrics = new MetricsRecorder();
    const early: number[] = [];
    const quick = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        const token = String(request.headers["x-scheduler-run-token"] ?? "");
        const url = String(request.headers["x-scheduler-complete-url"] ?? "");
        void (async () => {
          early.push((await callBack(url, token, { status: "succeeded" })).status);
          response.writeHead(202).end();
        })();
      });
    });
    await new Promise<void>((resolve) => quick.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = quick.address() as AddressInfo;
      const jobId = await createAsyncJob({
        target: { url: `http://127.0.0.1:${port}/quick`, mode: "async" },
      });
      const observed = {
        ...worker,
        engine: { ...worker.engine, obs: { ...worker.engine.obs, metrics: workerMetrics } },
      };
      expect(await processNext(jobId, observed)).toBe(1);
      expect(early).toEqual([200]);
      expect(await runOf(jobId, runIdOf(jobId, now, 1))).toMatchObject({
        status: "succeeded",
        fence: 1,
      });
      // The target's own ending, by the token this delivery carried: no other start took the run.
      expect(workerMetrics.sum(METRICS.fenceLost)).toBe(0);
    } finally {
      await new Promise((resolve) => quick.close(resolve));
    }
  });

  it("a receiver holding the tenant's webhook secret cannot make a token: forged, it is refused (401) and the run is unchanged", async () => {
    // Every receiver of the tenant's webhooks holds its signing secret (it verifies deliveries
    // with it), including one a team pointed a job at a third party. The run id and the fence of
    // A's async run are no secret: deliveries and the run history show them.
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    const handedOverAt = now.getTime();
    const secret = (await tenantWebhookSecrets(api.fixture.engine, TENANT_A)).current;
    const forged = [
      // What the scheme before this one made: an HMAC under a key derived from that secret.
      forgedWithWebhookSecret(secret, { runId: handOff.runId, fence: 1, tenantId: TENANT_A }),
      // The token's own shape, with a value the receiver made up.
      `${handOff.token.slice(0, handOff.token.lastIndexOf(".") + 1)}${Buffer.alloc(32).toString("base64url")}`,
    ];
    for (const token of forged) {
      for (const url of [handOff.heartbeatUrl, handOff.completeUrl]) {
        const reply = await callBack(
          url,
          token,
          url.endsWith("complete") ? { status: "succeeded" } : undefined,
        );
        expect(reply.status, reply.text).toBe(401);
        expect(reply.body).toMatchObject({ error: { code: "unauthorized" } });
      }
    }
    expect(await runOf(jobId, handOff.runId)).toMatchObject({
      status: "running",
      fence: 1,
      leaseUntil: new Date(handedOverAt + LEASE_MS).toISOString(),
      finishedAt: null,
    });
    // The token the delivery carried still holds the run.
    expect((await callBack(handOff.heartbeatUrl, handOff.token)).status).toBe(200);
    const done = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(done.body).toMatchObject({ status: "succeeded" });
  });

  it("a token that is not the run's is refused alike whether the run exists or not (401), another tenant's included", async () => {
    // Tenant B's own async run, with the token its target was handed.
    const runAt = new Date(now.getTime() + DUE_IN_MS);
    const createdByB = await api.call("POST", "/jobs", {
      key: KEY_B,
      body: {
        type: "http",
        schedule: { runAt: runAt.toISOString() },
        target: { url: target.url, mode: "async" },
        timeoutSeconds: 3600,
      },
    });
    expect(createdByB.status, createdByB.text).toBe(201);
    now = runAt;
    const ofB = await deliver((createdByB.body as { id: string }).id);
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    const missingRunId = runIdOf(jobId, now, 2); // the same occurrence's second attempt: never queued
    const answer = async (runId: string, token: string, action: "heartbeat" | "complete") => {
      const reply = await callBack(
        `${api.server.url}/runs/${runId}/${action}`,
        token,
        action === "complete" ? { status: "failed", error: "from B", retryable: false } : undefined,
      );
      return { status: reply.status, body: reply.text };
    };
    for (const action of ["heartbeat", "complete"] as const) {
      for (const token of [
        ofB.token,
        handOff.token.replace(/.$/, (c) => (c === "A" ? "B" : "A")),
      ]) {
        const ofA = await answer(handOff.runId, token, action);
        expect(ofA.status, ofA.body).toBe(401);
        expect(await answer(missingRunId, token, action)).toEqual(ofA);
      }
    }
    // A's run is as it was, and B's token still holds B's run.
    expect(await runOf(jobId, handOff.runId)).toMatchObject({ status: "running", fence: 1 });
    expect((await callBack(ofB.heartbeatUrl, ofB.token)).status).toBe(200);
    for (const { completeUrl, token } of [ofB, handOff])
      expect((await callBack(completeUrl, token, { status: "succeeded" })).status).toBe(200);
  });

  it("a target's heartbeats count against its tenant's requestsPerSecond, as the tenant's own requests do", async () => {
    const jobId = await createAsyncJob();
    const handOff = await deliver(jobId);
    const setRate = (body: Record<string, unknown>) =>
      api.call("PUT", `/tenants/${TENANT_A}/quotas`, { body });
    expect((await setRate({ requestsPerSecond: 1 })).status).toBe(200);
    try {
      // The bucket holds two seconds' worth: two heartbeats pass at once, the rest wait their turn.
      const beats = await Promise.all(
        Array.from({ length: 8 }, () => callBack(handOff.heartbeatUrl, handOff.token)),
      );
      const refused = beats.filter((b) => b.status === 429);
      expect(beats.filter((b) => b.status === 200).length).toBeGreaterThanOrEqual(1);
      expect(refused.length).toBeGreaterThanOrEqual(5);
      expect(refused[0]?.body).toMatchObject({
        error: { code: "rate_limited", quota: "requestsPerSecond" },
      });
    } finally {
      // The tenant's own bucket is spent too: wait for a token to lift the limit.
      const deadline = Date.now() + 10_000;
      while ((await setRate({})).status === 429 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
    const done = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(done.status, done.text).toBe(200);
  });

  it("a 202 from a target without async mode is an ordinary success", async () => {
    const runAt = new Date(now.getTime() + DUE_IN_MS);
    const created = await api.call("POST", "/jobs", {
      body: { type: "http", schedule: { runAt: runAt.toISOString() }, target: { url: target.url } },
    });
    now = runAt;
    const jobId = (created.body as { id: string }).id;
    const handOff = await deliver(jobId);
    expect(handOff.token).toBe("");
    expect(await runOf(jobId, handOff.runId)).toMatchObject({ status: "succeeded" });
  });
});

describe("async mode without the API's URL", () => {
  it("fails the run without a retry, naming API_URL", async () => {
    const jobId = await createAsyncJob();
    const engine = api.fixture.engine;
    const unconfigured: WorkerDeps = {
      engine,
      workerId: "no-api-url",
      handlers: builtInHandlers(
        { signingSecrets: cachedSigningSecrets(engine), allowPrivateTargets: true },
        engine.clock,
      ),
    };
    const deadline = Date.now() + 20_000;
    let processed = false;
    while (!processed && Date.now() < deadline) {
      const batch = await receiveRuns(engine.sqs, engine.queues.normal, {
        max: 10,
        waitSeconds: 1,
      });
      for (const received of batch.filter((r) => r.message.jobId === jobId)) {
        await processRun(unconfigured, received);
        processed = true;
      }
    }
    const runs = await api.call("GET", `/jobs/${jobId}/runs`);
    expect((runs.body as { items: unknown[] }).items).toMatchObject([
      { status: "dead", error: expect.stringContaining("API_URL") },
    ]);
  });
});

describe("an async target's run calls are charged for what they read", () => {
  it("a completion that fans out to large dependents costs its tenant the tokens for their reads: the tenant's next request waits", async () => {
    const asB = { key: KEY_B };
    const runAt = new Date(now.getTime() + DUE_IN_MS);
    const upstream = await api.call("POST", "/jobs", {
      ...asB,
      body: {
        type: "http",
        schedule: { runAt: runAt.toISOString() },
        target: { url: target.url, mode: "async" },
        timeoutSeconds: 3600,
      },
    });
    expect(upstream.status, upstream.text).toBe(201);
    const upstreamId = (upstream.body as { id: string }).id;
    // 20 dependents of 60 KB: the completion's fan-out reads each whole and consistently (15
    // units), about 300 units in all, 200 past the free 100: two tokens owed.
    const blob = "x".repeat(60_000);
    for (let made = 0; made < 20; made += 10) {
      const dependents = await Promise.all(
        Array.from({ length: 10 }, () =>
          api.call("POST", "/jobs", {
            ...asB,
            body: {
              type: "report",
              payload: { blob },
              schedule: { after: { jobs: [upstreamId] } },
            },
          }),
        ),
      );
      expect(dependents.map((r) => r.status)).toEqual(Array(10).fill(201));
    }
    now = runAt;
    const handOff = await deliver(upstreamId);
    // One request a second, a bucket of two: without the charge the completion and one more pass.
    const limited = await api.call("PUT", "/tenants/tenant-b/quotas", {
      body: { requestsPerSecond: 1 },
    });
    expect(limited.status, limited.text).toBe(200);
    try {
      const completed = await callBack(handOff.completeUrl, handOff.token, {
        status: "succeeded",
      });
      expect(completed.status, completed.text).toBe(200);
      const next = await api.call("GET", "/quotas", asB);
      expect(next.status, next.text).toBe(429);
      expect(Number(next.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    } finally {
      await api.call("PUT", "/tenants/tenant-b/quotas", { body: {} });
    }
  });
});

describe("async mode: a one-off's run a pause with running: cancel cancelled, then resumed", () => {
  it("handed over: the pause ends it at once, and the resume's next attempt is delivered without waiting for its timeout", async () => {
    const jobId = await createAsyncJob();
    const first = await deliver(jobId);
    await pauseJob(api.fixture.engine, TENANT_A, jobId, { running: "cancel" });
    expect(await runOf(jobId, first.runId)).toMatchObject({ status: "cancelled" });
    await resumeJob(api.fixture.engine, TENANT_A, jobId);
    const second = await deliver(jobId);
    expect([second.attempt, (await callBack(first.heartbeatUrl, first.token)).status]).toEqual([
      2, 409,
    ]);
  });

  it("its worker died after the 202: the next attempt waits, and the target's next heartbeat ends the run", async () => {
    const jobId = await createAsyncJob();
    const first = await deliverWorkerDyingAfter202(jobId);
    await pauseJob(api.fixture.engine, TENANT_A, jobId, { running: "cancel" });
    await resumeJob(api.fixture.engine, TENANT_A, jobId);
    expect(await processNext(jobId)).toBe(1);
    const next = { ...parseRunIdOrThrow(first.runId), attempt: 2 };
    expect((await getRun(api.fixture.engine, next))?.reason).toBe(
      `waiting: ${first.runId} has not ended (RUNNING)`,
    );
    expect((await callBack(first.heartbeatUrl, first.token)).status).toBe(409);
    expect(await runOf(jobId, first.runId)).toMatchObject({ status: "cancelled" });
    const recheckAt = (await getRun(api.fixture.engine, next))?.dueAt ?? "";
    now = new Date(Date.parse(recheckAt));
    expect((await deliver(jobId)).attempt).toBe(2);
  });
});

describe("a one-off's run handed over when an edit makes the job recurring", () => {
  it("a job cancel 50 minutes on, within the attempt's timeout, still ends it: the recurring job reads the one-off era it keeps (oneOffEra)", async () => {
    const jobId = await createAsyncJob();
    await deliver(jobId);
    const runId = runIdOf(jobId, now, 1);
    const { engine } = api.fixture;
    const job = await getJob(engine, jobId);
    if (!job) throw new Error(`no job ${jobId}`);
    await editJob(engine, job.tenantId, jobId, job.version, {
      schedule: dailyAwayFrom(now).schedule,
    });
    // Past 900 s and a lease, the longest a sync attempt runs, and a lookahead; its 1 h timeout still ahead.
    advance(50 * 60_000);
    expect((await runOf(jobId, runId)).status).toBe("running");
    await cancelJob(engine, job.tenantId, jobId);
    expect((await runOf(jobId, runId)).status).toBe("cancelled");
  });
});

describe("async mode at odd moments (an adversarial review): what holds", () => {
  it("a success and a retryable failure completed at once: one ending, and no retry runs after the success", async () => {
    const jobId = await createAsyncJob({
      retry: { maxAttempts: 3, initialDelaySeconds: 0, maxDelaySeconds: 0 },
    });
    const handOff = await deliver(jobId);
    const { engine } = api.fixture;
    // The failure's next attempt is put, then, before its FAILED ending is sent, the success lands.
    const failing = racing("finishedAt = :finishedAt", async () => {
      advance(1);
      await completeAsyncRun(engine, handOff.runId, handOff.token, { status: "succeeded" });
    });
    try {
      await expect(
        completeAsyncRun(failing.engine, handOff.runId, handOff.token, {
          status: "failed",
          error: "upstream export failed",
        }),
      ).rejects.toMatchObject({ code: "run_token_stale", context: { status: "SUCCEEDED" } });
    } finally {
      failing.destroy();
    }
    expect(await runOf(jobId, handOff.runId)).toMatchObject({ status: "succeeded" });
    // The next attempt the failure put is taken back: it never runs, nor is delivered.
    const ref = parseRunIdOrThrow(handOff.runId);
    expect(await getRun(engine, { ...ref, attempt: 2 })).toMatchObject({ status: "SKIPPED" });
    advance(10 * 60_000);
    await reap(engine, { now });
    const delivered = target.handOffs.length;
    await processNext(jobId, worker, NO_DELIVERY_WAIT_MS);
    expect(target.handOffs.length).toBe(delivered);
  });

  it("a target that reports a retryable failure before its 202 reaches the worker: the run is FAILED once, its retry is delivered once", async () => {
    const early: number[] = [];
    const failingFirst = await startAsyncTarget({
      before: async (handOff) => {
        const body = { status: "failed", error: "no disk" };
        early.push((await callBack(handOff.completeUrl, handOff.token, body)).status);
      },
    });
    try {
      const jobId = await createAsyncJob({
        target: { url: failingFirst.url, mode: "async" },
        retry: { maxAttempts: 2, initialDelaySeconds: 0, maxDelaySeconds: 0 },
      });
      const first = await deliver(jobId, worker, failingFirst);
      expect(early).toEqual([200]);
      expect(await runOf(jobId, first.runId)).toMatchObject({
        status: "failed",
        error: "no disk",
        fence: 1,
      });
      // The worker let go of the run the target ended; the retry the failure queued runs once.
      advance(1_000);
      const second = await deliver(jobId, worker, failingFirst);
      expect(second.runId).toBe(runIdOf(jobId, parseRunIdOrThrow(first.runId).scheduledFor, 2));
      expect(await runOf(jobId, second.runId)).toMatchObject({ status: "dead" });
      const delivered = failingFirst.handOffs.length;
      advance(10 * 60_000);
      await reap(api.fixture.engine, { now });
      await processNext(jobId, worker, NO_DELIVERY_WAIT_MS);
      expect(failingFirst.handOffs.length).toBe(delivered);
    } finally {
      await failingFirst.close();
    }
  });

  it("a triggered run of a one-off handed over hours ago is ended by its job's cancel: its target's next heartbeat is 409", async () => {
    const created = await api.call("POST", "/jobs", {
      body: {
        type: "http",
        schedule: { runAt: new Date(now.getTime() + 86_400_000).toISOString() },
        target: { url: target.url, mode: "async" },
        timeoutSeconds: 86_400,
      },
    });
    expect(created.status, created.text).toBe(201);
    const jobId = (created.body as { id: string }).id;
    const triggered = await api.call("POST", `/jobs/${jobId}/trigger`);
    expect(triggered.status, triggered.text).toBe(202);
    const handOff = await deliver(jobId);
    expect(await runOf(jobId, handOff.runId)).toMatchObject({ status: "running" });
    // The target heartbeats for two hours (every 50 s), then its job is cancelled.
    await heartbeatsFor(handOff, 144);
    const cancelled = await api.call("POST", `/jobs/${jobId}/cancel`);
    expect(cancelled.status, cancelled.text).toBe(200);
    expect(await runOf(jobId, handOff.runId)).toMatchObject({ status: "cancelled" });
    expect((await callBack(handOff.heartbeatUrl, handOff.token)).status).toBe(409);
  });

  it("a target that completes its run with success and then answers its delivery 500: the run stays SUCCEEDED and no retry is delivered", async () => {
    const early: number[] = [];
    const contrary = await startAsyncTarget({
      answer: 500,
      before: async (handOff) => {
        const body = { status: "succeeded" };
        early.push((await callBack(handOff.completeUrl, handOff.token, body)).status);
      },
    });
    try {
      const jobId = await createAsyncJob({
        target: { url: contrary.url, mode: "async" },
        retry: { maxAttempts: 3, initialDelaySeconds: 0, maxDelaySeconds: 0 },
      });
      const first = await deliver(jobId, worker, contrary);
      expect(early).toEqual([200]);
      expect(await runOf(jobId, first.runId)).toMatchObject({ status: "succeeded" });
      const ref = parseRunIdOrThrow(first.runId);
      expect(await getRun(api.fixture.engine, { ...ref, attempt: 2 })).toMatchObject({
        status: "SKIPPED",
      });
      advance(10 * 60_000);
      await reap(api.fixture.engine, { now });
      await processNext(jobId, worker, NO_DELIVERY_WAIT_MS);
      expect(contrary.handOffs.length).toBe(1);
    } finally {
      await contrary.close();
    }
  });

  it("after the worker timed the attempt out (FAILED, a retry queued), the first delivery's success is 409 and only the retry can succeed", async () => {
    const jobId = await createAsyncJob({
      timeoutSeconds: 120,
      retry: { maxAttempts: 2, initialDelaySeconds: 0, maxDelaySeconds: 0 },
    });
    const first = await deliver(jobId);
    // Quiet past its lease and its timeout: the reaper re-sends, the worker ends it timed out.
    advance(121_000 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const before = target.handOffs.length;
    await processNext(jobId);
    expect(target.handOffs.length).toBe(before);
    expect(await runOf(jobId, first.runId)).toMatchObject({ status: "failed" });
    const late = await callBack(first.completeUrl, first.token, { status: "succeeded" });
    expect(late.status, late.text).toBe(409);
    const retry = await deliver(jobId);
    expect(retry.runId).not.toBe(first.runId);
    const done = await callBack(retry.completeUrl, retry.token, { status: "succeeded" });
    expect(done.status, done.text).toBe(200);
    const runs = await api.call("GET", `/jobs/${jobId}/runs`);
    const statuses = (runs.body as { items: { status: string }[] }).items.map((r) => r.status);
    expect(statuses.filter((status) => status === "succeeded")).toHaveLength(1);
  });

  it("a token two starts old whose later start delivered nothing (a park while paused) is still the previous delivery's: 409, not 401", async () => {
    const jobId = await createAsyncJob();
    const first = await deliver(jobId);
    await pauseJob(api.fixture.engine, TENANT_A, jobId);
    // Quiet past its lease: the reaper re-sends, and the worker parks the run (a start, fence 2).
    advance(LEASE_MS + 1 + REAPER_SETTLE_MS);
    expect((await reap(api.fixture.engine, { now })).resent).toBe(1);
    const delivered = target.handOffs.length;
    await processNext(jobId);
    expect(target.handOffs.length).toBe(delivered);
    await resumeJob(api.fixture.engine, TENANT_A, jobId);
    const third = await deliver(jobId);
    expect(await runOf(jobId, third.runId)).toMatchObject({ status: "running", fence: 3 });
    // The latest delivery's token works; the one before it, two starts old, is stale (409).
    expect((await callBack(first.heartbeatUrl, first.token)).status).toBe(409);
    expect((await callBack(third.heartbeatUrl, third.token)).status).toBe(200);
  });
});

describe("async mode at odd moments (an adversarial review): defects", () => {
  it("a run handed over by a version before handedOverTimeoutSeconds times out naming the timeout it was handed over with, not the job's as edited since", async () => {
    const { engine } = api.fixture;
    /** Delivers a job with a 600 s timeout, takes the timeout off the run as that version left it, and edits the job's to 60 s. */
    const handedOverByThatVersion = async () => {
      const jobId = await createAsyncJob({ timeoutSeconds: 600, retry: { maxAttempts: 1 } });
      const handOff = await deliver(jobId);
      await engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.runs,
          Key: runKeyOf(parseRunIdOrThrow(handOff.runId)),
          UpdateExpression: "REMOVE handedOverTimeoutSeconds",
        }),
      );
      const edited = await api.call("PATCH", `/jobs/${jobId}`, {
        body: { timeoutSeconds: 60 },
        headers: { "If-Match": '"1"' },
      });
      expect(edited.status, edited.text).toBe(200);
      return { jobId, handOff };
    };

    // Timed out by its target's heartbeat past timesOutAt.
    const beating = await handedOverByThatVersion();
    advance(600_000);
    const late = await callBack(beating.handOff.heartbeatUrl, beating.handOff.token);
    expect(late.status, late.text).toBe(409);
    // Soft, so that the worker's side below is checked too.
    expect.soft(await runOf(beating.jobId, beating.handOff.runId)).toMatchObject({
      status: "dead",
      error: "timed out after 600 s",
      durationMs: 600_000,
    });

    // Started again by the worker (its target quiet past a lease): the start keeps timesOutAt, and
    // writes the edited job's timeout beside it as the one that counts.
    const quiet = await handedOverByThatVersion();
    const { timesOutAt } = await runOf(quiet.jobId, quiet.handOff.runId);
    advance(LEASE_MS + 1 + REAPER_SETTLE_MS);
    // Earlier cases' runs come due again with the clock (ten minutes here alone): the delivery
    // below is what shows this run was re-sent.
    expect((await reap(engine, { now })).resent).toBeGreaterThanOrEqual(1);
    await deliver(quiet.jobId);
    expect(await getRun(engine, parseRunIdOrThrow(quiet.handOff.runId))).toMatchObject({
      fence: 2,
      timesOutAt,
      handedOverTimeoutSeconds: 600,
    });
  });

  it("a run whose worker died after the target's 202 records, when its target completes it after an edit, the version the target ran, not the edited one", async () => {
    const jobId = await createAsyncJob({ payload: { export: "v1" } });
    const handOff = await deliverWorkerDyingAfter202(jobId);
    // The target runs version 1's payload; the job is edited to version 2 meanwhile.
    const edited = await api.call("PATCH", `/jobs/${jobId}`, {
      body: { payload: { export: "v2" } },
      headers: { "If-Match": '"1"' },
    });
    expect(edited.status, edited.text).toBe(200);
    const done = await callBack(handOff.completeUrl, handOff.token, { status: "succeeded" });
    expect(done.status, done.text).toBe(200);
    expect(done.body).toMatchObject({ status: "succeeded", executedVersion: 1 });
  });
});
