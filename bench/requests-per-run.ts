import { readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { CreateTableCommand, DescribeTableCommand } from "@aws-sdk/client-dynamodb";
import { CreateQueueCommand, GetQueueAttributesCommand } from "@aws-sdk/client-sqs";
import { ScanCommand, TransactWriteCommand } from "@aws-sdk/lib-dynamodb";
import { type AwsClients, createAwsClients } from "../shared/aws.js";
import { type Clock, sleep } from "../shared/clock.js";
import { DEFAULT_SETTINGS, type EngineSettings } from "../shared/config.js";
import { dispatchShard } from "../shared/dispatch/dispatcher.js";
import { reap } from "../shared/dispatch/reaper.js";
import { tickOnce } from "../shared/dispatch/tick.js";
import type { Engine } from "../shared/engine.js";
import { builtInHandlers } from "../shared/execution/built-in-handlers.js";
import { processRun, type WorkerDeps } from "../shared/execution/worker.js";
import { runWorkerLoop } from "../shared/execution/worker-loop.js";
import { createJobs, MAX_BATCH_JOBS } from "../shared/jobs/create-batch.js";
import { createJob, type NewJob } from "../shared/jobs/index.js";
import type { Run } from "../shared/model.js";
import { MetricsRecorder, silentObservability } from "../shared/observability.js";
import { deleteMessages, type QueueUrls, receiveRuns } from "../shared/queue/work-queue.js";
import { decodeRun } from "../shared/storage/items.js";
import {
  jobsTableDefinition,
  runsTableDefinition,
  type TableNames,
  webhookSecretsTableDefinition,
} from "../shared/storage/tables.js";
import { cachedSigningSecrets } from "../shared/webhooks/secrets.js";
import { benchArgs } from "./args.js";
import {
  CallCounter,
  countDynamoDb,
  countSqs,
  isReadOperation,
  type OperationCount,
} from "./aws-counter.js";
import { percentile } from "./percentile.js";
import { holdDelayedSends } from "./virtual-delays.js";

/**
 * Requests per run: every AWS call the engine makes from "job created" to "run recorded",
 * counted by a middleware on the SDK clients, with DynamoDB's consumed capacity, for four
 * kinds of run; then dollars per million runs from bench/prices.json.
 *
 * Runs against DynamoDB Local and fauxqs, started here. Three sets of clients, each with its
 * own counter, so that calls are booked to who made them even when they overlap in time:
 * the producer (create, the fast path), the dispatcher (a pass over every shard), the
 * worker (the worker loop exactly as the sandbox runs it), the reaper (the tick's pass over
 * the `inflight` index, which reads every run's entry once, at its deadline).
 */

const MINUTE = 60_000;

type Side = "producer" | "dispatcher" | "worker" | "reaper";
const SIDES: readonly Side[] = ["producer", "dispatcher", "worker", "reaper"];

export interface OpPerRun {
  readonly side: Side;
  readonly op: string;
  readonly callsPerRun: number;
  readonly unitsPerRun: number;
  readonly indexUnitsPerRun: number;
  readonly estimatedUnitsPerRun: number;
  readonly emptyPerRun: number;
}

export interface ScenarioResult {
  readonly id: string;
  readonly title: string;
  readonly runs: number;
  readonly notes: string;
  readonly ops: readonly OpPerRun[];
  readonly perRun: {
    readonly dynamoCalls: number;
    readonly writeUnits: number;
    readonly readUnits: number;
    /** SQS calls the engine makes itself: sends and visibility changes. */
    readonly sqsEngineRequests: number;
    /** Receives and deletes made by the sandbox's worker loop (on Lambda: the event source). */
    readonly sqsConsumerRequests: number;
    readonly sqsEmptyReceives: number;
    /** Worker invocations' share (durations of the Lambda-like pass, see lambdaLike). */
    readonly workerMs: number;
    /** Dispatcher time spent per run (claims in a pass), when a pass claimed it. */
    readonly dispatcherMs: number;
    /** Whether the run came in through the API (a one-off is created per run). */
    readonly viaApi: boolean;
    /** API requests per run: 1 for a one-off created alone, 1/25 through a full batch, 0 recurring. */
    readonly apiRequestsPerRun: number;
    /** The API Lambda's duration of one of those requests (assumed for a single create, measured for a batch). */
    readonly apiMsPerRequest: number;
  };
  readonly costPerMillion: CostBreakdown;
}

export interface CostBreakdown {
  readonly dynamoOnDemand: number;
  readonly dynamoProvisioned70: number;
  readonly historyStorage: number;
  readonly sqs: number;
  readonly lambda: number;
  readonly apiGatewayAndLambda: number;
  readonly totalOnDemand: number;
  readonly totalProvisioned70: number;
  readonly eventBridgeScheduler: number;
}

export interface RequestsResult {
  readonly measuredAt: string;
  readonly target: string;
  readonly runsPerScenario: number;
  readonly capacity: {
    readonly source: string;
    readonly transactionsDoubledByEndpoint: boolean;
  };
  readonly assumptions: readonly string[];
  readonly lambdaLike: {
    readonly batches: number;
    readonly meanBatchSize: number;
    readonly batchMsP50: number;
    readonly batchMsP95: number;
    /** The batches' total time over the runs they held: what Lambda bills a run, on average. */
    readonly msPerRun: number;
    readonly receivesPerRun: number;
    readonly deletesPerRun: number;
    /** ChangeMessageVisibility requests the Lambda worker made per run (none for a run that ends before its first heartbeat). */
    readonly visibilityChangesPerRun: number;
  };
  readonly runItemBytes: number;
  readonly idleTick: {
    readonly dynamoCalls: number;
    readonly writeUnits: number;
    readonly readUnits: number;
    readonly ms: number;
    readonly monthlyUsd: number;
  };
  readonly prices: Record<string, number>;
  readonly scenarios: readonly ScenarioResult[];
}

interface PriceEntry {
  readonly usd: number;
}

function loadPrices(): Record<string, number> {
  const raw: unknown = JSON.parse(readFileSync(join(import.meta.dirname, "prices.json"), "utf8"));
  const prices =
    typeof raw === "object" && raw !== null && "prices" in raw
      ? (raw.prices as Record<string, PriceEntry>)
      : {};
  return Object.fromEntries(Object.entries(prices).map(([k, v]) => [k, v.usd]));
}

function price(prices: Record<string, number>, name: string): number {
  const value = prices[name];
  if (value === undefined) throw new Error(`bench/prices.json has no price "${name}"`);
  return value;
}

/**
 * Writes a benchmark's result files, `<date>-<name>.<extension>`, into the results directory
 * (bench/results unless given); returns their path without the extension.
 */
export async function writeResults(
  resultsDir: string | undefined,
  measuredAt: string,
  name: string,
  files: Readonly<Record<string, string>>,
): Promise<string> {
  const dir = resolve(resultsDir ?? join(import.meta.dirname, "results"));
  await mkdir(dir, { recursive: true });
  const base = join(dir, `${measuredAt.slice(0, 10)}-${name}`);
  for (const [extension, text] of Object.entries(files))
    await writeFile(`${base}.${extension}`, text);
  return base;
}

interface Counted {
  readonly clients: AwsClients;
  readonly counter: CallCounter;
}

export interface Harness {
  readonly plain: AwsClients;
  readonly sides: Record<Side, Counted>;
  readonly tables: TableNames;
  readonly queues: QueueUrls;
  readonly transactionsDoubled: boolean;
  engine(side: Side, settings?: Partial<EngineSettings>, clock?: Clock): Engine;
  destroy(): void;
}

async function waitActive(clients: AwsClients, table: string): Promise<void> {
  for (;;) {
    const { Table } = await clients.dynamo.send(new DescribeTableCommand({ TableName: table }));
    const indexes = Table?.GlobalSecondaryIndexes ?? [];
    if (Table?.TableStatus === "ACTIVE" && indexes.every((i) => i.IndexStatus === "ACTIVE")) return;
    await sleep(200);
  }
}

/** The partition-key attribute of every GSI of the tables, for the counter's transaction units. */
export function indexKeyAttributesOf(tables: TableNames): string[] {
  return [
    jobsTableDefinition(tables.jobs),
    runsTableDefinition(tables.runs),
    webhookSecretsTableDefinition(tables.webhookSecrets),
  ].flatMap((table) =>
    (table.GlobalSecondaryIndexes ?? []).flatMap((index) =>
      (index.KeySchema ?? []).filter((k) => k.KeyType === "HASH").map((k) => k.AttributeName ?? ""),
    ),
  );
}

/** Does the endpoint bill a one-item transaction at twice a plain write (AWS), or not (DynamoDB Local)? */
export async function transactionsDoubled(clients: AwsClients, table: string): Promise<boolean> {
  const probe = await clients.doc.send(
    new TransactWriteCommand({
      TransactItems: [{ Put: { TableName: table, Item: { pk: "BENCH#probe", sk: "PROBE" } } }],
      ReturnConsumedCapacity: "TOTAL",
    }),
  );
  const units = (probe.ConsumedCapacity ?? []).reduce((s, c) => s + (c.CapacityUnits ?? 0), 0);
  if (units === 0) throw new Error("the endpoint reports no consumed capacity for transactions");
  return units >= 2;
}

export async function createHarness(dynamoEndpoint: string, sqsEndpoint: string): Promise<Harness> {
  const clientsFor = (): AwsClients => {
    const d = createAwsClients({ endpoint: dynamoEndpoint, maxSockets: 64 });
    const s = createAwsClients({ endpoint: sqsEndpoint, maxSockets: 64 });
    d.sqs.destroy();
    s.dynamo.destroy();
    return { dynamo: d.dynamo, doc: d.doc, sqs: s.sqs };
  };
  const plain = clientsFor();
  const prefix = `bench${Date.now().toString(36)}`;
  const tables: TableNames = {
    jobs: `${prefix}-jobs`,
    runs: `${prefix}-runs`,
    webhookSecrets: `${prefix}-webhook-secrets`,
  };
  await plain.dynamo.send(new CreateTableCommand(jobsTableDefinition(tables.jobs)));
  await plain.dynamo.send(new CreateTableCommand(runsTableDefinition(tables.runs)));
  await plain.dynamo.send(
    new CreateTableCommand(webhookSecretsTableDefinition(tables.webhookSecrets)),
  );
  await waitActive(plain, tables.jobs);
  await waitActive(plain, tables.runs);
  await waitActive(plain, tables.webhookSecrets);
  const queueUrl = async (name: string, attributes: Record<string, string> = {}) => {
    const created = await plain.sqs.send(
      new CreateQueueCommand({ QueueName: `${prefix}-${name}`, Attributes: attributes }),
    );
    if (!created.QueueUrl) throw new Error(`CreateQueue ${name} returned no URL`);
    return created.QueueUrl;
  };
  const dlq = await queueUrl("dlq");
  const dlqArn = (
    await plain.sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ["QueueArn"] }),
    )
  ).Attributes?.QueueArn;
  if (!dlqArn) throw new Error("DLQ has no ARN");
  const attributes = {
    VisibilityTimeout: "30",
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 5 }),
  };
  const queues: QueueUrls = {
    high: await queueUrl("high", attributes),
    normal: await queueUrl("normal", attributes),
    low: await queueUrl("low", attributes),
  };
  const doubled = await transactionsDoubled(plain, tables.jobs);
  const indexKeyAttributes = indexKeyAttributesOf(tables);
  const sides = Object.fromEntries(
    SIDES.map((side) => {
      const clients = clientsFor();
      const counter = new CallCounter();
      countDynamoDb(clients.dynamo, counter, {
        transactionsDoubled: doubled,
        indexKeyAttributes,
      });
      countSqs(clients.sqs, counter);
      return [side, { clients, counter }];
    }),
  ) as Record<Side, Counted>;
  return {
    plain,
    sides,
    tables,
    queues,
    transactionsDoubled: doubled,
    engine(side, settings = {}, clock = () => new Date()) {
      const { clients } = sides[side];
      return {
        doc: clients.doc,
        sqs: clients.sqs,
        tables,
        queues,
        settings: { ...DEFAULT_SETTINGS, ...settings },
        clock,
        random: Math.random,
        obs: { log: silentObservability.log, metrics: new MetricsRecorder() },
      };
    },
    destroy() {
      for (const c of [plain, ...SIDES.map((s) => sides[s].clients)]) {
        c.dynamo.destroy();
        c.sqs.destroy();
      }
    },
  };
}

