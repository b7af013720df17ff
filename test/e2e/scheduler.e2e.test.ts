import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { type Api, type ApiAuth, apiClient, authModeFromEnv } from "../support/api-client.js";
import { intFromEnv } from "../support/env-knobs.js";
import { type Receiver, startReceiver, verifyDelivery } from "../support/receiver.js";
import { type SandboxProcess, spawnSandbox } from "../support/sandbox-process.js";
import { waitFor } from "../support/wait.js";

/**
 * The scheduler's promises checked from outside: HTTP only, nothing imported
 * from functions/ or shared/. By default a sandbox CLI is spawned on a free
 * port with a fresh data directory. With SCHEDULER_API_URL the same
 * assertions run against that URL, with a receiver the target can reach (SCHEDULER_E2E_RECEIVER_URL, forwarded to the local
 * receiver on SCHEDULER_E2E_RECEIVER_PORT). A deployed stack's IAM-authorized
 * API gets every request signed with SigV4 (credentials from the AWS SDK's
 * default chain, so AWS_PROFILE / AWS_REGION; tenant B is the principal of
 * the profile SCHEDULER_API_PROFILE_B). With SCHEDULER_API_KEY_A / _B set (or
 * SCHEDULER_API_AUTH=bearer) it sends those bearer keys instead, e.g. to a
 * sandbox running elsewhere. README.md, "Testing", has the details.
 */

interface Run {
  runId: string;
  jobId: string;
  scheduledFor: string;
  dueAt: string;
  attempt: number;
  status: string;
  startedAt: string | null;
  finishedAt: string | null;
  workerId: string | null;
  error: string | null;
  reason: string | null;
  trigger?: { jobId: string; runId: string; scheduledFor: string } | null;
}
interface Job {
  id: string;
  status: string;
  version: number;
  nextRunAt: string | null;
  schedule: Record<string, string>;
  dependents?: string[];
}
interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

const remote = process.env.SCHEDULER_API_URL;
const AUTH = remote
  ? authModeFromEnv(process.env, ["SCHEDULER_API_KEY_A", "SCHEDULER_API_KEY"])
  : "bearer";
const KEY_A = remote
  ? (process.env.SCHEDULER_API_KEY_A ?? process.env.SCHEDULER_API_KEY ?? "")
  : "e2e-key-a";
const KEY_B = remote ? (process.env.SCHEDULER_API_KEY_B ?? "") : "e2e-key-b";
const PROFILE_B = process.env.SCHEDULER_API_PROFILE_B;
/**
 * How long workers reuse a tenant's webhook secrets: a rotation reaches deliveries after at most
 * this. A deployed worker keeps them 30 s; the spawned sandbox is told 1 s, so the rotation test
 * waits that rather than half a minute.
 */
const SECRET_CACHE_SECONDS = remote ? 30 : 1;
const AUTH_A: ApiAuth = AUTH === "iam" ? { kind: "iam" } : { kind: "bearer", key: KEY_A };
/** Null with IAM and no second profile: the tenants test then says what is missing. */
const AUTH_B: ApiAuth | null =
  AUTH === "bearer"
    ? { kind: "bearer", key: KEY_B }
    : PROFILE_B
      ? { kind: "iam", profile: PROFILE_B }
      : null;

let sandbox: SandboxProcess | null = null;
let receiver: Receiver;
/** Tenant A's endpoint on the receiver; tenant B's is hookUrlB. Each verifies with its tenant's secret. */
let hookUrl: string;
let hookUrlB: string;
/** The tenants' webhook secrets as GET /webhook-secret returns them (B's stays empty without B). */
const secrets = { a: "", b: "" };
let baseUrl: string;
let asA: Api;
let asB: Api | null;
/** Jobs whose webhooks the receiver refuses with a 400 (dead at once). */
const refuse = new Set<string>();
/** Jobs whose first delivery gets a 503 (retried with the same Idempotency-Key). */
const flaky = new Set<string>();
/** Async (long) jobs: the receiver takes each delivery over with a 202. */
const longJobs = new Set<string>();
/** Jobs whose deliveries the receiver answers only after 20 s: runs in progress to cancel. */
const slow = new Set<string>();

