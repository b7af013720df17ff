import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stackResourcePlan } from "../../infra/sandbox/plan-cache.js";
import type { ResourcePlan } from "../../infra/sandbox/resources.js";
import { type Sandbox, startSandbox } from "../../infra/sandbox/sandbox.js";
import { createApiApp } from "../../shared/api/app.js";
import { sleep } from "../../shared/clock.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import type { HandlerRegistry, JobHandler } from "../../shared/execution/job-contract.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import { listRuns } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import type { Observability } from "../../shared/observability.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import { intFromEnv } from "../support/env-knobs.js";
import { type Receiver, startReceiver } from "../support/receiver.js";

/**
 * Proof under fire. Several hundred webhook occurrences (one-off, per-second
 * and per-minute cron, every) run against the sandbox while worker loops are
 * killed mid-run, dispatchers die between their claim transaction and their
 * SendMessage, SQS sends are duplicated, and the whole sandbox restarts once.
 * Afterwards every occurrence has exactly one SUCCEEDED run, the receiver
 * applied it exactly once, nothing is stuck, and the history is whole.
 *
 * `npm test` runs the short version (CHAOS_WINDOW_SECONDS unset: ~120
 * occurrences over 20 s); `npm run test:chaos` sets CHAOS_WINDOW_SECONDS=100
 * for 500+ occurrences.
 */
const WINDOW_S = intFromEnv("CHAOS_WINDOW_SECONDS", 20);
const LONG = WINDOW_S >= 60;
const KEY = "chaos-key";
const TENANT = "chaos-tenant";
const ENV = {
  SCHEDULER_API_KEYS: `${KEY}=${TENANT}`,
  // A killed run's lease lapses (and its message reappears) in 6 s.
  LEASE_SECONDS: "6",
  LOOKAHEAD_SECONDS: "60",
  // Chaos is about never losing or doubling a run; a restart's late starts must not count as misfires.
  MISFIRE_GRACE_SECONDS: "600",
};

const quiet: Observability = {
  log: {
    debug: () => undefined,
    info: () => undefined,
    warn: () => undefined,
    error: () => undefined,
  },
  metrics: { add: () => undefined },
};

type Send = (...args: unknown[]) => Promise<unknown>;

/** A client whose every `send` passes through `intercept`: how a test kills a process's I/O. */
function intercepted<T extends object>(
  client: T,
  intercept: (commandName: string, forward: () => Promise<unknown>) => Promise<unknown>,
): T {
  const original = (client as unknown as { send: Send }).send.bind(client);
  const wrapped = Object.create(client) as T;
  Object.defineProperty(wrapped, "send", {
    value: (...args: unknown[]) => {
      const command = args[0] as { constructor: { name: string } };
      return intercept(command.constructor.name, () => original(...args));
    },
  });
  return wrapped;
}

/** Two kills, the restart and one more lost start stay below the redrive's maxReceiveCount (5): see where victims are chosen. */
const MAX_KILLS_PER_RUN = 2;

const figures = {
  workerKills: 0,
  dispatcherKills: 0,
  writerKills: 0,
  duplicateMessages: 0,
  restarts: 0,
};

/**
 * A worker loop that can be killed: from that moment every DynamoDB and SQS
 * call it makes fails, as if the process had died. A run it had started
 * stays RUNNING with a lease nobody extends, and its message stays invisible
 * until that lease's visibility runs out.
 */
class KillableWorker {
  private dead = false;
  /** The runs its handlers are running now. */
  readonly running = new Set<string>();
  private readonly stopping = new AbortController();
  readonly done: Promise<void>;

  constructor(base: Engine, handlers: HandlerRegistry, id: string) {
    const refuse = (_: string, forward: () => Promise<unknown>) =>
      this.dead ? Promise.reject(new Error("killed")) : forward();
    const engine: Engine = {
      ...base,
      doc: intercepted(base.doc, refuse),
      sqs: intercepted(base.sqs, refuse),
      obs: quiet,
    };
    const counted = new Map<string, JobHandler>(
      [...handlers].map(([type, handler]) => [
        type,
        async (ctx) => {
          this.running.add(ctx.runId);
          try {
            return await handler(ctx);
          } finally {
            this.running.delete(ctx.runId);
          }
        },
      ]),
    );
    this.done = runWorkerLoop(
      { engine, handlers: counted, workerId: id },
      { concurrency: 4, signal: this.stopping.signal },
    );
  }

  get busy(): boolean {
    return this.running.size > 0 && !this.dead;
  }

  kill(): void {
    this.dead = true;
    this.stopping.abort();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.done;
  }
}