export async function allRuns(h: Harness): Promise<Run[]> {
  const items: Record<string, unknown>[] = [];
  let startKey: Record<string, unknown> | undefined;
  do {
    const page = await h.plain.doc.send(
      new ScanCommand({
        TableName: h.tables.runs,
        ExclusiveStartKey: startKey,
        ConsistentRead: true,
      }),
    );
    items.push(...(page.Items ?? []));
    startKey = page.LastEvaluatedKey;
  } while (startKey);
  return items.map(decodeRun);
}

/** Waits until `done(runs)` holds for the given jobs' runs. */
async function waitFor(
  h: Harness,
  jobIds: ReadonlySet<string>,
  done: (runs: Run[]) => boolean,
  timeoutMs: number,
): Promise<Run[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const runs = (await allRuns(h)).filter((r) => jobIds.has(r.jobId));
    if (done(runs)) return runs;
    if (Date.now() > deadline) {
      const states = runs.map((r) => r.status).join(",");
      throw new Error(`runs did not finish within ${timeoutMs} ms (${runs.length}: ${states})`);
    }
    await sleep(250);
  }
}

/** The worker loop with the sandbox's options, until `until` resolves. */
async function withWorkerLoop<T>(engine: Engine, until: () => Promise<T>): Promise<T> {
  const stop = new AbortController();
  const deps: WorkerDeps = {
    engine,
    handlers: builtInHandlers(
      { signingSecrets: cachedSigningSecrets(engine), allowPrivateTargets: true },
      engine.clock,
    ),
    workerId: "bench-worker",
  };
  const loop = runWorkerLoop(deps, {
    concurrency: 16,
    signal: stop.signal,
    idleWaitSeconds: 0,
    idleSleepMs: 50,
  });
  try {
    return await until();
  } finally {
    stop.abort();
    await loop;
  }
}