beforeAll(async () => {
  receiver = await startReceiver({
    secret: (path) => (path.startsWith("/hook/b") ? secrets.b : secrets.a),
    port: intFromEnv("SCHEDULER_E2E_RECEIVER_PORT", 0, { min: 0, max: 65_535 }),
    delayMs: ({ idempotencyKey }) => (slow.has(idempotencyKey.split("@")[0] ?? "") ? 20_000 : 0),
    statusFor: ({ idempotencyKey, attempt }) => {
      const jobId = idempotencyKey.split("@")[0] ?? "";
      if (refuse.has(jobId)) return 400;
      if (flaky.has(jobId) && attempt === 1) return 503;
      if (longJobs.has(jobId)) return 202;
      return 200;
    },
  });
  const hookBase = (process.env.SCHEDULER_E2E_RECEIVER_URL ?? receiver.url).replace(/\/$/, "");
  hookUrl = `${hookBase}/a`;
  hookUrlB = `${hookBase}/b`;
  let url = remote;
  if (!url) {
    sandbox = await spawnSandbox({
      // Fresh tables and queues also at an endpoint (LocalStack), where earlier runs' stay.
      prefix: `e2e-${randomBytes(4).toString("hex")}`,
      tickSeconds: 1,
      workers: 16,
      // The deployment's default, end to end.
      shards: 8,
      env: {
        SCHEDULER_API_KEYS: `${KEY_A}=e2e-tenant-a,${KEY_B}=e2e-tenant-b`,
        LEASE_SECONDS: "6",
        LOOKAHEAD_SECONDS: "60",
        WEBHOOK_SECRET_CACHE_SECONDS: String(SECRET_CACHE_SECONDS),
      },
    });
    url = sandbox.url;
  }
  baseUrl = url;
  asA = apiClient(url, AUTH_A);
  asB = AUTH_B && apiClient(url, AUTH_B);
  secrets.a = await webhookSecretOf(asA);
  if (asB) secrets.b = await webhookSecretOf(asB);
}, 120_000);

async function webhookSecretOf(api: Api): Promise<string> {
  const response = await api<{ secret: string }>("GET", "/webhook-secret");
  if (response.status !== 200)
    throw new Error(`GET /webhook-secret: ${response.status} ${JSON.stringify(response.body)}`);
  return response.body.secret;
}

afterAll(async () => {
  await receiver?.close();
  if (sandbox) {
    // The CLI must stop on SIGINT by itself, within the shutdown grace, and exit 0.
    const code = await sandbox.stop(20_000);
    expect(code).toBe(0);
  }
}, 30_000);

const inMs = (ms: number) => new Date(Date.now() + ms).toISOString();

async function create(body: Record<string, unknown>, api = asA): Promise<Job> {
  const response = await api<Job>("POST", "/jobs", body);
  if (response.status !== 201)
    throw new Error(`create: ${response.status} ${JSON.stringify(response.body)}`);
  return response.body;
}

async function runsOf(jobId: string, api = asA): Promise<Run[]> {
  const runs: Run[] = [];
  let cursor: string | null = null;
  do {
    const query: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
    const page = await api<Page<Run>>("GET", `/jobs/${jobId}/runs?limit=100${query}`);
    expect(page.status).toBe(200);
    runs.push(...page.body.items);
    cursor = page.body.nextCursor;
  } while (cursor);
  return runs;
}

const succeeded = (runs: Run[]) => runs.filter((r) => r.status === "succeeded");
const lagMs = (run: Run) => Date.parse(run.startedAt ?? "") - Date.parse(run.scheduledFor);

async function waitForRuns(jobId: string, what: (runs: Run[]) => boolean, timeoutMs = 20_000) {
  return waitFor(
    `runs of ${jobId}`,
    async () => {
      const runs = await runsOf(jobId);
      return what(runs) ? runs : false;
    },
    timeoutMs,
    250,
  );
}

/*
 * The groups run side by side (vitest's maxConcurrency, five at a time, and their tests with
 * them): each test has jobs of its own and spends its time waiting for a due time, a lease or a
 * heartbeat, one after another 78 s of this file's 88 s; side by side the longest group (the
 * lifecycle's pause and resume, 17 s) bounds it. The secret rotation runs last, alone.
 */
