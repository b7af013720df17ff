import { isDeepStrictEqual } from "node:util";
import { GetItemCommand } from "@aws-sdk/client-dynamodb";
import { QueryCommand } from "@aws-sdk/lib-dynamodb";
import type { OpenAPIHono } from "@hono/zod-openapi";
import { z } from "zod";
import { createApiApp } from "../../shared/api/app.js";
import type { ApiEnv } from "../../shared/api/router.js";
import { DEFAULT_SETTINGS, type EngineSettings } from "../../shared/config.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { FenceLostError, RunCancelledError } from "../../shared/errors.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import { type JobContext, JobError } from "../../shared/execution/job-contract.js";
import { recoverLostMessages } from "../../shared/execution/restart-recovery.js";
import { MAX_EARLY_WAIT_MS, processRun, type WorkerDeps } from "../../shared/execution/worker.js";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import type { DueEntry, Job, Run } from "../../shared/model.js";
import { MetricsRecorder, silentObservability } from "../../shared/observability.js";
import { deleteMessages, type QueueUrls, setVisibility } from "../../shared/queue/work-queue.js";
import { extendAdmission } from "../../shared/storage/admission.js";
import { decodeDueEntry, decodeJob, decodeRun, inflightPk } from "../../shared/storage/items.js";
import { extendLease } from "../../shared/storage/run-heartbeat.js";
import { getRun } from "../../shared/storage/run-reads.js";
import {
  JOBS_TTL_ATTRIBUTE,
  jobsTableDefinition,
  RUNS_INFLIGHT_INDEX,
  RUNS_TTL_ATTRIBUTE,
  runsTableDefinition,
  type TableNames,
  webhookSecretsTableDefinition,
} from "../../shared/storage/tables.js";
import { mulberry32 } from "../support/mulberry32.js";
import {
  createQueue,
  createTable,
  createTestClients,
  deleteQueue,
  deleteTable,
  scanTable,
  type TestClients,
  testNamespace,
} from "../support/namespace.js";
import { writeItems } from "../support/seed.js";
import {
  type CrashPoint,
  type DeliveryContext,
  emptyFaultPlan,
  type FaultPlan,
  InjectedCrash,
  inApiRequest,
  inDelivery,
  installDynamoFaults,
  newDelivery,
} from "./faults.js";
import { installStartLog, type StartRecord } from "./starts.js";
import { type HeldMessage, VirtualQueues } from "./virtual-queue.js";

const TENANT = "tenant-model";
export const MODEL_TYPE = "model";

/** SQS moves a message to the redrive DLQ on the receive after this many. */
const MAX_RECEIVE_COUNT = 4;

/** The engine settings the model runs with: one shard and a short lookahead keep a sequence's I/O small. */
export const MODEL_SETTINGS: EngineSettings = {
  ...DEFAULT_SETTINGS,
  shardCount: 1,
  maxShardCount: 1,
  lookaheadMs: 60_000,
  leaseMs: 60_000,
  misfireGraceMs: 60_000,
  retentionDays: 3650,
  maxReceiveCount: MAX_RECEIVE_COUNT,
};
export const TICK_MS = 60_000;
/** A worker loop receives with a lease of visibility plus the longest early wait. */
export const RECEIVE_VISIBILITY_SECONDS = Math.ceil(MODEL_SETTINGS.leaseMs / 1000 + 2);
/** The Lambda worker's deliveries are hidden for the queue's visibility, the function's timeout. */
const LAMBDA_VISIBILITY_SECONDS = 900;

/** What the handler of type `model` does, read from the job's payload. */
export type Behaviour =
  | { readonly mode: "ok"; readonly tag: number }
  | { readonly mode: "retry"; readonly failTimes: number; readonly tag: number }
  | { readonly mode: "fatal"; readonly tag: number }
  /** Fails with an error text larger than a DynamoDB item may be. */
  | { readonly mode: "hugeError"; readonly tag: number }
  | { readonly mode: "sleep"; readonly tag: number };