const succeededOnce = (count: number) => (runs: Run[]) =>
  runs.filter((r) => r.status === "SUCCEEDED").length >= count &&
  runs.every((r) => r.status !== "QUEUED" && r.status !== "RUNNING");

export function noopJob(schedule: NewJob["schedule"], overrides: Partial<NewJob> = {}): NewJob {
  return {
    tenantId: "bench",
    name: "bench",
    type: "noop",
    schedule,
    payload: { bench: true },
    priority: "normal",
    timeoutSeconds: 60,
    policies: {
      retry: { maxAttempts: 5, initialDelayMs: 30_000, maxDelayMs: 3_600_000 },
      misfire: "fire_once",
      overlap: "skip",
      maxConcurrent: 1,
      inFlight: "skip",
    },
    ...overrides,
  };
}

function resetCounters(h: Harness, phase: string): void {
  for (const side of SIDES) {
    h.sides[side].counter.reset();
    h.sides[side].counter.phase = phase;
  }
}

function collect(h: Harness, phase: string, runs: number): OpPerRun[] {
  const ops: OpPerRun[] = [];
  for (const side of SIDES) {
    const snapshot = h.sides[side].counter.snapshot()[phase] ?? {};
    h.sides[side].counter.phase = null;
    for (const [op, c] of Object.entries(snapshot) as [string, OperationCount][]) {
      const billed = op.startsWith("SQS.") ? c.billedRequests : c.calls;
      ops.push({
        side,
        op,
        callsPerRun: billed / runs,
        unitsPerRun: c.capacityUnits / runs,
        indexUnitsPerRun: c.indexCapacityUnits / runs,
        estimatedUnitsPerRun: c.estimatedUnits / runs,
        emptyPerRun: c.empty / runs,
      });
    }
  }
  return ops.sort((a, b) => a.side.localeCompare(b.side) || a.op.localeCompare(b.op));
}

interface Measured {
  readonly ops: OpPerRun[];
  readonly dispatcherMs: number;
}

/**
 * The tick's reaper once the scenario's runs are past their deadlines (a lease after they were
 * due): it reads each run's index entry once and passes it. Scenarios whose clocks run ahead
 * of the machine's run after those on its clock, so that no pass's cursor lies ahead of a later
 * scenario's entries.
 */
async function reapPastDeadlines(h: Harness, clock: Clock = () => new Date()): Promise<void> {
  const now = new Date(clock().getTime() + DEFAULT_SETTINGS.leaseMs + 10_000);
  await reap(h.engine("reaper", {}, () => now));
}

/**
 * Creates n one-off jobs due 2 s after each create, 50 ms apart, while a worker loop runs them,
 * and waits until each has succeeded.
 */
async function oneOffsThroughWorker(
  h: Harness,
  n: number,
  overrides: Partial<NewJob>,
  timeoutMs: number,
): Promise<void> {
  const producer = h.engine("producer");
  const ids = new Set<string>();
  await withWorkerLoop(h.engine("worker"), async () => {
    for (let i = 0; i < n; i++) {
      const runAt = new Date(Date.now() + 2_000).toISOString();
      const { job } = await createJob(producer, noopJob({ runAt }, overrides));
      ids.add(job.jobId);
      await sleep(50);
    }
    return waitFor(h, ids, succeededOnce(n), timeoutMs);
  });
}

/** (a) one-off noop: create (fast path claims and sends at once) → worker. */
async function oneOffFastPath(h: Harness, n: number): Promise<Measured> {
  resetCounters(h, "a");
  await oneOffsThroughWorker(h, n, {}, 60_000);
  await reapPastDeadlines(h);
  return { ops: collect(h, "a", n), dispatcherMs: 0 };
}

/** Jobs per request in scenario (e): a full batch. */
const BATCH_SIZE = MAX_BATCH_JOBS;

/**
 * (e) one-off noop created through the batch create, 25 to a request, each due 2 s after its
 * batch is created (the fast path claims and sends them at once) → worker. Also returns the mean
 * time of a batch create, which stands for the API Lambda's duration of one batch request.
 */