describe.concurrent("schedules run on time", () => {
  it("a one-off job starts within 1 s of its runAt", async () => {
    const runAt = inMs(3000);
    const job = await create({ type: "noop", schedule: { runAt } });
    expect(job.schedule).toEqual({ runAt });
    const [run] = await waitForRuns(job.id, (runs) => succeeded(runs).length === 1);
    expect(run?.scheduledFor).toBe(runAt);
    const lag = run ? lagMs(run) : Number.NaN;
    expect(lag).toBeGreaterThanOrEqual(0);
    expect(lag).toBeLessThan(1000);
    await waitFor(
      "the job to complete",
      async () => (await asA<Job>("GET", `/jobs/${job.id}`)).body.status === "completed",
    );
  });

  it("a cron with a seconds field fires on those seconds", async () => {
    const second = (offset: number) => new Date(Date.now() + offset * 1000).getUTCSeconds();
    const seconds = [second(3), second(6)].sort((a, b) => a - b);
    const job = await create({
      type: "noop",
      schedule: { cron: `${seconds.join(",")} * * * * *`, timezone: "UTC" },
    });
    const runs = await waitForRuns(job.id, (r) => succeeded(r).length >= 2);
    await asA("POST", `/jobs/${job.id}/cancel`);
    for (const run of succeeded(runs)) {
      const at = new Date(run.scheduledFor);
      expect(seconds).toContain(at.getUTCSeconds());
      expect(at.getUTCMilliseconds()).toBe(0);
      expect(lagMs(run)).toBeLessThan(1000);
    }
  });

  it("an every schedule fires at startAt and each interval after it", async () => {
    const startAt = new Date(Math.ceil((Date.now() + 2000) / 1000) * 1000).toISOString();
    const job = await create({ type: "noop", schedule: { every: "PT2S", startAt } });
    expect(job.schedule).toEqual({ every: "PT2S", startAt });
    // Every occurrence runs or is recorded skipped, saying why; not every one runs. A noop run
    // lasts milliseconds, but on a starved machine a run starts late and is still under way when
    // the next occurrence starts, which the default overlap policy (skip) then records skipped,
    // naming that run (docs/api.md, "Creating a job"; architecture.md, Policies). So the case
    // asserts the schedule's instants, and that each of them up to the third success ended so,
    // rather than three successes in a row: at a load of 12-13 the first run started 2 s late and
    // ended 29 ms after the next occurrence started, which was recorded skipped ("expected 4000 to
    // be 2000").
    const upToThirdSuccess = (runs: Run[]) => {
      const third = succeeded(runs)
        .map((r) => Date.parse(r.scheduledFor))
        .sort((a, b) => a - b)[2];
      return third === undefined ? [] : runs.filter((r) => Date.parse(r.scheduledFor) <= third);
    };
    const ended = (run: Run) => run.status === "succeeded" || run.status === "skipped";
    const runs = await waitForRuns(job.id, (r) => {
      const due = upToThirdSuccess(r);
      return due.length > 0 && due.every(ended);
    });
    await asA("POST", `/jobs/${job.id}/cancel`);
    const occurrences = upToThirdSuccess(runs).sort(
      (a, b) => Date.parse(a.scheduledFor) - Date.parse(b.scheduledFor),
    );
    // One run for each instant from startAt on, none missing, none between.
    expect(occurrences.map((r) => Date.parse(r.scheduledFor) - Date.parse(startAt))).toEqual(
      occurrences.map((_, i) => i * 2000),
    );
    const runIds = new Set(runs.map((r) => r.runId));
    for (const run of occurrences) {
      expect(run.attempt).toBe(1);
      if (run.status === "succeeded") continue;
      const overlap = /^overlap: run (\S+)(?: \(and \d+ more\))? still running; policy skip$/.exec(
        run.reason ?? "",
      );
      expect(overlap, `${run.scheduledFor} skipped: ${run.reason}`).not.toBeNull();
      const other = overlap?.[1] ?? "";
      expect(other).not.toBe(run.runId);
      expect(runIds.has(other)).toBe(true);
    }
    // Without startAt it starts now, and the stored job says when.
    const now = await create({ type: "noop", schedule: { every: "PT1H" } });
    expect(Date.parse(now.schedule.startAt ?? "")).toBeLessThanOrEqual(Date.now());
    await asA("POST", `/jobs/${now.id}/cancel`);
  });
});