/** One tick driver for the sandbox (its own tick is parked): every shard, then the reaper, each second. */
async function driveTicks(engine: Engine, signal: AbortSignal): Promise<void> {
  let lastMinute = new Date().toISOString().slice(0, 16);
  while (!signal.aborted) {
    const minute = new Date().toISOString().slice(0, 16);
    if (minute !== lastMinute) {
      // The first pass of a new minute is the one that claims the minute entering the lookahead:
      // run it on a dispatcher that dies the moment it tries to send what it claimed.
      lastMinute = minute;
      await Promise.all(
        Array.from({ length: engine.settings.maxShardCount }, (_, shard) =>
          dyingDispatcherPass(engine, shard),
        ),
      );
    }
    for (let shard = 0; shard < engine.settings.maxShardCount; shard++) {
      await dispatchShard(engine, shard, "chaos-tick").catch(() => undefined);
    }
    await reap(engine).catch(() => undefined);
    await sleep(1000, signal);
  }
}

async function dyingDispatcherPass(base: Engine, shard: number): Promise<void> {
  let dead = false;
  const die = (name: string, forward: () => Promise<unknown>) => {
    if (name === "SendMessageBatchCommand") dead = true;
    return dead ? Promise.reject(new Error("dispatcher died")) : forward();
  };
  const engine: Engine = {
    ...base,
    doc: intercepted(base.doc, die),
    sqs: intercepted(base.sqs, die),
    obs: quiet,
  };
  await dispatchShard(engine, shard, `dying-dispatcher-${shard}`).catch(() => undefined);
  if (dead) figures.dispatcherKills++;
}

/** At-least-once delivery made visible: some SendMessageBatch calls are sent twice. */
function duplicateSomeSends(engine: Engine, probability: number): void {
  engine.sqs.middlewareStack.add(
    (next, context) => async (args) => {
      const result = await next(args);
      if (context.commandName === "SendMessageBatchCommand" && Math.random() < probability) {
        await next(args);
        const entries = (args.input as { Entries?: unknown[] }).Entries ?? [];
        figures.duplicateMessages += entries.length;
      }
      return result;
    },
    { step: "initialize", name: "chaosDuplicateSends" },
  );
}

interface Expected {
  jobId: string;
  kind: string;
  occurrences: string[];
  recurring: boolean;
}

// Map.groupBy arrived in Node 21; this suite runs on Node 20.
function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const list = groups.get(key(item)) ?? [];
    list.push(item);
    groups.set(key(item), list);
  }
  return groups;
}