async function oneOffBatchFastPath(h: Harness, n: number): Promise<Measured & { batchMs: number }> {
  resetCounters(h, "e");
  const producer = h.engine("producer");
  const ids = new Set<string>();
  const batchMs: number[] = [];
  await withWorkerLoop(h.engine("worker"), async () => {
    for (let i = 0; i < n; i += BATCH_SIZE) {
      const runAt = new Date(Date.now() + 2_000).toISOString();
      const items = Array.from({ length: Math.min(BATCH_SIZE, n - i) }, () => ({
        input: noopJob({ runAt }),
      }));
      const started = performance.now();
      const outcomes = await createJobs(producer, "bench", items);
      batchMs.push(performance.now() - started);
      for (const outcome of outcomes) {
        if (!("job" in outcome)) throw new Error(`a batch create failed: ${String(outcome.error)}`);
        ids.add(outcome.job.jobId);
      }
      await sleep(50);
    }
    return waitFor(h, ids, succeededOnce(n), 60_000);
  });
  await reapPastDeadlines(h);
  return {
    ops: collect(h, "e", n),
    dispatcherMs: 0,
    batchMs: batchMs.reduce((sum, ms) => sum + ms, 0) / Math.max(1, batchMs.length),
  };
}

/** (b) one-off due beyond the fast-path window, claimed by a dispatcher pass (clock moved ahead), plain claims on. */
async function oneOffDispatched(h: Harness, n: number): Promise<Measured> {
  resetCounters(h, "b");
  const settings = DEFAULT_SETTINGS;
  const created = Date.now();
  // Past the fast-path horizon (now + lookahead + 2 min) by a minute.
  const runAt = new Date(Math.ceil((created + settings.lookaheadMs + 3 * MINUTE) / 1000) * 1000);
  const producer = h.engine("producer");
  const ids = new Set<string>();
  for (let i = 0; i < n; i++) {
    const { job } = await createJob(producer, noopJob({ runAt: runAt.toISOString() }));
    ids.add(job.jobId);
  }
  // The dispatcher and the worker live 4 s before runAt: the pass claims, SQS delays ~4 s for real.
  const offset = runAt.getTime() - 4_000 - Date.now();
  const future: Clock = () => new Date(Date.now() + offset);
  // The claims as plain writes (`oneOffClaimWrites: "plain"`), which a deployment turns on once no
  // earlier version runs (docs/deploy.md): the default transaction costs 2 write units more a run.
  const dispatcher = h.engine("dispatcher", { oneOffClaimWrites: "plain" }, future);
  let dispatcherMs = 0;
  await withWorkerLoop(h.engine("worker", {}, future), async () => {
    const started = performance.now();
    for (let shard = 0; shard < settings.maxShardCount; shard++) {
      await dispatchShard(dispatcher, shard, "bench-dispatcher");
    }
    dispatcherMs = performance.now() - started;
    return waitFor(h, ids, succeededOnce(n), 60_000);
  });
  await reapPastDeadlines(h, future);
  return { ops: collect(h, "b", n), dispatcherMs: dispatcherMs / n };
}

/**
 * (c) recurring, every minute, steady state, with the default settings: one dispatcher pass per
 * shard per minute, then the worker. A virtual clock steps a minute at a time (each step 1 s
 * after an occurrence), and the dispatcher's messages wait out their SQS delays on that clock
 * (bench/virtual-delays.ts). A claim queues the occurrences of the next 14 minutes, so the
 * measured minutes are whole claim cycles: the first claim (at the first step) and the
 * minutes up to the next one are a warm-up, not counted.
 */
async function recurringSteadyState(h: Harness, jobs: number, minutes: number): Promise<Measured> {
  let offset = 0;
  const virtual: Clock = () => new Date(Date.now() + offset);
  const now = Date.now();
  // First occurrence 10 min out: beyond the fast path, so creation claims nothing.
  const startAt = new Date(Math.ceil((now + 10 * MINUTE) / MINUTE) * MINUTE);
  h.sides.producer.counter.phase = null;
  const producer = h.engine("producer", {}, virtual);
  const ids = new Set<string>();
  for (let i = 0; i < jobs; i++) {
    const { job } = await createJob(
      producer,
      noopJob({ every: "PT1M", startAt: startAt.toISOString() }),
    );
    ids.add(job.jobId);
  }
  const dispatcher = h.engine("dispatcher", {}, virtual);
  const worker = h.engine("worker", {}, virtual);
  const reaper = h.engine("reaper", {}, virtual);
  const delays = holdDelayedSends(h.sides.dispatcher.clients.sqs, h.plain.sqs, virtual);
  let dispatcherMs = 0;
  try {
    for (let step = 0; step < RECURRING_WARM_UP_MINUTES + minutes; step++) {
      offset = startAt.getTime() + step * MINUTE + 1_000 - Date.now();
      const counted = step >= RECURRING_WARM_UP_MINUTES;
      if (step === RECURRING_WARM_UP_MINUTES) resetCounters(h, "c");
      const started = performance.now();
      for (let shard = 0; shard < DEFAULT_SETTINGS.maxShardCount; shard++) {
        await dispatchShard(dispatcher, shard, "bench-dispatcher");
      }
      if (counted) dispatcherMs += performance.now() - started;
      await reap(reaper);
      await delays.release();
      const expected = jobs * (step + 1);
      const through = virtual().toISOString();
      await withWorkerLoop(worker, () =>
        waitFor(
          h,
          ids,
          (runs) =>
            runs.filter((r) => r.status === "SUCCEEDED" && r.scheduledFor <= through).length >=
            expected,
          60_000,
        ),
      );
    }
  } finally {
    delays.remove();
  }
  const runs = jobs * minutes;
  return { ops: collect(h, "c", runs), dispatcherMs: dispatcherMs / runs };
}

/**
 * With the default 300 s lookahead the first step's claim reaches 14 minutes ahead and the next
 * claim comes ten steps later (when the horizon, rounded to the end of its minute, passes it).
 */
const RECURRING_WARM_UP_MINUTES = 10;

/** (d) a run that fails once (retryable) and succeeds on attempt 2; one occurrence = one run. */
async function retriedRun(h: Harness, n: number): Promise<Measured> {
  resetCounters(h, "d");
  await oneOffsThroughWorker(
    h,
    n,
    {
      type: "fail",
      payload: { times: 1, retryable: true },
      policies: {
        retry: { maxAttempts: 3, initialDelayMs: 1_000, maxDelayMs: 2_000 },
        misfire: "fire_once",
        overlap: "skip",
        maxConcurrent: 1,
        inFlight: "skip",
      },
    },
    90_000,
  );
  await reapPastDeadlines(h);
  return { ops: collect(h, "d", n), dispatcherMs: 0 };
}