describe.concurrent("webhooks", () => {
  it("a delivery carries the payload, the occurrence key, and a signature that verifies", async () => {
    const runAt = inMs(1500);
    const payload = { invoice: 42, note: "ünïcode" };
    const job = await create({
      type: "http",
      schedule: { runAt },
      payload,
      target: { url: hookUrl },
    });
    const [run] = await waitForRuns(job.id, (r) => succeeded(r).length === 1);
    const delivery = receiver.deliveries.find((d) => d.jobId === job.id);
    expect(delivery).toBeDefined();
    if (!delivery || !run) return;
    expect(JSON.parse(delivery.body)).toEqual(payload);
    expect(delivery.idempotencyKey).toBe(`${job.id}@${runAt}`);
    expect(delivery.runId).toBe(run.runId);
    expect(delivery.attempt).toBe(1);
    expect(delivery.signatureValid).toBe(true);
    // Standard Webhooks: webhook-id is the occurrence key, verified with the tenant's secret.
    expect(delivery.webhookHeaders["webhook-id"]).toBe(delivery.idempotencyKey);
    expect(secrets.a).toMatch(/^whsec_[A-Za-z0-9+/]{32,}={0,2}$/);
    expect(verifyDelivery(secrets.a, delivery)).toBe(true);
    expect(verifyDelivery(secrets.a, { ...delivery, body: `${delivery.body} ` })).toBe(false);
    // The secret stays the same across reads.
    expect(await webhookSecretOf(asA)).toBe(secrets.a);
  });

  it("each tenant's deliveries verify with its own secret only", async () => {
    const other = asB;
    if (!other)
      throw new Error(
        "a second tenant is needed: set SCHEDULER_API_PROFILE_B to an AWS profile of another principal",
      );
    expect(secrets.b).not.toBe(secrets.a);
    const runAt = inMs(1500);
    const jobA = await create({ type: "http", schedule: { runAt }, target: { url: hookUrl } });
    const jobB = await create(
      { type: "http", schedule: { runAt }, target: { url: hookUrlB } },
      other,
    );
    await waitForRuns(jobA.id, (r) => succeeded(r).length === 1);
    await waitFor(
      "tenant B's delivery",
      async () => succeeded(await runsOf(jobB.id, other)).length === 1,
    );
    const fromA = receiver.deliveries.find((d) => d.jobId === jobA.id);
    const fromB = receiver.deliveries.find((d) => d.jobId === jobB.id);
    if (!fromA || !fromB) throw new Error("a delivery is missing");
    expect([fromA.signatureValid, fromB.signatureValid]).toEqual([true, true]);
    expect(verifyDelivery(secrets.a, fromA)).toBe(true);
    expect(verifyDelivery(secrets.b, fromB)).toBe(true);
    // Tenant A's secret cannot vouch for B's deliveries, nor B's for A's: neither can forge the other's.
    expect(verifyDelivery(secrets.a, fromB)).toBe(false);
    expect(verifyDelivery(secrets.b, fromA)).toBe(false);
  });

  it("a captured delivery replayed with a different Idempotency-Key fails verification", async () => {
    const job = await create({
      type: "http",
      schedule: { runAt: inMs(1000) },
      payload: { transfer: 100 },
      target: { url: hookUrl },
    });
    await waitForRuns(job.id, (r) => succeeded(r).length === 1);
    const captured = receiver.deliveries.find((d) => d.jobId === job.id && d.applied);
    if (!captured) throw new Error("no delivery");
    const replay = (headers: Record<string, string>) =>
      fetch(receiver.url.replace(/\/hook$/, "/hook/a"), {
        method: "POST",
        headers: { "Content-Type": "application/json", ...headers },
        body: captured.body,
      });
    const fresh = `${job.id}@${inMs(3_600_000)}`;
    // A new key with the captured signature headers: webhook-id no longer names the key applied.
    const newKey = await replay({ ...captured.webhookHeaders, "Idempotency-Key": fresh });
    // And the id changed along with it: the signature no longer covers what is sent.
    const newKeyAndId = await replay({
      ...captured.webhookHeaders,
      "webhook-id": fresh,
      "Idempotency-Key": fresh,
    });
    expect([newKey.status, newKeyAndId.status]).toEqual([401, 401]);
    expect(receiver.applied.has(fresh)).toBe(false);
    expect(
      verifyDelivery(secrets.a, {
        ...captured,
        idempotencyKey: fresh,
        webhookHeaders: { ...captured.webhookHeaders, "webhook-id": fresh },
      }),
    ).toBe(false);
    // Replayed unchanged, it is the same occurrence: verified, and not applied twice.
    const same = await replay({
      ...captured.webhookHeaders,
      "Idempotency-Key": captured.idempotencyKey,
    });
    expect(same.status).toBe(200);
    expect(receiver.applied.get(captured.idempotencyKey)).toBe(1);
  });

  it("a 503 is retried with the same Idempotency-Key; a 400 is dead at once", async () => {
    const retry = { maxAttempts: 3, initialDelaySeconds: 1, maxDelaySeconds: 1 };
    const flakyJob = await create({
      type: "http",
      schedule: { runAt: inMs(500) },
      target: { url: hookUrl },
      retry,
    });
    flaky.add(flakyJob.id);
    const refusedJob = await create({
      type: "http",
      schedule: { runAt: inMs(500) },
      target: { url: hookUrl },
      retry,
    });
    refuse.add(refusedJob.id);
    const runs = await waitForRuns(flakyJob.id, (r) => succeeded(r).length === 1);
    expect(runs.map((r) => [r.attempt, r.status]).sort()).toEqual([
      [1, "failed"],
      [2, "succeeded"],
    ]);
    const keys = receiver.deliveries
      .filter((d) => d.jobId === flakyJob.id)
      .map((d) => d.idempotencyKey);
    expect(keys).toHaveLength(2);
    expect(new Set(keys).size).toBe(1);
    const refused = await waitForRuns(refusedJob.id, (r) => r.some((x) => x.status === "dead"));
    expect(refused).toHaveLength(1);
    expect(refused[0]?.attempt).toBe(1);
    expect(refused[0]?.error).toMatch(/400/);
  });
});