export interface Invocation {
  readonly delivery: number;
  readonly workerId: string;
  readonly jobId: string;
  readonly runId: string;
  readonly occurrence: string;
  readonly attempt: number;
  readonly payload: unknown;
  readonly at: number;
  outcome: "running" | "succeeded" | "failed";
}

export interface Violation {
  readonly invariant: string;
  readonly detail: string;
}

export class ModelViolation extends Error {
  override readonly name = "ModelViolation";
  constructor(readonly violations: readonly Violation[]) {
    super(violations.map((v) => `${v.invariant}\n    ${v.detail}`).join("\n  "));
  }
}

/** What the model knows about a job when a handler is called: what the handler must see. */
export interface Expectation {
  readonly status: string;
  readonly payload: unknown;
  readonly timeoutMs: number;
  readonly recurring: boolean;
}

interface Sleeper {
  readonly invocation: Invocation;
  readonly release: (outcome: "succeed" | "timeout" | "abort") => void;
}

interface Delivery {
  readonly id: number;
  readonly workerId: string;
  readonly held: HeldMessage;
  readonly context: DeliveryContext;
  readonly done: Promise<void>;
  finished: boolean;
  invocations: Invocation[];
}

interface SharedState {
  readonly clients: TestClients;
  readonly tables: TableNames;
  sequence: Sequence | null;
}

/** Tables and clients for every sequence of a test file; each sequence cleans the tables and gets fresh queues. */
export class ModelSystem {
  private constructor(private readonly shared: SharedState) {}

  static async open(): Promise<ModelSystem> {
    const clients = createTestClients({ maxSockets: 16 });
    const ns = testNamespace("m");
    const jobs = await createTable(clients.dynamo, jobsTableDefinition(ns.name("jobs")), {
      timeToLiveAttribute: JOBS_TTL_ATTRIBUTE,
    });
    const runs = await createTable(clients.dynamo, runsTableDefinition(ns.name("runs")), {
      timeToLiveAttribute: RUNS_TTL_ATTRIBUTE,
    });
    // The model's jobs post no webhooks; the engine still names a table for their secrets.
    const webhookSecrets = await createTable(
      clients.dynamo,
      webhookSecretsTableDefinition(ns.name("webhook-secrets")),
    );
    const shared: SharedState = {
      clients,
      tables: { jobs, runs, webhookSecrets },
      sequence: null,
    };
    installDynamoFaults(clients.dynamo, () => {
      const s = shared.sequence;
      return s
        ? { plan: s.plan, tables: shared.tables, now: () => new Date(s.nowMs).toISOString() }
        : null;
    });
    installStartLog(clients.dynamo, () => {
      const s = shared.sequence;
      if (s === null) return null;
      const read = async (key: Parameters<typeof readRunItem>[2]) =>
        readRunItem(clients, shared.tables.runs, key);
      return { runsTable: shared.tables.runs, starts: s.starts, read };
    });
    clients.sqs.middlewareStack.add(
      (next, context) => (args) => {
        const queues = shared.sequence?.queues;
        return queues ? queues.middleware()(next, context)(args) : next(args);
      },
      { step: "initialize", name: "modelVirtualQueues" },
    );
    return new ModelSystem(shared);
  }

  /** A fresh system at `startMs` of virtual time: empty tables, new queues. */
  async begin(startMs: number, seed: number): Promise<Sequence> {
    const { clients, tables } = this.shared;
    await Promise.all([clearTable(clients, tables.jobs), clearTable(clients, tables.runs)]);
    const ns = testNamespace("mq");
    const [high, normal, low] = await Promise.all(
      (["high", "normal", "low"] as const).map((p) => createQueue(clients.sqs, ns.name(p))),
    );
    if (!high || !normal || !low) throw new Error("queue creation failed");
    const sequence = new Sequence(
      clients,
      tables,
      { high: high.url, normal: normal.url, low: low.url },
      startMs,
      seed,
    );
    this.shared.sequence = sequence;
    return sequence;
  }