/**
 * The worker as Lambda runs it: a batch of up to ten records processed concurrently, then the
 * batch's acknowledgements. Times each batch (the billed duration of one invocation) and counts
 * its receives and deletes (what the event source does on Lambda).
 */
async function lambdaLikeBatches(h: Harness, n: number): Promise<RequestsResult["lambdaLike"]> {
  const producer = h.engine("producer");
  h.sides.producer.counter.phase = null;
  const dueAt = new Date(Math.ceil((Date.now() + 8_000) / 1000) * 1000);
  const ids = new Set<string>();
  for (let i = 0; i < n; i++) {
    const { job } = await createJob(producer, noopJob({ runAt: dueAt.toISOString() }));
    ids.add(job.jobId);
  }
  resetCounters(h, "lambda");
  const engine = h.engine("worker");
  const deps: WorkerDeps = {
    engine,
    handlers: builtInHandlers(
      { signingSecrets: cachedSigningSecrets(engine), allowPrivateTargets: true },
      engine.clock,
    ),
    workerId: "bench-lambda",
  };
  const batchMs: number[] = [];
  const sizes: number[] = [];
  let processed = 0;
  const deadline = Date.now() + 60_000;
  while (processed < n && Date.now() < deadline) {
    const batch = await receiveRuns(engine.sqs, h.queues.normal, { max: 10, waitSeconds: 1 });
    if (batch.length === 0) continue;
    const started = performance.now();
    const dispositions = await Promise.all(batch.map((r) => processRun(deps, r)));
    const acked = batch.filter((_, i) => dispositions[i] === "ack").map((r) => r.receiptHandle);
    await deleteMessages(engine.sqs, h.queues.normal, acked);
    batchMs.push(performance.now() - started);
    sizes.push(batch.length);
    processed += batch.length;
  }
  await waitFor(h, ids, succeededOnce(n), 30_000);
  const ops = collect(h, "lambda", n);
  const per = (op: string) => ops.find((o) => o.op === op)?.callsPerRun ?? 0;
  const sorted = [...batchMs].sort((a, b) => a - b);
  return {
    batches: batchMs.length,
    meanBatchSize: sizes.reduce((s, x) => s + x, 0) / Math.max(1, sizes.length),
    batchMsP50: percentile(sorted, 50),
    batchMsP95: percentile(sorted, 95),
    msPerRun: batchMs.reduce((s, x) => s + x, 0) / Math.max(1, processed),
    receivesPerRun: per("SQS.ReceiveMessage"),
    deletesPerRun: per("SQS.DeleteMessageBatch") + per("SQS.DeleteMessage"),
    visibilityChangesPerRun:
      per("SQS.ChangeMessageVisibility") + per("SQS.ChangeMessageVisibilityBatch"),
  };
}

/** One idle tick (every shard's pass over empty buckets, then the reaper): the fixed cost. */
async function idleTick(h: Harness): Promise<{ ops: OpPerRun[]; ms: number }> {
  const engine = h.engine("dispatcher");
  await tickOnce(engine, "bench-idle");
  resetCounters(h, "idle");
  const started = performance.now();
  await tickOnce(engine, "bench-idle");
  const ms = performance.now() - started;
  return { ops: collect(h, "idle", 1), ms };
}

/** Approximate stored size of a run item (DynamoDB: attribute names plus values, UTF-8). */
function itemBytes(item: unknown): number {
  if (item === null || item === undefined) return 1;
  if (typeof item === "string") return Buffer.byteLength(item);
  if (typeof item === "number") return 8;
  if (typeof item === "boolean") return 1;
  if (Array.isArray(item)) return 3 + item.reduce<number>((s, v) => s + itemBytes(v) + 1, 0);
  if (typeof item === "object") {
    return (
      3 + Object.entries(item).reduce((s, [k, v]) => s + Buffer.byteLength(k) + itemBytes(v) + 1, 0)
    );
  }
  return 0;
}

interface CostInputs {
  readonly prices: Record<string, number>;
  readonly workerBatchSize: number;
  readonly workerMemoryGb: number;
  readonly dispatcherMemoryGb: number;
  readonly apiMemoryGb: number;
  /** The worker's billed time per run: the Lambda-like batches' total time over the runs they held. */
  readonly workerMsPerRun: number;
  /** ChangeMessageVisibility requests per attempt the Lambda worker makes and the loop does not. */
  readonly lambdaVisibilityChangesPerAttempt: number;
  readonly runItemBytes: number;
  readonly retentionMonths: number;
}

function costPerMillion(
  perRun: ScenarioResult["perRun"],
  runItems: number,
  c: CostInputs,
): CostBreakdown {
  const p = (name: string) => price(c.prices, name);
  const M = 1e6;
  const dynamoOnDemand =
    (perRun.writeUnits * p("dynamodbOnDemandWritePerMillion") +
      perRun.readUnits * p("dynamodbOnDemandReadPerMillion")) *
    1;
  // Provisioned: a unit-hour buys 3,600 unit-seconds, of which 70 % are used.
  const perWriteUnit = p("dynamodbProvisionedWcuHour") / (3600 * 0.7);
  const perReadUnit = p("dynamodbProvisionedRcuHour") / (3600 * 0.7);
  const dynamoProvisioned70 =
    (perRun.writeUnits * perWriteUnit + perRun.readUnits * perReadUnit) * M;
  const historyStorage =
    ((runItems * c.runItemBytes) / 1e9) * c.retentionMonths * p("dynamodbStorageGbMonth") * M;
  // Lambda's event source: one receive and one DeleteMessageBatch per batch (assumption, see doc).
  const consumer = 2 / c.workerBatchSize;
  // The visibility changes the Lambda worker makes beyond the loop measured here (whose heartbeats'
  // are in sqsEngineRequests), as the Lambda-like pass measured them: none for a run that ends
  // before its first heartbeat; a delivery that fails, or comes again, makes one.
  const visibilityChanges = runItems * c.lambdaVisibilityChangesPerAttempt;
  const sqs =
    (perRun.sqsEngineRequests + visibilityChanges + consumer) * p("sqsStandardPerMillion");
  const workerInvocations = 1 / c.workerBatchSize;
  const workerGbs = c.workerMemoryGb * (c.workerMsPerRun / 1000);
  const dispatcherGbs = c.dispatcherMemoryGb * (perRun.dispatcherMs / 1000);
  const lambda =
    workerInvocations * p("lambdaRequestsPerMillion") +
    (workerGbs + dispatcherGbs) * p("lambdaArmGbSecond") * M;
  // One API request (API Gateway, a Lambda invocation and its duration) per create request,
  // spread over the runs a request creates (25 for a full batch).
  const apiGatewayAndLambda =
    perRun.apiRequestsPerRun *
    (p("apiGatewayHttpPerMillion") +
      p("lambdaRequestsPerMillion") +
      c.apiMemoryGb * (perRun.apiMsPerRequest / 1000) * p("lambdaArmGbSecond") * M);
  const common = historyStorage + sqs + lambda;
  return {
    dynamoOnDemand,
    dynamoProvisioned70,
    historyStorage,
    sqs,
    lambda,
    apiGatewayAndLambda,
    totalOnDemand: dynamoOnDemand + common,
    totalProvisioned70: dynamoProvisioned70 + common,
    eventBridgeScheduler: p("eventBridgeSchedulerPerMillion"),
  };
}