describe.concurrent("long jobs", () => {
  it("an async target takes its run over with 202, heartbeats it past its lease and completes it", async () => {
    const job = await create({
      type: "http",
      schedule: { runAt: inMs(500) },
      target: { url: hookUrl, mode: "async" },
      timeoutSeconds: 3600,
    });
    longJobs.add(job.id);
    const delivery = await waitFor(
      "the async delivery",
      async () => receiver.deliveries.find((d) => d.jobId === job.id) ?? false,
      20_000,
      100,
    );
    const handOff = delivery.handOff;
    if (handOff === undefined) throw new Error("the delivery carried no run token");
    expect(delivery.status).toBe(202);
    expect(handOff.heartbeatUrl).toBe(
      `${baseUrl.replace(/\/$/, "")}/runs/${delivery.runId}/heartbeat`,
    );
    // The run token is the only credential: no tenant key, no signature.
    const post = (url: string, body?: unknown) =>
      fetch(url, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${handOff.token}`,
          ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    // Heartbeats over more than two of the sandbox's 6 s leases keep the run from being started again.
    for (let beat = 0; beat < 7; beat++) {
      const reply = await post(handOff.heartbeatUrl);
      expect(reply.status, await reply.clone().text()).toBe(200);
      await sleep(2_000);
    }
    const done = await post(handOff.completeUrl, { status: "succeeded" });
    expect(done.status, await done.clone().text()).toBe(200);
    const runs = await runsOf(job.id);
    expect(runs.map((r) => [r.runId, r.status])).toEqual([[delivery.runId, "succeeded"]]);
    expect(receiver.deliveries.filter((d) => d.jobId === job.id)).toHaveLength(1);
    const stale = await post(handOff.heartbeatUrl);
    expect(stale.status).toBe(409);
    expect(((await stale.json()) as { error: { code: string } }).error.code).toBe(
      "stale_run_token",
    );
  });
});

describe.concurrent("failures, dead letters and replay", () => {
  it("retries to the dead letter list, and a replay runs the occurrence again", async () => {
    const job = await create({
      type: "fail",
      payload: { times: 2 },
      schedule: { runAt: inMs(500) },
      retry: { maxAttempts: 2, initialDelaySeconds: 1, maxDelaySeconds: 1 },
    });
    const runs = await waitForRuns(job.id, (r) => r.some((x) => x.status === "dead"));
    expect(runs.map((r) => [r.attempt, r.status]).sort()).toEqual([
      [1, "failed"],
      [2, "dead"],
    ]);
    const dead = runs.find((r) => r.status === "dead");
    if (!dead) throw new Error("no dead run");
    const letters = await asA<Page<Run>>("GET", "/dead-letters?limit=100");
    expect(letters.body.items.map((r) => r.runId)).toContain(dead.runId);

    const replay = await asA<Run>("POST", `/dead-letters/${dead.runId}/replay`);
    expect(replay.status).toBe(202);
    expect(replay.headers.get("location")).toBe(`/jobs/${job.id}/runs/${replay.body.runId}`);
    expect(replay.body.attempt).toBe(3);
    expect(replay.body.scheduledFor).toBe(dead.scheduledFor);
    const after = await waitForRuns(job.id, (r) => succeeded(r).length === 1);
    expect(succeeded(after)[0]?.attempt).toBe(3);
    expect((await asA("POST", `/dead-letters/${dead.runId}/replay`)).status).toBe(409);
    const lettersAfter = await asA<Page<Run>>("GET", "/dead-letters?limit=100");
    expect(lettersAfter.body.items.map((r) => r.runId)).not.toContain(dead.runId);
  });
});

describe.concurrent("dependencies", () => {
  it("a chain A → B → C over HTTP: each success runs the next once, and the chain reads from either end", async () => {
    // A run reads its job's dependents when it starts (api.md, Dependencies), so A runs only once
    // B and C are linked: a trigger sent after their creates answered. A run of A due at a time
    // raced the creates, and under load lost: B's create answered after A's run had started, and
    // neither B nor C ever ran.
    const a = await create({ type: "noop", schedule: { runAt: inMs(3_600_000) } });
    const b = await create({ type: "noop", schedule: { after: { jobs: [a.id] } } });
    const c = await create({
      type: "noop",
      schedule: { after: { jobs: [b.id], on: "completion" } },
    });
    expect((await asA("POST", `/jobs/${a.id}/trigger`)).status).toBe(202);
    // No timer on the way from the trigger to C: each ending fans out at once to a run sent due
    // now, which a waiting receive takes. Three runs and two fan-outs took 11 s at most at a load
    // of 11-14 (2 cores), well inside the 20 s.
    const cRuns = await waitForRuns(c.id, (r) => succeeded(r).length === 1);
    const [aRun] = await runsOf(a.id);
    const bRuns = await runsOf(b.id);
    expect(bRuns).toHaveLength(1);
    expect(bRuns[0]?.trigger).toEqual({
      jobId: a.id,
      runId: aRun?.runId,
      scheduledFor: aRun?.scheduledFor,
    });
    expect(cRuns).toHaveLength(1);
    expect(cRuns[0]?.trigger?.runId).toBe(bRuns[0]?.runId);
    expect((await asA<Job>("GET", `/jobs/${a.id}`)).body.dependents).toEqual([b.id]);
    expect((await asA<Job>("GET", `/jobs/${b.id}`)).body.dependents).toEqual([c.id]);
    // Its hour-off run would run the chain again, against a deployed stack.
    await asA("POST", `/jobs/${a.id}/cancel`);
  });
});

describe.concurrent("lifecycle", () => {
  it("pause stops runs, resume brings them back, cancel ends the job, trigger runs it once now", async () => {
    const job = await create({
      type: "noop",
      schedule: { every: "PT1S" },
      overlapPolicy: "allow",
      maxConcurrent: 5,
    });
    await waitForRuns(job.id, (r) => succeeded(r).length >= 2);
    const paused = await asA<Job>("POST", `/jobs/${job.id}/pause`);
    expect(paused.status).toBe(200);
    expect(paused.body.status).toBe("paused");
    expect((await asA<Job>("POST", `/jobs/${job.id}/pause`)).status).toBe(200);
    const pausedAt = Date.now();
    await sleep(3000);
    // Runs claimed before the pause may still be in the queue; they start as skipped, never succeed.
    const whilePaused = (await runsOf(job.id)).filter(
      (r) => Date.parse(r.scheduledFor) > pausedAt + 1000 && r.status === "succeeded",
    );
    expect(whilePaused).toEqual([]);

    const resumed = await asA<Job>("POST", `/jobs/${job.id}/resume`);
    expect(resumed.body.status).toBe("active");
    const resumedAt = Date.now();
    await waitForRuns(job.id, (r) =>
      succeeded(r).some((x) => Date.parse(x.scheduledFor) > resumedAt),
    );

    const cancelled = await asA<Job>("POST", `/jobs/${job.id}/cancel`);
    expect(cancelled.body.status).toBe("cancelled");
    expect((await asA("POST", `/jobs/${job.id}/resume`)).status).toBe(409);
    const cancelledAt = Date.now();
    await sleep(2500);
    const afterCancel = (await runsOf(job.id)).filter(
      (r) => Date.parse(r.scheduledFor) > cancelledAt + 1000 && r.status === "succeeded",
    );
    expect(afterCancel).toEqual([]);

    const later = await create({ type: "noop", schedule: { runAt: inMs(3_600_000) } });
    const trigger = await asA<Run>("POST", `/jobs/${later.id}/trigger`);
    expect(trigger.status).toBe(202);
    expect(trigger.headers.get("location")).toBe(`/jobs/${later.id}/runs/${trigger.body.runId}`);
    const [run] = await waitForRuns(later.id, (r) => succeeded(r).length === 1);
    expect(run?.runId).toBe(trigger.body.runId);
    const stillScheduled = await asA<Job>("GET", `/jobs/${later.id}`);
    expect(stillScheduled.body.status).toBe("active");
    expect(stillScheduled.body.nextRunAt).toBe(later.schedule.runAt);
    await asA("POST", `/jobs/${later.id}/cancel`);
  });

  it("a running webhook is cancelled within a heartbeat: cancelled by api, no retry; a repeat answers it again", async () => {
    const job = await create({
      type: "http",
      schedule: { runAt: inMs(3_000) },
      target: { url: hookUrl, timeoutSeconds: 60 },
      retry: { maxAttempts: 3, initialDelaySeconds: 1, maxDelaySeconds: 1 },
    });
    slow.add(job.id);
    const [running] = await waitForRuns(job.id, (r) => r.some((x) => x.status === "running"));
    if (running === undefined) throw new Error("no run");
    const asked = await asA<Run & { cancelRequestedAt: string | null; cancelledBy: string | null }>(
      "POST",
      `/jobs/${job.id}/runs/${running.runId}/cancel`,
    );
    expect(asked.status).toBe(200);
    expect(asked.body).toMatchObject({ status: "running", cancelledBy: "api" });
    const askedAt = Date.now();
    // The spawned sandbox's lease is 6 s: a heartbeat every 2 s. A remote scheduler's lease is its
    // own (60 s by default, a stack's or `npm start`'s), and a heartbeat beats every third of it,
    // 10 s at the most: the cancel is seen within that, with time for the polls.
    const withinMs = remote ? 12_000 : 6_000;
    const [ended] = await waitForRuns(
      job.id,
      (r) => r.every((x) => x.status !== "running"),
      withinMs + 4_000,
    );
    expect(Date.now() - askedAt).toBeLessThan(withinMs);
    expect(ended).toMatchObject({ status: "cancelled", attempt: 1, reason: "run cancelled" });
    await sleep(2_000);
    expect((await runsOf(job.id)).map((r) => r.status)).toEqual(["cancelled"]);
    // A retry of the cancel answers the run as it ended, not a 409.
    const again = await asA<Run>("POST", `/jobs/${job.id}/runs/${running.runId}/cancel`);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(ended);
  });

  it("edits need the current version in If-Match and take effect", async () => {
    const job = await create({ type: "noop", schedule: { runAt: inMs(3_600_000) } });
    const got = await asA<Job>("GET", `/jobs/${job.id}`);
    expect(got.headers.get("etag")).toBe('"1"');
    const runAt = inMs(2000);
    const edit = { schedule: { runAt } };
    expect((await asA("PATCH", `/jobs/${job.id}`, edit)).status).toBe(428);
    const renamed = await asA<Job>(
      "PATCH",
      `/jobs/${job.id}`,
      { name: "renamed" },
      { "If-Match": '"1"' },
    );
    expect(renamed.status).toBe(200);
    expect(renamed.headers.get("etag")).toBe('"2"');
    const stale = await asA("PATCH", `/jobs/${job.id}`, edit, { "If-Match": '"1"' });
    expect(stale.status).toBe(412);
    expect(stale.headers.get("etag")).toBe('"2"');
    const edited = await asA<Job>("PATCH", `/jobs/${job.id}`, edit, { "If-Match": 'W/"2"' });
    expect(edited.status).toBe(200);
    expect(edited.body.version).toBe(3);
    // Due inside the lookahead, the edit claims the occurrence at once, so nextRunAt has moved past it.
    expect(edited.body.schedule).toEqual({ runAt });
    const [run] = await waitForRuns(job.id, (r) => succeeded(r).length === 1);
    expect(run?.scheduledFor).toBe(runAt);
    expect(lagMs(run as Run)).toBeLessThan(1000);
  });
});

describe.concurrent("history", () => {
  it("runs and jobs page with cursors, newest first, nothing repeated or missing", async () => {
    const job = await create({ type: "noop", schedule: { runAt: inMs(3_600_000) } });
    const triggered: string[] = [];
    for (let i = 0; i < 7; i++) {
      triggered.push((await asA<Run>("POST", `/jobs/${job.id}/trigger`)).body.runId);
      await sleep(5);
    }
    await waitForRuns(job.id, (r) => succeeded(r).length === 7);
    const seen: Run[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
      const page = await asA<Page<Run>>("GET", `/jobs/${job.id}/runs?limit=3${query}`);
      expect(page.body.items.length).toBeLessThanOrEqual(3);
      seen.push(...page.body.items);
      cursor = page.body.nextCursor;
      pages++;
    } while (cursor);
    expect(pages).toBeGreaterThanOrEqual(3);
    expect(seen.map((r) => r.runId).sort()).toEqual([...triggered].sort());
    const times = seen.map((r) => r.scheduledFor);
    expect(times).toEqual([...times].sort().reverse());
    for (const run of seen) {
      expect(run.startedAt).not.toBeNull();
      expect(run.finishedAt).not.toBeNull();
      expect(run.workerId).not.toBeNull();
    }
    const one = await asA<Run>("GET", `/jobs/${job.id}/runs/${seen[0]?.runId}`);
    expect(one.body).toEqual(seen[0]);

    const ids: string[] = [];
    cursor = null;
    do {
      const query: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
      const page = await asA<Page<Job>>("GET", `/jobs?limit=4${query}`);
      ids.push(...page.body.items.map((j) => j.id));
      cursor = page.body.nextCursor;
    } while (cursor);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toContain(job.id);
    await asA("POST", `/jobs/${job.id}/cancel`);
  });
});

describe.concurrent("previews", () => {
  it("a Berlin cron across the 2027 spring-forward and fall-back transitions", async () => {
    const spring = await asA<{ timezone: string; occurrences: { utc: string; local: string }[] }>(
      "POST",
      "/schedules/preview",
      { schedule: { cron: "30 2 27-29 3 *", timezone: "Europe/Berlin" }, count: 3 },
    );
    expect(spring.status).toBe(200);
    expect(spring.body.timezone).toBe("Europe/Berlin");
    // 02:30 does not exist on 2027-03-28: it runs once, at the same offset into the new hour.
    expect(spring.body.occurrences).toEqual([
      { utc: "2027-03-27T01:30:00.000Z", local: "2027-03-27T02:30:00.000+01:00" },
      { utc: "2027-03-28T01:30:00.000Z", local: "2027-03-28T03:30:00.000+02:00" },
      { utc: "2027-03-29T00:30:00.000Z", local: "2027-03-29T02:30:00.000+02:00" },
    ]);
    // 02:30 happens twice on 2027-10-31: it runs once, the first time.
    const fall = await asA<{ occurrences: { utc: string; local: string }[] }>(
      "POST",
      "/schedules/preview",
      { schedule: { cron: "30 2 31 10 *", timezone: "Europe/Berlin" }, count: 1 },
    );
    expect(fall.body.occurrences).toEqual([
      { utc: "2027-10-31T00:30:00.000Z", local: "2027-10-31T02:30:00.000+02:00" },
    ]);
    const invalid = await asA<{ error: { code: string; field: string } }>(
      "POST",
      "/schedules/preview",
      {
        schedule: { cron: "0 9 * * *", timezone: "CET" },
      },
    );
    expect(invalid.status).toBe(400);
    expect(invalid.body.error.field).toBe("schedule.timezone");
  });
});

describe.concurrent("tenants", () => {
  it("another tenant sees none of it: 404 everywhere, never 403", async () => {
    const other = asB;
    if (!other)
      throw new Error(
        "a second tenant is needed: set SCHEDULER_API_PROFILE_B to an AWS profile of another principal",
      );
    const job = await create({
      type: "fail",
      payload: { retryable: false },
      schedule: { runAt: inMs(300) },
      retry: { maxAttempts: 1 },
    });
    const [dead] = await waitForRuns(job.id, (r) => r.some((x) => x.status === "dead"));
    if (!dead) throw new Error("no dead run");
    const asOther = [
      ["GET", `/jobs/${job.id}`],
      ["GET", `/jobs/${job.id}/runs`],
      ["GET", `/jobs/${job.id}/runs/${dead.runId}`],
      ["GET", `/jobs/${job.id}/preview`],
      ["POST", `/jobs/${job.id}/pause`],
      ["POST", `/jobs/${job.id}/trigger`],
      ["POST", `/jobs/${job.id}/cancel`],
      ["POST", `/dead-letters/${dead.runId}/replay`],
    ] as const;
    for (const [method, path] of asOther)
      expect([method, path, (await other(method, path)).status]).toEqual([method, path, 404]);
    expect(
      (await other("PATCH", `/jobs/${job.id}`, { name: "x" }, { "If-Match": '"1"' })).status,
    ).toBe(404);
    const listed = await other<Page<Job>>("GET", "/jobs?limit=100");
    expect(listed.body.items.map((j) => j.id)).not.toContain(job.id);
    const letters = await other<Page<Run>>("GET", "/dead-letters?limit=100");
    expect(letters.body.items.map((r) => r.runId)).not.toContain(dead.runId);
    // A's job is untouched.
    const mine = await asA<Job>("GET", `/jobs/${job.id}`);
    expect(mine.body.version).toBe(1);
    expect(
      (await asA<Page<Run>>("GET", "/dead-letters?limit=100")).body.items.map((r) => r.runId),
    ).toContain(dead.runId);
    if (AUTH === "iam") {
      // API Gateway refuses an unsigned request before the API function sees it.
      const unsigned = await fetch(`${baseUrl.replace(/\/$/, "")}/jobs`);
      await unsigned.text();
      expect([401, 403]).toContain(unsigned.status);
    } else {
      expect(
        (await apiClient(baseUrl, "no-such-key")("GET", "/jobs").catch(() => ({ status: 401 })))
          .status,
      ).toBe(401);
    }
  });
});

/**
 * After every other test, alone: once the rotation is asked for, a worker that cached tenant A's
 * secrets signs with the replaced one alone for up to SECRET_CACHE_SECONDS, which the receiver,
 * moved to the new secret at once, refuses with a 401; another test's delivery to A in that
 * window would be refused and retried.
 */
describe("webhook secret rotation", () => {
  it("after a rotation deliveries verify with the new secret and, for a day, with the replaced one", async () => {
    const before = secrets.a;
    const rotated = await asA<{ secret: string }>("POST", "/webhook-secret/rotate");
    expect(rotated.status).toBe(200);
    const after = rotated.body.secret;
    expect(after).toMatch(/^whsec_/);
    expect(after).not.toBe(before);
    expect(await webhookSecretOf(asA)).toBe(after);
    // Workers cache a tenant's secrets: a delivery 2 s past that after the rotation carries both.
    const runAt = inMs(SECRET_CACHE_SECONDS * 1000 + 2_000);
    const job = await create({ type: "http", schedule: { runAt }, target: { url: hookUrl } });
    // The receiver moves to the new secret at once; deliveries it cannot verify yet get a 401.
    secrets.a = after;
    await waitForRuns(job.id, (r) => succeeded(r).length === 1, 60_000);
    const delivery = receiver.deliveries.find((d) => d.jobId === job.id);
    if (!delivery) throw new Error("no delivery");
    expect(delivery.webhookHeaders["webhook-signature"].split(" ")).toHaveLength(2);
    expect(verifyDelivery(after, delivery)).toBe(true);
    expect(verifyDelivery(before, delivery)).toBe(true);
    if (asB) {
      expect(secrets.b).not.toBe(after);
      expect(verifyDelivery(secrets.b, delivery)).toBe(false);
    }
  }, 90_000);
});