  async end(sequence: Sequence): Promise<void> {
    await sequence.dispose();
    if (this.shared.sequence === sequence) this.shared.sequence = null;
    await Promise.all(
      Object.values(sequence.engine.queues).map((url) => deleteQueue(this.shared.clients.sqs, url)),
    );
  }

  async close(): Promise<void> {
    const { clients, tables } = this.shared;
    await Promise.all([
      deleteTable(clients.dynamo, tables.jobs),
      deleteTable(clients.dynamo, tables.runs),
    ]);
    clients.destroy();
  }
}

async function readRunItem(
  clients: TestClients,
  table: string,
  key: NonNullable<ConstructorParameters<typeof GetItemCommand>[0]["Key"]>,
) {
  const found = await clients.dynamo.send(
    new GetItemCommand({ TableName: table, Key: key, ConsistentRead: true }),
  );
  return found.Item ?? null;
}

async function clearTable(clients: TestClients, table: string): Promise<void> {
  const items = await scanTable(clients.doc, table);
  await writeItems(
    { engine: { doc: clients.doc } },
    table,
    items.map((item) => ({ DeleteRequest: { Key: { pk: item.pk, sk: item.sk } } })),
  );
}

/**
 * The least draw the model's random gives: a retry's full-jitter backoff (uniform over
 * [0, ceiling]) is then at least this share of its ceiling, so a retry due at its failure's instant
 * is a backoff ignored, never an unlucky draw (invariants.ts checks it).
 */
export const MIN_RANDOM_DRAW = 0.01;

/**
 * A small seeded PRNG (mulberry32), so ids and backoff jitter replay with the seed; its draws lie
 * in [MIN_RANDOM_DRAW, 1), a range every caller of `engine.random` accepts.
 */
function seededRandom(seed: number): () => number {
  const draw = mulberry32(seed);
  return () => MIN_RANDOM_DRAW + (1 - MIN_RANDOM_DRAW) * draw();
}

export interface Snapshot {
  readonly now: number;
  readonly jobs: Job[];
  readonly runs: (Run & { readonly inflightSk: string | null })[];
  readonly due: DueEntry[];
  readonly messages: readonly HeldMessage[];
}

/** One model sequence's real system: the engine on a virtual clock, its API, workers, dispatcher and reaper. */
export class Sequence {
  nowMs: number;
  readonly engine: Engine;
  readonly queues: VirtualQueues;
  readonly plan: FaultPlan = emptyFaultPlan();
  readonly violations: Violation[] = [];
  readonly invocations: Invocation[] = [];
  /** Every start write of a run DynamoDB applied, with the run just before it (starts.ts). */
  readonly starts: StartRecord[] = [];
  /** Handler successes whose run was recorded SUCCEEDED by the same worker, per occurrence key. */
  readonly effectiveSuccesses = new Map<string, number>();
  /** What this sequence reached (a dead letter, a replay answered 202, ...): the run's coverage tally. */
  readonly reached = new Set<string>();
  /** Worker deaths that happened, by where (for MODEL_PROFILE). */
  readonly crashes = new Map<string, number>();
  /** How the model expects each job to look to a handler starting now. */
  expectation: (jobId: string) => Expectation | null = () => null;
  private readonly app: OpenAPIHono<ApiEnv>;
  private readonly sleepers = new Map<number, Sleeper>();
  private readonly deliveries = new Map<number, Delivery>();
  private nextDelivery = 0;
  private nextPass = 0;
  /** The last pass left buckets for the next one. */
  private backlog = false;

  constructor(
    private readonly clients: TestClients,
    private readonly tables: TableNames,
    queueUrls: QueueUrls,
    startMs: number,
    seed: number,
  ) {
    this.nowMs = startMs;
    this.engine = {
      doc: clients.doc,
      sqs: clients.sqs,
      tables,
      queues: queueUrls,
      // Half the sequences claim one-offs with plain writes (a deployment's oneOffClaimWrites), by
      // the seed, so that both forms meet every command the model has and replay alike.
      settings: { ...MODEL_SETTINGS, oneOffClaimWrites: seed % 2 === 0 ? "transaction" : "plain" },
      clock: () => new Date(this.nowMs),
      random: seededRandom(seed),
      obs: { log: silentObservability.log, metrics: new MetricsRecorder() },
    };
    this.queues = new VirtualQueues(clients.sqs, Object.values(queueUrls), () => this.nowMs);
    this.app = createApiApp({
      engine: this.engine,
      jobTypes: jobTypeCatalog({
        demoTypes: true,
        custom: [{ name: MODEL_TYPE, payload: z.unknown(), description: "The model's behaviour." }],
      }),
      authenticate: () => TENANT,
    });
  }