function summarize(ops: readonly OpPerRun[]) {
  let dynamoCalls = 0;
  let writeUnits = 0;
  let readUnits = 0;
  let sqsEngineRequests = 0;
  let sqsConsumerRequests = 0;
  let sqsEmptyReceives = 0;
  for (const o of ops) {
    const [service = "", operation = ""] = o.op.split(".");
    if (service === "DynamoDB") {
      dynamoCalls += o.callsPerRun;
      if (isReadOperation(operation)) readUnits += o.unitsPerRun;
      else writeUnits += o.unitsPerRun;
    } else if (operation === "ReceiveMessage" || operation.startsWith("DeleteMessage")) {
      sqsConsumerRequests += o.callsPerRun;
      sqsEmptyReceives += o.emptyPerRun;
    } else {
      sqsEngineRequests += o.callsPerRun;
    }
  }
  return {
    dynamoCalls,
    writeUnits,
    readUnits,
    sqsEngineRequests,
    sqsConsumerRequests,
    sqsEmptyReceives,
  };
}

const fmt = (n: number, digits = 2) => (Number.isFinite(n) ? n.toFixed(digits) : "–");

export function markdown(result: RequestsResult): string {
  const lines: string[] = [];
  lines.push(
    `## Requests and dollars per run (${result.measuredAt.slice(0, 10)}, ${result.target}, ${result.runsPerScenario} runs per scenario)`,
    "",
    "| scenario | DynamoDB calls | WRU | RRU | SQS engine req | SQS loop recv+del (empty) | $ DDB on-demand | $ DDB prov. 70% | $ history | $ SQS | $ Lambda | **$/M on-demand** | $/M provisioned | + API GW & API Lambda | EventBridge Scheduler |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  );
  for (const s of result.scenarios) {
    const r = s.perRun;
    const c = s.costPerMillion;
    lines.push(
      `| ${s.title} | ${fmt(r.dynamoCalls)} | ${fmt(r.writeUnits)} | ${fmt(r.readUnits)} | ${fmt(r.sqsEngineRequests)} | ${fmt(r.sqsConsumerRequests)} (${fmt(r.sqsEmptyReceives)}) | ${fmt(c.dynamoOnDemand)} | ${fmt(c.dynamoProvisioned70)} | ${fmt(c.historyStorage)} | ${fmt(c.sqs)} | ${fmt(c.lambda)} | **${fmt(c.totalOnDemand)}** | ${fmt(c.totalProvisioned70)} | ${c.apiGatewayAndLambda > 0 ? `+${fmt(c.apiGatewayAndLambda)}` : "–"} | ${fmt(c.eventBridgeScheduler)} |`,
    );
  }
  lines.push(
    "",
    "Per run; dollars per million runs (us-east-1 list prices from bench/prices.json, verify before relying). WRU/RRU are billed units: DynamoDB Local's reported capacity (table + GSIs); for a transaction, which DynamoDB Local reports as one item per table, what AWS bills for its items (2 units per item and KB, condition checks included, plus an index unit per index key a put carries or an update sets or removes; bench/aws-counter.ts transactionWriteUnits).",
    "",
    "### By operation (per run)",
    "",
    "| scenario | side | operation | calls (SQS: billed requests) | capacity units | of which GSI | empty receives |",
    "|---|---|---|---|---|---|---|",
  );
  for (const s of result.scenarios) {
    for (const o of s.ops) {
      lines.push(
        `| ${s.id} | ${o.side} | ${o.op} | ${fmt(o.callsPerRun, 3)} | ${o.op.startsWith("DynamoDB") ? fmt(o.unitsPerRun, 3) : ""} | ${o.op.startsWith("DynamoDB") ? fmt(o.indexUnitsPerRun, 3) : ""} | ${o.op === "SQS.ReceiveMessage" ? fmt(o.emptyPerRun, 3) : ""} |`,
      );
    }
  }
  const l = result.lambdaLike;
  const t = result.idleTick;
  lines.push(
    "",
    `Lambda-like worker (batch of ≤10 processed concurrently, then one DeleteMessageBatch): ${l.batches} batches, mean ${fmt(l.meanBatchSize, 1)} records, batch time p50 ${fmt(l.batchMsP50, 0)} ms / p95 ${fmt(l.batchMsP95, 0)} ms (${fmt(l.msPerRun, 1)} ms a run), ${fmt(l.receivesPerRun, 3)} receives, ${fmt(l.deletesPerRun, 3)} deletes and ${fmt(l.visibilityChangesPerRun, 3)} ChangeMessageVisibility per run.`,
    `Fixed cost, not per run: one idle tick (${DEFAULT_SETTINGS.maxShardCount} shard passes + reaper) = ${fmt(t.dynamoCalls, 0)} DynamoDB calls, ${fmt(t.writeUnits, 1)} WRU, ${fmt(t.readUnits, 1)} RRU, ${fmt(t.ms, 0)} ms here; about $${fmt(t.monthlyUsd)} per month at one tick a minute (DynamoDB on-demand + Lambda).`,
    `Run item ≈ ${result.runItemBytes} bytes.`,
    "",
    "Assumptions:",
    ...result.assumptions.map((a) => `- ${a}`),
  );
  return lines.join("\n");
}

export interface RequestsOptions {
  readonly runs?: number;
  readonly recurringMinutes?: number;
  readonly print?: (line: string) => void;
  /** Where results go; null writes nothing. */
  readonly resultsDir?: string | null;
  /** Only these scenarios (ids a–e); all when absent. A selection writes `requests-<ids>` files. */
  readonly scenarios?: readonly string[];
}

export async function runRequestsPerRun(options: RequestsOptions = {}): Promise<RequestsResult> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
  const print = options.print ?? ((line: string) => console.log(line));
  const n = options.runs ?? 50;
  const recurringMinutes = options.recurringMinutes ?? 30;
  const selected = options.scenarios ? new Set(options.scenarios) : null;
  const prices = loadPrices();
  const { startDynamoDbLocal, startSqsEmulator } = await import("../infra/sandbox/emulators.js");
  print("requests-per-run: starting DynamoDB Local and fauxqs…");
  const [dynamo, sqs] = await Promise.all([startDynamoDbLocal(), startSqsEmulator()]);
  const h = await createHarness(dynamo.endpoint, sqs.endpoint);
  try {
    // First, while the tables are empty: later scenarios leave recurring jobs' due entries behind.
    print("requests-per-run: an idle tick (fixed cost)…");
    const idle = await idleTick(h);
    const measured: {
      id: string;
      title: string;
      notes: string;
      runs: number;
      m: Measured;
      api: { requestsPerRun: number; msPerRequest: number };
    }[] = [];
    const wanted = (id: string) => selected === null || selected.has(id);
    // The create as the API Lambda runs it: scenario (a)'s producer time is not timed
    // separately; a create is 2–4 DynamoDB calls and a send, taken as 50 ms.
    const singleCreate = { requestsPerRun: 1, msPerRequest: 50 };
    const noApi = { requestsPerRun: 0, msPerRequest: 0 };
    // Scenarios on the machine's clock first, then those whose clocks run ahead (b, then c):
    // the reaper's cursor only moves forward. Printed in their letters' order.
    if (wanted("a")) {
      print(`requests-per-run: (a) ${n} one-off noop runs, fast path…`);
      measured.push({
        id: "a",
        title: "(a) one-off, fast path",
        notes: "create (transaction) → fast-path claim + send at once → worker loop",
        runs: n,
        m: await oneOffFastPath(h, n),
        api: singleCreate,
      });
    }
    if (wanted("d")) {
      print(`requests-per-run: (d) ${n} one-off runs that fail once and succeed on attempt 2…`);
      measured.push({
        id: "d",
        title: "(d) one-off, retried once",
        notes:
          "as (a), type fail {times: 1}: attempt 1 FAILED, attempt 2 QUEUED at once (fast path) and SUCCEEDED",
        runs: n,
        m: await retriedRun(h, n),
        api: singleCreate,
      });
    }
    if (wanted("e")) {
      print(
        `requests-per-run: (e) ${n} one-off noop runs, batch create of ${BATCH_SIZE}, fast path…`,
      );
      const e = await oneOffBatchFastPath(h, n);
      measured.push({
        id: "e",
        title: `(e) one-off, batch create of ${BATCH_SIZE}`,
        notes: `created ${BATCH_SIZE} to a batch (createJobs: BatchWriteItem of the runs, then of the jobs) → fast-path claim + send, ten to a message batch → worker loop; the API request is spread over the batch (its Lambda duration: the batch create's measured mean, ${Math.round(e.batchMs)} ms here)`,
        runs: n,
        m: e,
        api: { requestsPerRun: 1 / BATCH_SIZE, msPerRequest: e.batchMs },
      });
    }
    if (wanted("b")) {
      print(
        `requests-per-run: (b) ${n} one-off runs claimed by a dispatcher pass, oneOffClaimWrites plain…`,
      );
      measured.push({
        id: "b",
        title: "(b) one-off, dispatcher",
        notes: `created ${DEFAULT_SETTINGS.lookaheadMs / MINUTE + 3} min ahead (beyond the fast path), claimed by one pass over ${DEFAULT_SETTINGS.maxShardCount} shards with ${n} due entries (pass overhead included, amortized over ${n}); claims as plain writes (oneOffClaimWrites plain; the default, a transaction, bills 2 write units more a run)`,
        runs: n,
        m: await oneOffDispatched(h, n),
        api: singleCreate,
      });
    }
    if (wanted("c")) {
      print(
        `requests-per-run: (c) ${n} per-minute jobs, ${recurringMinutes} steady-state minutes…`,
      );
      measured.push({
        id: "c",
        title: "(c) recurring, per minute",
        notes: `${n} jobs every PT1M, ${recurringMinutes} steady-state minutes (whole claim cycles) after a ${RECURRING_WARM_UP_MINUTES}-minute warm-up; creation excluded; default settings, SQS delays on the virtual clock`,
        runs: n * recurringMinutes,
        m: await recurringSteadyState(h, n, recurringMinutes),
        api: noApi,
      });
    }
    measured.sort((x, y) => x.id.localeCompare(y.id));
    print("requests-per-run: Lambda-like batches (timing)…");
    const lambdaLike = await lambdaLikeBatches(h, n);
    const sampleRuns = (await allRuns(h)).filter((r) => r.status === "SUCCEEDED");
    const scanned = await h.plain.doc.send(
      new ScanCommand({ TableName: h.tables.runs, Limit: 50 }),
    );
    const sizes = (scanned.Items ?? []).map(itemBytes).sort((a, b) => a - b);
    const runItemBytes = Math.round(percentile(sizes, 50));
    if (sampleRuns.length === 0) throw new Error("no run succeeded");

    const inputs: CostInputs = {
      prices,
      workerBatchSize: 10,
      workerMemoryGb: 512 / 1024,
      dispatcherMemoryGb: 512 / 1024,
      apiMemoryGb: 512 / 1024,
      workerMsPerRun: lambdaLike.msPerRun,
      lambdaVisibilityChangesPerAttempt: lambdaLike.visibilityChangesPerRun,
      runItemBytes,
      retentionMonths: DEFAULT_SETTINGS.retentionDays / 30,
    };
    const idleSummary = summarize(idle.ops);
    const ticksPerMonth = 60 * 24 * 30;
    const idleMonthly =
      ticksPerMonth *
      (idleSummary.writeUnits * price(prices, "dynamodbOnDemandWritePerMillion") * 1e-6 +
        idleSummary.readUnits * price(prices, "dynamodbOnDemandReadPerMillion") * 1e-6 +
        (1 + DEFAULT_SETTINGS.maxShardCount) * price(prices, "lambdaRequestsPerMillion") * 1e-6 +
        0.5 * (idle.ms / 1000) * price(prices, "lambdaArmGbSecond"));
    const scenarios: ScenarioResult[] = measured.map(({ id, title, notes, runs, m, api }) => {
      const s = summarize(m.ops);
      const perRun: ScenarioResult["perRun"] = {
        ...s,
        workerMs: lambdaLike.msPerRun,
        dispatcherMs: m.dispatcherMs,
        viaApi: api.requestsPerRun > 0,
        apiRequestsPerRun: api.requestsPerRun,
        apiMsPerRequest: api.msPerRequest,
      };
      // A retried run leaves two run items (attempts 1 and 2) in the history.
      return {
        id,
        title,
        runs,
        notes,
        ops: m.ops,
        perRun,
        costPerMillion: costPerMillion(perRun, id === "d" ? 2 : 1, inputs),
      };
    });
    const result: RequestsResult = {
      measuredAt: new Date().toISOString(),
      target: "DynamoDB Local + fauxqs",
      runsPerScenario: n,
      capacity: {
        source: h.transactionsDoubled
          ? "ReturnConsumedCapacity INDEXES as reported by the endpoint"
          : "ReturnConsumedCapacity INDEXES as reported by DynamoDB Local (it includes GSI writes but bills transactions like plain writes); the table part of TransactWriteItems doubled here as AWS bills it; failed calls (no capacity reported) estimated at 1 unit per item, 2 in a transaction",
        transactionsDoubledByEndpoint: h.transactionsDoubled,
      },
      assumptions: [
        "Worker on Lambda: batch size 10 (infra/settings.ts workerBatchSize), 512 MB arm64 (infra/constructs/worker.ts); full batches. At low rates batches hold one record: add $0.18/M for invocations and up to 10× the consumer SQS requests.",
        "Worker duration: the Lambda-like batches' total time over the runs they held, measured here against DynamoDB Local (not AWS latencies): what Lambda bills a run on average, a run's wait for its early message included.",
        "SQS: the event source's ReceiveMessage and DeleteMessageBatch are billed as ordinary SQS requests: 2 per batch of 10 = 0.2 per run. The Lambda worker changes a message's visibility at each heartbeat (as the loop measured here does; counted with its requests), and otherwise only for a delivery that failed or came again: the ChangeMessageVisibility per run the Lambda-like pass made (see below) is priced per attempt on top. The sandbox loop's receives and deletes (the 'SQS loop' column) are shown but not priced. The event source's idle long polling is a fixed cost, not per run.",
        "DynamoDB provisioned at 70 %: unit-hour price / (3,600 s × 0.7), i.e. perfectly shaped capacity; spikes need headroom or on-demand.",
        "History: one run item (two for a retried run) kept for the retention (30 days ≈ 1 month) at the storage price; item size from the runs table here; a run's keys-only `inflight` index entry, which stays until the run expires (~220 B, ~$0.06 per million runs), and ended one-off jobs' items and `byTenant` entries, kept for the retention too, are not counted; the expiry itself is a DynamoDB TTL delete, which AWS makes without consuming write throughput, the item's index entries removed with it (only a global table's replicated TTL deletes are billed); PITR backup storage not counted.",
        "Dispatcher Lambda time per run is the pass time measured here divided by the runs it claimed (512 MB); its invocations are fixed per tick, not per run.",
        "API Gateway HTTP API and the API Lambda (512 MB; 50 ms assumed for a single create, the measured mean of a batch create for a batch) are priced separately ('+ API' column) for runs created over HTTP: one create per one-off run, one request per 25 runs through a full batch (e); recurring runs have none.",
        "EventBridge Scheduler: $1.00 per million invocations, no run history, 1-minute precision; its target's own costs are not included there either.",
      ],
      lambdaLike,
      runItemBytes,
      idleTick: {
        dynamoCalls: idleSummary.dynamoCalls,
        writeUnits: idleSummary.writeUnits,
        readUnits: idleSummary.readUnits,
        ms: idle.ms,
        monthlyUsd: idleMonthly,
      },
      prices,
      scenarios,
    };
    const table = markdown(result);
    print(table);
    if (options.resultsDir !== null) {
      // A selection does not overwrite the day's full run.
      const name = selected ? `requests-${[...selected].sort().join("")}` : "requests";
      const base = await writeResults(options.resultsDir, result.measuredAt, name, {
        json: `${JSON.stringify(result, null, 2)}\n`,
        md: `${table}\n`,
      });
      print(`wrote ${base}.json and .md`);
    }
    return result;
  } finally {
    h.destroy();
    await Promise.all([dynamo.stop(), sqs.stop()]);
  }
}

/** `BENCH_SCENARIOS=a,e`: only those scenarios (the idle tick and the Lambda-like timing always run). */
export function scenarioSelection(): { scenarios?: string[] } {
  const raw = process.env.BENCH_SCENARIOS?.trim();
  if (!raw) return {};
  const ids = raw.split(",").map((id) => id.trim().toLowerCase());
  const unknown = ids.filter((id) => !["a", "b", "c", "d", "e"].includes(id));
  if (unknown.length > 0) throw new Error(`BENCH_SCENARIOS: no scenario ${unknown.join(", ")}`);
  return { scenarios: ids };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const values = benchArgs(import.meta.url, {
    runs: { type: "string", default: "50" },
    minutes: { type: "string", default: "30" },
  });
  await runRequestsPerRun({
    runs: Number(values.runs),
    recurringMinutes: Number(values.minutes),
    ...scenarioSelection(),
  });
}