async function allRuns(engine: Engine, jobId: string): Promise<Run[]> {
  const runs: Run[] = [];
  let cursor: string | undefined;
  do {
    const page = await listRuns(engine, jobId, { limit: 200, ...(cursor ? { cursor } : {}) });
    runs.push(...page.items);
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  return runs;
}

describe("chaos", () => {
  let plan: ResourcePlan;
  let dataDir: string;
  let sandbox: Sandbox | null = null;
  let receiver: Receiver;
  let tenantSecret = "";
  const log: string[] = [];

  beforeAll(async () => {
    plan = await stackResourcePlan();
    dataDir = await mkdtemp(join(tmpdir(), "scheduler-chaos-"));
    // Answers take a while, so that runs are in progress when a worker is killed.
    // The tenant's secret is known once the sandbox has started (GET /webhook-secret).
    receiver = await startReceiver({
      secret: () => tenantSecret,
      delayMs: () => 30 + Math.random() * 250,
    });
  }, 60_000);
  afterAll(async () => {
    await sandbox?.stop();
    await receiver?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it(
    "every occurrence succeeds exactly once through kills, duplicates and a restart",
    async () => {
      const start = () =>
        startSandbox({
          port: 0,
          dataDir,
          // None: the test drives the ticks so that some of its dispatchers can die.
          tickSeconds: null,
          // One slot of its own: most runs go to the killable workers, so there are runs to kill.
          workers: 1,
          env: ENV,
          plan,
          print: (line) => log.push(line),
        });
      sandbox = await start();
      duplicateSomeSends(sandbox.engine, 0.2);
      const secretResponse = await fetch(`${sandbox.url}/webhook-secret`, {
        headers: { Authorization: `Bearer ${KEY}` },
      });
      tenantSecret = ((await secretResponse.json()) as { secret: string }).secret;

      let workers: KillableWorker[] = [];
      let generation = 0;
      const spawnWorker = (engine: Engine) =>
        new KillableWorker(
          engine,
          builtInHandlers(
            { signingSecrets: cachedSigningSecrets(engine), allowPrivateTargets: true },
            () => new Date(),
          ),
          `chaos-worker-${generation}-${workers.length}`,
        );
      let ticks = new AbortController();
      let ticking: Promise<void> = Promise.resolve();
      const startChaos = (engine: Engine) => {
        generation++;
        workers = [spawnWorker(engine), spawnWorker(engine)];
        ticks = new AbortController();
        ticking = driveTicks(engine, ticks.signal);
      };

      // The workload: all of it due inside [windowStart, windowEnd], and created before the window
      // opens.
      const expected: Expected[] = [];
      const target = { url: receiver.url };
      const post = async (body: Record<string, unknown>) => {
        const url = sandbox?.url ?? "";
        const response = await fetch(`${url}/jobs`, {
          method: "POST",
          headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
          body: JSON.stringify({ type: "http", target, ...body }),
        });
        const json = (await response.json()) as { id: string; nextRunAt: string | null };
        if (response.status !== 201) throw new Error(`create: ${JSON.stringify(json)}`);
        return json;
      };
      const recurring = { overlapPolicy: "allow", maxConcurrent: 100 };
      // The per-second jobs come first, before the window is placed: each create claims the job's
      // next minutes, one PutItem a run (450 or so), which DynamoDB Local on a loaded machine takes
      // seconds over. Created before the window opens, every second of it is an occurrence, however
      // long that took.
      const perSecondJobs = LONG ? 4 : 3;
      const perSecondIds = await Promise.all(
        Array.from({ length: perSecondJobs }, async () => {
          const job = await post({
            schedule: { cron: "* * * * * *", timezone: "UTC" },
            ...recurring,
          });
          return job.id;
        }),
      );
      const windowStart = Math.ceil((Date.now() + (LONG ? 15_000 : 10_000)) / 1000) * 1000;
      const windowEnd = windowStart + WINDOW_S * 1000;
      const series = (first: string, stepMs: number) => {
        const out: string[] = [];
        for (let t = Date.parse(first); t <= windowEnd; t += stepMs)
          out.push(new Date(t).toISOString());
        return out;
      };
      for (const jobId of perSecondIds)
        expected.push({
          jobId,
          kind: "cron per second",
          occurrences: series(new Date(windowStart).toISOString(), 1000),
          recurring: true,
        });
      const everyJobs = 2;
      const perMinuteJobs = LONG ? 20 : 10;
      const oneOffs = LONG ? 100 : 30;
      const dispatcherOneOffs = LONG ? 30 : 15;
      const creates: Promise<void>[] = [];
      for (let i = 0; i < everyJobs; i++)
        creates.push(
          (async () => {
            const startAt = new Date(windowStart + i * 1000).toISOString();
            const job = await post({ schedule: { every: "PT2S", startAt }, ...recurring });
            expected.push({
              jobId: job.id,
              kind: "every",
              occurrences: series(startAt, 2000),
              recurring: true,
            });
          })(),
        );
      for (let i = 0; i < perMinuteJobs; i++)
        creates.push(
          (async () => {
            const offsetS = Math.floor(((i + 0.5) * Math.min(WINDOW_S, 59)) / perMinuteJobs);
            const at = new Date(windowStart + offsetS * 1000);
            const cron = `${at.getUTCSeconds()} * * * * *`;
            const job = await post({ schedule: { cron, timezone: "UTC" }, ...recurring });
            expected.push({
              jobId: job.id,
              kind: "cron per minute",
              occurrences: series(at.toISOString(), 60_000),
              recurring: true,
            });
          })(),
        );
      // A writer (the API's fast path) that dies between its claim transaction and SendMessage.
      const dyingApi = createApiApp({
        engine: {
          ...sandbox.engine,
          sqs: intercepted(sandbox.engine.sqs, (name, forward) =>
            name === "SendMessageBatchCommand"
              ? Promise.reject(new Error("writer died"))
              : forward(),
          ),
          obs: quiet,
        },
        jobTypes: jobTypeCatalog({ demoTypes: true }),
        authenticate: () => TENANT,
      });
      for (let i = 0; i < oneOffs; i++)
        creates.push(
          (async () => {
            const runAt = new Date(
              windowStart + Math.floor(Math.random() * WINDOW_S * 1000),
            ).toISOString();
            const body = { type: "http", target, schedule: { runAt } };
            let id: string;
            if (i % 5 === 0) {
              const response = await dyingApi.request("/jobs", {
                method: "POST",
                headers: { "Content-Type": "application/json" },
                body: JSON.stringify(body),
              });
              id = ((await response.json()) as { id: string }).id;
              figures.writerKills++;
            } else {
              id = (await post(body)).id;
            }
            expected.push({ jobId: id, kind: "one-off", occurrences: [runAt], recurring: false });
          })(),
        );
      // One-offs whose claim is left to the dispatcher: written by a writer whose clock runs ten
      // minutes behind, so that its fast path sees them as far off and only files the due entries.
      const behind = createApiApp({
        engine: { ...sandbox.engine, clock: () => new Date(Date.now() - 600_000), obs: quiet },
        jobTypes: jobTypeCatalog({ demoTypes: true }),
        authenticate: () => TENANT,
      });
      for (let i = 0; i < dispatcherOneOffs; i++)
        creates.push(
          (async () => {
            const runAt = new Date(
              windowStart + Math.floor(Math.random() * WINDOW_S * 1000),
            ).toISOString();
            const response = await behind.request("/jobs", {
              method: "POST",
              headers: { "Content-Type": "application/json" },
              body: JSON.stringify({ type: "http", target, schedule: { runAt } }),
            });
            const { id } = (await response.json()) as { id: string };
            expected.push({
              jobId: id,
              kind: "one-off via dispatcher",
              occurrences: [runAt],
              recurring: false,
            });
          })(),
        );
      await Promise.all(creates);
      // Every shard's first pass claims those and dies before its SendMessage; the reaper must find them.
      const first = sandbox.engine;
      await Promise.all(
        Array.from({ length: first.settings.maxShardCount }, (_, shard) =>
          dyingDispatcherPass(first, shard),
        ),
      );
      startChaos(sandbox.engine);
      const createdBy = windowStart - Date.now();
      expect(createdBy, "the workload was created before its window opened").toBeGreaterThan(0);
      const occurrences = expected.reduce((n, e) => n + e.occurrences.length, 0);

      // Chaos while the window runs: kill a busy worker every second or so, restart everything once.
      // A run whose worker dies maxReceiveCount (5) times is a poison run by contract: the redrive
      // DLQ ends it DEAD. So no run is killed more than MAX_KILLS_PER_RUN times, or the test would
      // demand success of a run the contract says dies. Unbounded, it now and then did: runs with
      // 6 and 7 starts turned up on main, and in two of five runs of the claim-reach branch one
      // run, due within seconds of the restart, was killed five times and went DEAD.
      const killsOf = new Map<string, number>();
      const killable = (w: KillableWorker) =>
        w.busy && [...w.running].every((runId) => (killsOf.get(runId) ?? 0) < MAX_KILLS_PER_RUN);
      const restartAt = windowStart + WINDOW_S * 400;
      let restarted = false;
      while (Date.now() < windowEnd) {
        await sleep(1000);
        if (!restarted && Date.now() >= restartAt) {
          restarted = true;
          ticks.abort();
          await ticking;
          await Promise.all(workers.map((w) => w.stop()));
          await sandbox.stop();
          sandbox = await start();
          duplicateSomeSends(sandbox.engine, 0.2);
          figures.restarts++;
          startChaos(sandbox.engine);
          continue;
        }
        // Catch a worker mid-run: sampling one instant misses them on a slow or idle machine.
        let victim = workers.find(killable);
        for (const until = Date.now() + 4000; !victim && Date.now() < until; ) {
          await sleep(20);
          victim = workers.find(killable);
        }
        if (victim) {
          for (const runId of victim.running) killsOf.set(runId, (killsOf.get(runId) ?? 0) + 1);
          victim.kill();
          figures.workerKills++;
          workers = [...workers.filter((w) => w !== victim), spawnWorker(sandbox.engine)];
        }
      }

      // Drain: a killed run's lease lapses in 6 s, an unsent run is reaped a lease after it was due.
      const engine = sandbox.engine;
      const settled = async () => {
        for (const e of expected) {
          const runs = await allRuns(engine, e.jobId);
          for (const at of e.occurrences)
            if (!runs.some((r) => r.scheduledFor === at && r.status === "SUCCEEDED")) return false;
        }
        return true;
      };
      const drainDeadline = Date.now() + 45_000;
      while (!(await settled()) && Date.now() < drainDeadline) await sleep(1000);
      // A cancel racing the dispatchers' claims on its job may be answered 503 (busy): sent again
      // until it is done (200) or the job has ended already (409), so no job keeps queueing runs.
      const cancelAnswers: string[] = [];
      for (const e of expected.filter((x) => x.recurring)) {
        let status = 0;
        for (let attempt = 0; attempt < 20 && status !== 200 && status !== 409; attempt++) {
          if (attempt > 0) await sleep(500);
          status = (
            await fetch(`${sandbox.url}/jobs/${e.jobId}/cancel`, {
              method: "POST",
              headers: { Authorization: `Bearer ${KEY}` },
            })
          ).status;
        }
        if (status !== 200 && status !== 409) cancelAnswers.push(`${e.jobId} ${status}`);
      }
      expect(cancelAnswers, "cancels that never went through").toEqual([]);
      // Runs after the window that were already running finish (or are taken over) before the audit.
      const quietDeadline = Date.now() + 20_000;
      let stuck: Run[] = [];
      do {
        stuck = [];
        for (const e of expected)
          stuck.push(
            ...(await allRuns(engine, e.jobId)).filter(
              (r) => r.status === "QUEUED" || r.status === "RUNNING",
            ),
          );
        if (stuck.length > 0) await sleep(1000);
      } while (stuck.length > 0 && Date.now() < quietDeadline);
      ticks.abort();
      await ticking;
      await Promise.all(workers.map((w) => w.stop()));

      // The audit.
      let lost = 0;
      let doubleSuccesses = 0;
      const incomplete: string[] = [];
      const notApplied: string[] = [];
      const startsPerRun = new Map<number, number>();
      for (const e of expected) {
        const runs = await allRuns(engine, e.jobId);
        for (const r of runs) startsPerRun.set(r.fence, (startsPerRun.get(r.fence) ?? 0) + 1);
        const byOccurrence = groupBy(runs, (r) => r.scheduledFor);
        for (const [at, list] of byOccurrence) {
          const wins = list.filter((r) => r.status === "SUCCEEDED").length;
          if (wins > 1) doubleSuccesses++;
          const attempts = list.map((r) => r.attempt).sort((a, b) => a - b);
          if (attempts.some((a, i) => a !== i + 1))
            incomplete.push(`${e.jobId}@${at}: attempts ${attempts}`);
        }
        for (const at of e.occurrences) {
          const list = byOccurrence.get(at) ?? [];
          const win = list.find((r) => r.status === "SUCCEEDED");
          if (!win) {
            lost++;
            incomplete.push(
              `${e.kind} ${e.jobId}@${at}: ${list.map((r) => `${r.status} fence ${r.fence} (${r.reason ?? ""})`).join(",") || "no run"}`,
            );
            continue;
          }
          const whole =
            typeof win.startedAt === "string" &&
            typeof win.finishedAt === "string" &&
            Date.parse(win.finishedAt) >= Date.parse(win.startedAt) &&
            Boolean(win.workerId) &&
            (win.fence ?? 0) >= 1 &&
            typeof win.enqueuedAt === "string";
          if (!whole) incomplete.push(`${e.jobId}@${at}: history ${JSON.stringify(win)}`);
          const key = `${e.jobId}@${at}`;
          if (receiver.deliveries.filter((d) => d.idempotencyKey === key && d.applied).length !== 1)
            notApplied.push(key);
        }
      }
      const deliveriesByKey = groupBy(receiver.deliveries, (d) => d.idempotencyKey);
      const webhookRepeats = [...deliveriesByKey.values()].reduce(
        (n, list) => n + list.length - 1,
        0,
      );
      const badSignatures = receiver.deliveries.filter((d) => !d.signatureValid).length;

      console.log(
        `chaos: occurrences ${occurrences} (created ${(createdBy / 1000).toFixed(1)} s before their window), kills ${figures.workerKills} worker + ${figures.dispatcherKills} dispatcher + ${figures.writerKills} fast-path writer, ` +
          `restarts ${figures.restarts}, redeliveries ${figures.duplicateMessages} duplicate messages + ${webhookRepeats} repeated webhooks, ` +
          `lost ${lost}, double successes ${doubleSuccesses}, runs by starts ${JSON.stringify(Object.fromEntries([...startsPerRun].sort((a, b) => a[0] - b[0])))}`,
      );
      // One assertion, so a lost occurrence is reported with what its runs say.
      expect({
        lost,
        doubleSuccesses,
        stuck: stuck.map((r) => `${r.runId} ${r.status}`),
        incomplete,
      }).toEqual({ lost: 0, doubleSuccesses: 0, stuck: [], incomplete: [] });
      expect(notApplied).toEqual([]);
      expect(badSignatures).toBe(0);
      expect(occurrences).toBeGreaterThanOrEqual(LONG ? 500 : 120);
      expect(figures.restarts).toBe(1);
      expect(figures.workerKills).toBeGreaterThanOrEqual(LONG ? 10 : 2);
      expect(figures.writerKills).toBeGreaterThan(0);
      expect(figures.dispatcherKills).toBeGreaterThan(0);
      expect(figures.duplicateMessages).toBeGreaterThan(0);
    },
    (WINDOW_S + 140) * 1000,
  );
});