  violate(invariant: string, detail: string): void {
    this.violations.push({ invariant, detail });
  }

  // ------------------------------------------------------------------ API

  /**
   * One API request. A 5xx breaks a promise, unless `retriedWithKey` and no write of the request
   * lost its answer: the caller repeats the request under the same `Idempotency-Key` and judges
   * the repeat. A 5xx is acceptable only where the write may not have happened (so never after a
   * write that was applied, its answer lost) and a retry with the key is harmless.
   */
  async api(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
    options: { readonly retriedWithKey?: boolean } = {},
  ) {
    const lostBefore = this.plan.lost.length;
    const response = await inApiRequest(async () =>
      this.app.request(path, {
        method,
        headers: {
          ...headers,
          ...(body === undefined ? {} : { "Content-Type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      }),
    );
    const text = await response.text();
    const parsed: unknown = text === "" ? null : JSON.parse(text);
    const lost = this.plan.lost.slice(lostBefore).map((l) => l.kind);
    // A write applied with its answer lost was applied: the API must tell its own write apart.
    if (response.status >= 500 && (lost.length > 0 || !options.retriedWithKey))
      this.violate(
        lost.length > 0
          ? "no 5xx from the API where the write was applied (its answer lost)"
          : "no request answers 5xx",
        `${method} ${path} → ${response.status} ${text.slice(0, 300)}${lost.length > 0 ? ` (answers lost: ${lost.join(", ")})` : ""}`,
      );
    return { status: response.status, body: parsed, etag: response.headers.get("ETag") };
  }

  // ------------------------------------------------------------------ dispatcher and reaper

  async pass(): Promise<void> {
    this.backlog = false;
    for (let shard = 0; shard < MODEL_SETTINGS.maxShardCount; shard++) {
      try {
        const result = await dispatchShard(this.engine, shard, `dispatcher-${this.nextPass++}`);
        // A pass that leaves buckets unread (a long outage's backlog) has work for the next tick.
        const resweepFrom = this.nowMs - 2 * 60_000 - 60_000;
        if ("sweepFrom" in result && Date.parse(`${result.sweepFrom}:00.000Z`) < resweepFrom)
          this.backlog = true;
      } catch (error) {
        if (!byInjectedSqsFault(error))
          this.violate("no dispatcher pass throws", `shard ${shard}: ${describe(error)}`);
      }
    }
  }

  async reap(): Promise<void> {
    try {
      await reap(this.engine);
    } catch (error) {
      if (!byInjectedSqsFault(error)) this.violate("no reaper pass throws", describe(error));
    }
  }

  // ------------------------------------------------------------------ workers

  /**
   * Delivers up to `count` visible messages one after another (the first
   * with `mode`), as workers would receive them. A handler that sleeps keeps
   * its delivery open until it is released or times out.
   */
  async deliver(count: number, mode: "normal" | "duplicate" | CrashPoint): Promise<number> {
    let delivered = 0;
    await this.queues.pull();
    while (delivered < count) {
      const next = this.queues.visible().find((m) => this.deliverable(m));
      if (next === undefined) break;
      if (next.receives >= MAX_RECEIVE_COUNT) {
        await this.redrive(next);
        continue;
      }
      const first = delivered === 0;
      if (first && mode === "duplicate") {
        await this.queues.duplicate(next);
      }
      await this.deliverOne(next, first && mode !== "normal" && mode !== "duplicate" ? mode : null);
      delivered++;
      await this.queues.pull();
    }
    return delivered;
  }

  /** An early message is delivered only once its wait would be over: the worker's wait is real time. */
  private deliverable(m: HeldMessage): boolean {
    const early = Date.parse(m.message.dueAt) - this.nowMs;
    return early <= 0 || early > MAX_EARLY_WAIT_MS;
  }

  private async redrive(held: HeldMessage): Promise<void> {
    await deleteMessages(this.engine.sqs, held.queueUrl, [held.receiptHandle]);
    this.queues.forget(held.receiptHandle);
    try {
      await handleCrashedRun(this.engine, held.message, held.receives);
    } catch (error) {
      this.violate("no dead-letter consumer throws", describe(error));
    }
  }

  private async deliverOne(held: HeldMessage, crash: CrashPoint | null): Promise<void> {
    const id = this.nextDelivery++;
    const workerId = `worker-${id}`;
    held.receives++;
    // Every other delivery is the Lambda worker's: the event source receives with the queue's
    // visibility and does not say so; the others are a worker loop's.
    const lambda = id % 2 === 1;
    const visibilitySeconds = lambda ? LAMBDA_VISIBILITY_SECONDS : RECEIVE_VISIBILITY_SECONDS;
    held.visibleAt = this.nowMs + visibilitySeconds * 1000;
    held.busy = true;
    let blocked: () => void = () => undefined;
    const blockedSignal = new Promise<void>((resolve) => {
      blocked = resolve;
    });
    const invocations: Invocation[] = [];
    const deps: WorkerDeps = {
      engine: this.engine,
      workerId,
      handlers: new Map([
        [MODEL_TYPE, (ctx: JobContext) => this.handle(id, workerId, ctx, invocations, blocked)],
      ]),
      heartbeatEveryMs: 2_000_000_000,
    };
    const received = {
      message: held.message,
      queueUrl: held.queueUrl,
      receiptHandle: held.receiptHandle,
      messageId: held.messageId,
      receiveCount: held.receives,
      ...(lambda ? {} : { visibilitySeconds }),
    };
    const context = newDelivery(crash);
    const delivery: Delivery = {
      id,
      workerId,
      held,
      context,
      finished: false,
      invocations,
      done: inDelivery(context, () => processRun(deps, received))
        .then(
          async (disposition) => {
            if (disposition === "ack") {
              await deleteMessages(this.engine.sqs, held.queueUrl, [held.receiptHandle]);
              this.queues.forget(held.receiptHandle);
            }
          },
          (error: unknown) => {
            if (error instanceof InjectedCrash) {
              const point = context.killed ? "killed" : (context.crash ?? "none");
              this.crashes.set(point, (this.crashes.get(point) ?? 0) + 1);
            }
            if (!(error instanceof InjectedCrash || byInjectedSqsFault(error)))
              this.violate(
                "no worker delivery throws",
                `${held.message.jobId}: ${describe(error)}`,
              );
          },
        )
        .then(() => this.afterDelivery(delivery))
        .finally(() => {
          held.busy = false;
          delivery.finished = true;
          this.deliveries.delete(id);
        }),
    };
    this.deliveries.set(id, delivery);
    await Promise.race([delivery.done, blockedSignal]);
  }

  private async handle(
    delivery: number,
    workerId: string,
    ctx: JobContext,
    invocations: Invocation[],
    blocked: () => void,
  ): Promise<unknown> {
    const invocation: Invocation = {
      delivery,
      workerId,
      jobId: ctx.jobId,
      runId: ctx.runId,
      occurrence: ctx.idempotencyKey,
      attempt: ctx.attempt,
      payload: ctx.payload,
      at: this.nowMs,
      outcome: "running",
    };
    invocations.push(invocation);
    this.invocations.push(invocation);
    const expected = this.expectation(ctx.jobId);
    // A COMPLETED one-off may still run a trigger or replay accepted before it completed.
    if (
      expected &&
      (expected.status === "PAUSED" ||
        expected.status === "CANCELLED" ||
        expected.status === "DELETED")
    )
      this.violate(
        "no handler starts for a paused, cancelled or deleted job",
        `${ctx.runId} started while the job was ${expected.status}`,
      );
    if (expected && !isDeepStrictEqual(expected.payload, ctx.payload))
      this.violate(
        "a run executes the job's current definition",
        `${ctx.runId} got payload ${JSON.stringify(ctx.payload)}, the job's is ${JSON.stringify(expected.payload)}`,
      );
    const behaviour = ctx.payload as Behaviour;
    try {
      switch (behaviour.mode) {
        case "ok":
          break;
        case "retry":
          if (ctx.attempt <= behaviour.failTimes)
            throw new JobError(`planned failure ${ctx.attempt}`, { retryable: true });
          break;
        case "fatal":
          throw new JobError("planned permanent failure", { retryable: false });
        case "hugeError":
          throw new JobError(`planned failure with a long story: ${"x".repeat(450_000)}`, {
            retryable: true,
          });
        case "sleep": {
          const outcome = await new Promise<"succeed" | "timeout" | "abort">((release) => {
            this.sleepers.set(delivery, { invocation, release });
            blocked();
          });
          this.sleepers.delete(delivery);
          if (outcome !== "succeed")
            throw new JobError(`sleep ended: ${outcome}`, { retryable: true });
          break;
        }
      }
    } catch (error) {
      invocation.outcome = "failed";
      throw error;
    }
    invocation.outcome = "succeeded";
    return null;
  }

  /** Counts a handler success that its worker also recorded: the run is SUCCEEDED under this worker. */
  private async afterDelivery(delivery: Delivery): Promise<void> {
    for (const invocation of delivery.invocations) {
      if (invocation.outcome !== "succeeded") continue;
      const run = await getRunById(this.engine, invocation);
      if (run?.status === "SUCCEEDED" && run.workerId === delivery.workerId) {
        const count = (this.effectiveSuccesses.get(invocation.occurrence) ?? 0) + 1;
        this.effectiveSuccesses.set(invocation.occurrence, count);
      }
    }
  }

  /** Lets every sleeping handler finish (successfully), and waits for their deliveries. */
  async releaseSleepers(outcome: "succeed" | "abort" = "succeed"): Promise<void> {
    for (const sleeper of this.sleepers.values()) sleeper.release(outcome);
    await Promise.all([...this.deliveries.values()].map((d) => d.done));
  }

  /**
   * Moves virtual time on. A sleeping handler past its job's timeout is
   * stopped at its timeout, as the worker's timer would; the others keep their
   * lease and message, as the worker's heartbeat would.
   */
  async advance(ms: number): Promise<void> {
    const target = this.nowMs + ms;
    for (;;) {
      const due = [...this.sleepers.entries()]
        .map(([delivery, s]) => ({
          delivery,
          sleeper: s,
          at: s.invocation.at + (this.expectation(s.invocation.jobId)?.timeoutMs ?? 60_000),
        }))
        .filter((s) => s.at <= target)
        .sort((a, b) => a.at - b.at || a.delivery - b.delivery)[0];
      if (due === undefined) break;
      this.nowMs = Math.max(this.nowMs, due.at);
      await this.heartbeat();
      due.sleeper.release("timeout");
      await this.deliveries.get(due.delivery)?.done;
    }
    this.nowMs = target;
    await this.heartbeat();
  }

  private async heartbeat(): Promise<void> {
    for (const [id, sleeper] of this.sleepers) {
      const delivery = this.deliveries.get(id);
      if (!delivery) continue;
      const run = await getRun(this.engine, delivery.held.message);
      if (run === null || run.status !== "RUNNING" || run.workerId !== delivery.workerId) {
        sleeper.release("abort");
        await delivery.done;
        continue;
      }
      try {
        const leaseUntil = await extendLease(this.engine, run, this.engine.clock());
        // Best effort, as the worker's beat: a receipt handle SQS no longer takes leaves the
        // message to come back at its visibility, and the run's lease is what keeps the run.
        await setVisibility(
          this.engine.sqs,
          delivery.held.queueUrl,
          delivery.held.receiptHandle,
          MODEL_SETTINGS.leaseMs / 1000,
        ).catch(() => undefined);
        if (this.expectation(run.jobId)?.recurring)
          await extendAdmission(this.engine, run.jobId, run.runId, leaseUntil);
      } catch (error) {
        // Lost, or asked to cancel: the worker's own heartbeat aborts the handler either way.
        if (!(error instanceof FenceLostError || error instanceof RunCancelledError)) throw error;
        sleeper.release("abort");
        await delivery.done;
      }
    }
  }

  /**
   * Delivers again each message whose visibility lapsed while its handler still sleeps (its
   * heartbeat's visibility change was refused): SQS shows it again, and another worker receives
   * it. Returns how many were delivered.
   */
  async redeliverLapsed(): Promise<number> {
    let count = 0;
    for (const delivery of [...this.deliveries.values()]) {
      if (delivery.finished || delivery.held.visibleAt > this.nowMs) continue;
      const copy = await this.queues.redelivery(delivery.held);
      if (copy === undefined) continue;
      await this.deliverOne(copy, null);
      count++;
    }
    return count;
  }

  get sleeping(): number {
    return this.sleepers.size;
  }

  // ------------------------------------------------------------------ reading the state

  /**
   * The lastRun each job shows, as GET /jobs/{id} and as GET /jobs answer it (the list paged
   * through), by job id: what a user reads, not the stored item.
   */
  async lastRunsAsAnswered(): Promise<
    Map<string, { readonly get: unknown; readonly list: unknown }>
  > {
    const listed = new Map<string, unknown>();
    let cursor: string | null = null;
    do {
      const page = await this.api(
        "GET",
        `/jobs?limit=100${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`,
      );
      const body = page.body as {
        items?: { id: string; lastRun: unknown }[];
        nextCursor?: string | null;
      };
      for (const item of body.items ?? []) listed.set(item.id, item.lastRun);
      cursor = body.nextCursor ?? null;
    } while (cursor !== null);
    const answered = new Map<string, { get: unknown; list: unknown }>();
    for (const id of listed.keys()) {
      const one = await this.api("GET", `/jobs/${id}`);
      answered.set(id, { get: (one.body as { lastRun?: unknown }).lastRun, list: listed.get(id) });
    }
    return answered;
  }

  async snapshot(): Promise<Snapshot> {
    await this.queues.pull();
    const [jobItems, runs] = await Promise.all([
      scanTable(this.clients.doc, this.tables.jobs),
      this.storedRuns(),
    ]);
    return {
      now: this.nowMs,
      jobs: jobItems.filter((i) => String(i.pk).startsWith("JOB#")).map(decodeJob),
      due: jobItems.filter((i) => String(i.pk).startsWith("DUE#")).map(decodeDueEntry),
      runs,
      messages: this.queues.all(),
    };
  }

  /** The runs as stored now: what a command reads to pick a run or see one end, without the rest of a snapshot. */
  async storedRuns(): Promise<Snapshot["runs"]> {
    const runItems = await scanTable(this.clients.doc, this.tables.runs);
    return runItems.map((item) => ({
      ...decodeRun(item),
      inflightSk: typeof item.inflightSk === "string" ? item.inflightSk : null,
    }));
  }

  /**
   * Runs the system without faults until it is quiet: sleeping handlers end,
   * then a dispatcher pass, a reaper pass and every delivery that is due, again
   * at each next thing to happen (a message becoming visible, a due entry
   * entering the lookahead, a reaper deadline, a tick at most apart while
   * anything is in flight) for `windowMs` of virtual time. A tick in which
   * nothing is due does nothing, so skipping it changes nothing.
   */
  async settle(windowMs: number): Promise<void> {
    this.clearFaults();
    this.plan.claimHook = null;
    this.plan.startHook = null;
    this.plan.replayHook = null;
    await this.releaseSleepers();
    const end = this.nowMs + windowMs;
    for (;;) {
      await this.pass();
      await this.reap();
      for (let round = 0; round < 50 && (await this.deliver(20, "normal")) > 0; round++) {
        await this.releaseSleepers();
      }
      await this.releaseSleepers();
      if (this.nowMs >= end) break;
      const next = await this.nextEvent();
      await this.advance(Math.min(Math.max(next, this.nowMs + 1000), end) - this.nowMs);
    }
  }

  /** When the next pass, reaper or delivery has something to do. */
  private async nextEvent(): Promise<number> {
    const times: number[] = [];
    for (const m of this.queues.all()) {
      if (m.busy) continue;
      const due = Date.parse(m.message.dueAt);
      times.push(due - m.visibleAt > MAX_EARLY_WAIT_MS ? m.visibleAt : Math.max(m.visibleAt, due));
    }
    const [jobItems, ...firstInflight] = await Promise.all([
      scanTable(this.clients.doc, this.tables.jobs),
      ...Array.from({ length: MODEL_SETTINGS.maxShardCount }, async (_, shard) => {
        const page = await this.clients.doc.send(
          new QueryCommand({
            TableName: this.tables.runs,
            IndexName: RUNS_INFLIGHT_INDEX,
            KeyConditionExpression: "inflightPk = :pk",
            ExpressionAttributeValues: { ":pk": inflightPk(shard) },
            Limit: 1,
          }),
        );
        return page.Items?.[0]?.inflightSk;
      }),
    ]);
    for (const item of jobItems) {
      if (String(item.pk).startsWith("DUE#"))
        times.push(Date.parse(String(item.dueAt)) - MODEL_SETTINGS.lookaheadMs);
    }
    for (const first of firstInflight) {
      if (typeof first === "string") times.push(Date.parse(first) + 1);
    }
    if (this.backlog) times.push(this.nowMs + TICK_MS);
    // What is due already and still undone (an orphaned entry, say) waits for no clock.
    const ahead = times.filter((t) => t > this.nowMs);
    return ahead.length === 0 ? Number.POSITIVE_INFINITY : Math.min(...ahead);
  }

  /**
   * A hard restart of the sandbox (SIGKILL, power cut): every worker dies
   * where it is, the in-memory queue loses every message, and at startup the
   * reaper sends every run that was in flight again.
   */
  async hardRestart(): Promise<void> {
    for (const delivery of this.deliveries.values()) delivery.context.killed = true;
    await this.releaseSleepers();
    await this.queues.pull();
    const byQueue = new Map<string, string[]>();
    for (const held of this.queues.all())
      byQueue.set(held.queueUrl, [...(byQueue.get(held.queueUrl) ?? []), held.receiptHandle]);
    for (const [queueUrl, handles] of byQueue) {
      await deleteMessages(this.engine.sqs, queueUrl, handles);
      for (const handle of handles) this.queues.forget(handle);
    }
    try {
      await recoverLostMessages(this.engine);
    } catch (error) {
      if (!byInjectedSqsFault(error)) this.violate("no reaper pass throws", describe(error));
    }
  }

  /** No further faults: what settling and disposing run under. */
  private clearFaults(): void {
    this.plan.conflicts.clear();
    this.plan.lostAnswers.clear();
    this.queues.faults.sends.length = 0;
    this.queues.faults.expiredReceipts = 0;
  }

  async dispose(): Promise<void> {
    this.clearFaults();
    this.plan.claimHook = null;
    this.plan.startHook = null;
    this.plan.replayHook = null;
    await this.releaseSleepers("abort").catch(() => undefined);
  }
}

async function getRunById(engine: Engine, invocation: Invocation): Promise<Run | null> {
  const scheduledFor = invocation.occurrence.slice(invocation.occurrence.indexOf("@") + 1);
  return getRun(engine, { jobId: invocation.jobId, scheduledFor, attempt: invocation.attempt });
}

/**
 * An error that comes from SQS refusing or not answering a send the model injected: a pass or a
 * delivery that meets one fails loudly and is run again; what it left undone is the reaper's, and
 * the checks after settling find anything lost.
 */
function byInjectedSqsFault(error: unknown): boolean {
  return /injected SQS fault|SQS refused/.test(describe(error));
}

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`.slice(0, 400);
  return String(error).slice(0, 400);
}
