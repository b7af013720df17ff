import {
  GetQueueAttributesCommand,
  PurgeQueueCommand,
  ReceiveMessageCommand,
} from "@aws-sdk/client-sqs";
import { inject } from "vitest";
import { type Clock, offsetClock, sleep, systemClock } from "../../shared/clock.js";
import { DEFAULT_QUOTAS, DEFAULT_SETTINGS, ENV, type EngineSettings } from "../../shared/config.js";
import type { Engine } from "../../shared/engine.js";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import type { JobHandler } from "../../shared/execution/job-contract.js";
import type { WorkerDeps } from "../../shared/execution/worker.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, type NewJob } from "../../shared/jobs/index.js";
import type { DueEntry, Job, Priority, Run } from "../../shared/model.js";
import {
  MetricsRecorder,
  type Observability,
  silentObservability,
} from "../../shared/observability.js";
import type { RunMessage } from "../../shared/queue/run-message.js";
import {
  decodeRunMessage,
  deleteMessages,
  type QueueUrls,
  type ReceivedRun,
  receiveRuns,
  setVisibility,
} from "../../shared/queue/work-queue.js";
import { decodeDueEntry, decodeJob, decodeRun, runMessageOf } from "../../shared/storage/items.js";
import { queuedRun } from "../../shared/storage/runs.js";
import {
  JOBS_TTL_ATTRIBUTE,
  jobsTableDefinition,
  RUNS_TTL_ATTRIBUTE,
  runsTableDefinition,
  webhookSecretsTableDefinition,
} from "../../shared/storage/tables.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import { recordDelayedSends } from "./delayed-sends.js";
import {
  createQueue,
  createTable,
  createTestClients,
  deleteQueue,
  deleteTable,
  scanTable,
  testNamespace,
} from "./namespace.js";

export interface EngineFixture {
  readonly engine: Engine;
  readonly metrics: MetricsRecorder;
  readonly dlqUrl: string;
  /** A worker's dependencies with the built-in handlers plus any given. */
  workerDeps(
    workerId: string,
    extra?: Record<string, JobHandler>,
    heartbeatEveryMs?: number,
  ): WorkerDeps;
  /** Processes a delivery as the worker loop does: the message is deleted when the worker acknowledges it. */
  process(deps: WorkerDeps, received: ReceivedRun): Promise<"ack" | "keep">;
  /**
   * Waits for the next delivery of a message of `jobId` on a queue; others go to whoever waits for
   * them, or back once this wait ends.
   */
  nextDelivery(queueUrl: string, jobId: string, timeoutMs?: number): Promise<ReceivedRun>;
  /**
   * Waits for the next delivery of this run (its occurrence and attempt) on the normal queue; its
   * job's other messages (a retry due meanwhile, the next occurrence) go to whoever waits for
   * them, or back once this wait ends.
   */
  nextDeliveryOfRun(run: Pick<Run, "jobId" | "scheduledFor" | "attempt">): Promise<ReceivedRun>;
  dueEntries(): Promise<DueEntry[]>;
  jobs(): Promise<ReturnType<typeof decodeJob>[]>;
  runs(): Promise<Run[]>;
  /**
   * Receives from one queue, without deleting: until it stays empty for `quietMs`; without it,
   * what the queue holds now (what a claim, tick or reaper sent is in the queue when it returns,
   * so one empty receive finds it all) and, when a message is still in its SQS delay (a run due
   * within a second of the engine's clock when it was sent), on until it stays empty 1.5 s, or
   * until it holds no message, visible or delayed, after 100 ms of quiet, whichever comes first;
   * not when every delayed message is one the engine sent and comes later than those 1.5 s.
   */
  receiveAll(
    queueUrl: string,
    options?: { quietMs?: number; visibilitySeconds?: number },
  ): Promise<ReceivedRun[]>;
  queueDepth(queueUrl: string): Promise<{ visible: number; delayed: number; inFlight: number }>;
  purge(): Promise<void>;
  destroy(): Promise<void>;
}

/** How long a receive of what was sent before it waits for no more messages: it only ends the receive. */
const SENT_QUIET_MS = 100;
/** How long it waits when a message is in its SQS delay: a run due within a second becomes visible. */
const DELAYED_QUIET_MS = 1500;

export interface FixtureOptions {
  readonly settings?: Partial<EngineSettings>;
  readonly clock?: Clock;
  readonly random?: () => number;
  /** Deliveries before SQS moves a message to the DLQ. */
  readonly maxReceiveCount?: number;
  readonly queueVisibilitySeconds?: number;
  readonly obs?: Observability;
}

/** Fresh tables, three work queues and a redrive DLQ under a random prefix, and an engine over them. */
export async function createEngineFixture(options: FixtureOptions = {}): Promise<EngineFixture> {
  const clients = createTestClients({ maxSockets: 64 });
  const delayedSends = recordDelayedSends(clients.sqs);
  const ns = testNamespace();
  const jobsTable = await createTable(clients.dynamo, jobsTableDefinition(ns.name("jobs")), {
    timeToLiveAttribute: JOBS_TTL_ATTRIBUTE,
  });
  const runsTable = await createTable(clients.dynamo, runsTableDefinition(ns.name("runs")), {
    timeToLiveAttribute: RUNS_TTL_ATTRIBUTE,
  });
  const secretsTable = await createTable(
    clients.dynamo,
    webhookSecretsTableDefinition(ns.name("webhook-secrets")),
  );
  const dlq = await createQueue(clients.sqs, ns.name("dlq"));
  const redrive = JSON.stringify({
    deadLetterTargetArn: dlq.arn,
    maxReceiveCount: options.maxReceiveCount ?? 5,
  });
  const queueAttributes = {
    VisibilityTimeout: String(options.queueVisibilitySeconds ?? 30),
    RedrivePolicy: redrive,
  };
  const [high, normal, low] = await Promise.all(
    (["high", "normal", "low"] as const).map((p) =>
      createQueue(clients.sqs, ns.name(p), queueAttributes),
    ),
  );
  if (!high || !normal || !low) throw new Error("queue creation failed");
  const queues: QueueUrls = { high: high.url, normal: normal.url, low: low.url };
  const metrics = new MetricsRecorder();
  const engine: Engine = {
    doc: clients.doc,
    sqs: clients.sqs,
    tables: { jobs: jobsTable, runs: runsTable, webhookSecrets: secretsTable },
    queues,
    settings: {
      ...DEFAULT_SETTINGS,
      ...(options.maxReceiveCount ? { maxReceiveCount: options.maxReceiveCount } : {}),
      ...options.settings,
    },
    clock: options.clock ?? systemClock,
    random: options.random ?? Math.random,
    obs: { log: (options.obs ?? silentObservability).log, metrics },
  };

  const scanAll = (table: string) => scanTable(clients.doc, table);
  /**
   * Receives from one queue until it stays empty for `quietMs`, without deleting; with `settled`,
   * also once it has stayed empty SENT_QUIET_MS and `settled` answers true.
   */
  const receiveUntilQuiet = async (
    queueUrl: string,
    quietMs: number,
    visibilitySeconds: number,
    settled?: () => Promise<boolean>,
  ): Promise<ReceivedRun[]> => {
    const received: ReceivedRun[] = [];
    let quietSince = Date.now();
    while (Date.now() - quietSince < quietMs) {
      if (settled && Date.now() - quietSince >= SENT_QUIET_MS && (await settled())) break;
      const result = await clients.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 0,
          VisibilityTimeout: visibilitySeconds,
          MessageSystemAttributeNames: ["ApproximateReceiveCount"],
        }),
      );
      const messages = result.Messages ?? [];
      if (messages.length > 0) quietSince = Date.now();
      else await sleep(100);
      for (const m of messages) {
        const message = decodeRunMessage(m.Body);
        if (message && m.ReceiptHandle && m.MessageId) {
          received.push({
            message,
            queueUrl,
            receiptHandle: m.ReceiptHandle,
            messageId: m.MessageId,
            receiveCount: Number(m.Attributes?.ApproximateReceiveCount ?? "1"),
          });
        }
      }
    }
    return received;
  };
  const queueDepth: EngineFixture["queueDepth"] = async (queueUrl) => {
    const { Attributes = {} } = await clients.sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: queueUrl,
        AttributeNames: [
          "ApproximateNumberOfMessages",
          "ApproximateNumberOfMessagesDelayed",
          "ApproximateNumberOfMessagesNotVisible",
        ],
      }),
    );
    return {
      visible: Number(Attributes.ApproximateNumberOfMessages ?? 0),
      delayed: Number(Attributes.ApproximateNumberOfMessagesDelayed ?? 0),
      inFlight: Number(Attributes.ApproximateNumberOfMessagesNotVisible ?? 0),
    };
  };
  /**
   * Callers waiting for a delivery, each for the messages it wants on one queue. A message one
   * caller receives for another goes to that caller rather than back to the queue: each receive
   * counts towards the redrive, and a message received five times goes to the DLQ. A case busy
   * elsewhere while its message is visible is not helped (no one waits for it): cases side by
   * side whose messages come back meanwhile need queues of their own (caseFixture).
   */
  interface Waiter {
    readonly queueUrl: string;
    readonly wants: (message: RunMessage) => boolean;
    readonly inbox: ReceivedRun[];
  }
  const waiters: Waiter[] = [];
  const waiterFor = (received: ReceivedRun) =>
    waiters.find((w) => w.queueUrl === received.queueUrl && w.wants(received.message));
  const handOverOrPutBack = async (received: ReceivedRun) => {
    const waiter = waiterFor(received);
    if (waiter) waiter.inbox.push(received);
    else await setVisibility(engine.sqs, received.queueUrl, received.receiptHandle, 0);
  };
  const deliveryWanted = async (
    queueUrl: string,
    wants: (message: RunMessage) => boolean,
    what: string,
    timeoutMs: number,
  ): Promise<ReceivedRun> => {
    const me: Waiter = { queueUrl, wants, inbox: [] };
    waiters.push(me);
    // Messages no caller wants yet stay received until this wait ends: put back, they would come
    // straight back to this wait's next receive, each time counting towards the redrive.
    let held: ReceivedRun[] = [];
    const deadline = Date.now() + timeoutMs;
    let mine: ReceivedRun | undefined;
    try {
      while (Date.now() < deadline && !mine) {
        const batch =
          me.inbox.length > 0
            ? []
            : await receiveRuns(engine.sqs, queueUrl, { max: 10, waitSeconds: 1 });
        mine = me.inbox.shift() ?? batch.find((r) => wants(r.message));
        // Those held for no one before may have a caller since.
        const others = [...held, ...batch.filter((r) => r !== mine)];
        held = [];
        for (const received of others) {
          const waiter = waiterFor(received);
          if (waiter) waiter.inbox.push(received);
          else held.push(received);
        }
      }
    } finally {
      waiters.splice(waiters.indexOf(me), 1);
    }
    // What was handed over after this caller's own message came, and what it held: to the next
    // caller, or back.
    await Promise.all([...me.inbox, ...held].map(handOverOrPutBack));
    if (mine) return mine;
    const [depth, dlqDepth] = await Promise.all([queueDepth(queueUrl), queueDepth(dlq.url)]);
    throw new Error(
      `no delivery for ${what} within ${timeoutMs} ms (queue ${JSON.stringify(depth)}, DLQ ${JSON.stringify(dlqDepth)})`,
    );
  };
  const nextDelivery: EngineFixture["nextDelivery"] = (queueUrl, jobId, timeoutMs = 20_000) =>
    deliveryWanted(queueUrl, (m) => m.jobId === jobId, `job ${jobId}`, timeoutMs);

  return {
    engine,
    metrics,
    dlqUrl: dlq.url,
    workerDeps(workerId, extra = {}, heartbeatEveryMs) {
      const handlers = new Map([
        ...builtInHandlers(
          { signingSecrets: cachedSigningSecrets(engine), allowPrivateTargets: true },
          engine.clock,
        ),
        ...Object.entries(extra),
      ]);
      return { engine, handlers, workerId, ...(heartbeatEveryMs ? { heartbeatEveryMs } : {}) };
    },
    async process(deps, received) {
      const disposition = await processRun(deps, received);
      if (disposition === "ack")
        await deleteMessages(engine.sqs, received.queueUrl, [received.receiptHandle]);
      return disposition;
    },
    nextDelivery,
    nextDeliveryOfRun: ({ jobId, scheduledFor, attempt }) =>
      deliveryWanted(
        engine.queues.normal,
        (m) => m.jobId === jobId && m.scheduledFor === scheduledFor && m.attempt === attempt,
        `job ${jobId}'s run at ${scheduledFor}, attempt ${attempt}`,
        20_000,
      ),
    async dueEntries() {
      return (await scanAll(jobsTable))
        .filter((i) => String(i.pk).startsWith("DUE#"))
        .map(decodeDueEntry);
    },
    async jobs() {
      return (await scanAll(jobsTable))
        .filter((i) => String(i.pk).startsWith("JOB#"))
        .map(decodeJob);
    },
    async runs() {
      return (await scanAll(runsTable)).map(decodeRun);
    },
    async receiveAll(queueUrl, { quietMs, visibilitySeconds = 60 } = {}) {
      if (quietMs !== undefined) return receiveUntilQuiet(queueUrl, quietMs, visibilitySeconds);
      const received = await receiveUntilQuiet(queueUrl, SENT_QUIET_MS, visibilitySeconds);
      const { delayed } = await queueDepth(queueUrl);
      // A message whose delay outlasts the wait (a recheck 5 s on, a retry's backoff) would not
      // come within it: the wait is for those that come sooner, or that another client sent.
      if (delayed > 0 && !delayedSends.allLaterThan(queueUrl, delayed, DELAYED_QUIET_MS)) {
        // Until the queue holds no message, visible or in its delay: the delayed one has come.
        const emptied = async () => {
          const { visible, delayed } = await queueDepth(queueUrl);
          return visible === 0 && delayed === 0;
        };
        received.push(
          ...(await receiveUntilQuiet(queueUrl, DELAYED_QUIET_MS, visibilitySeconds, emptied)),
        );
      }
      return received;
    },
    queueDepth,
    async purge() {
      delayedSends.clear();
      await Promise.all(
        Object.values(queues).map((url) =>
          clients.sqs.send(new PurgeQueueCommand({ QueueUrl: url })),
        ),
      );
    },
    async destroy() {
      await Promise.all([
        deleteTable(clients.dynamo, jobsTable),
        deleteTable(clients.dynamo, runsTable),
        deleteTable(clients.dynamo, secretsTable),
        ...[...Object.values(queues), dlq.url].map((url) => deleteQueue(clients.sqs, url)),
      ]);
      clients.destroy();
    },
  };
}

/**
 * A fixture of the case's own, destroyed when the case ends (`atEnd` is the case's
 * `onTestFinished`): cases side by side cannot share tables and queues, since one's receive would
 * take another's message and a purge would empty a neighbour's tables.
 */
export async function caseFixture(
  atEnd: (cleanup: () => Promise<void>) => void,
  options: FixtureOptions = {},
): Promise<EngineFixture> {
  const f = await createEngineFixture(options);
  atEnd(() => f.destroy());
  return f;
}

/** A clock running `offsetMs` ahead of the machine's; a case moves it on by setting `offsetMs`. */
export interface ShiftedClock {
  offsetMs: number;
  readonly clock: Clock;
}

/** A clock of a case's own, starting at the machine's. */
export function shiftedClock(): ShiftedClock {
  const shifted: ShiftedClock = {
    offsetMs: 0,
    clock: () => new Date(Date.now() + shifted.offsetMs),
  };
  return shifted;
}

/** The engine with its clock at `instant` (epoch ms), running on from there. */
export const engineAt = (engine: Engine, instant: number): Engine => ({
  ...engine,
  clock: offsetClock(instant - Date.now()),
});

/**
 * The environment a deployed function reads (`engineFromEnv`), naming this engine's tables and
 * queues on the emulators, its logs silenced: for a test that imports a handler as deployed.
 */
export function deployedEnvironment(engine: Engine): Record<string, string> {
  return {
    [ENV.jobsTable]: engine.tables.jobs,
    [ENV.runsTable]: engine.tables.runs,
    [ENV.webhookSecretsTable]: engine.tables.webhookSecrets,
    [ENV.queueHigh]: engine.queues.high,
    [ENV.queueNormal]: engine.queues.normal,
    [ENV.queueLow]: engine.queues.low,
    AWS_ENDPOINT_URL_DYNAMODB: inject("dynamoEndpoint"),
    AWS_ENDPOINT_URL_SQS: inject("sqsEndpoint"),
    POWERTOOLS_LOG_LEVEL: "SILENT",
  };
}

/**
 * One delivery of `run`'s message, made by hand rather than received from its queue: received
 * once, with a lease-sized visibility.
 */
export function deliveryOfRun(engine: Engine, run: Run): ReceivedRun {
  return {
    message: runMessageOf(run),
    queueUrl: engine.queues[run.priority],
    receiptHandle: "delivered-in-test",
    messageId: `m-${run.runId}`,
    receiveCount: 1,
    visibilitySeconds: engine.settings.leaseMs / 1000,
  };
}

/**
 * A daily cron at the UTC hour twelve hours from `at`: a schedule with no occurrence near it, for
 * an edit whose new schedule must not decide anything around the edit.
 */
export function dailyAwayFrom(at: Date | number): {
  readonly hour: number;
  readonly schedule: { readonly cron: string; readonly timezone: string };
} {
  const hour = (new Date(at).getUTCHours() + 12) % 24;
  return { hour, schedule: { cron: `0 ${hour} * * *`, timezone: "UTC" } };
}

/**
 * Fresh tables and an engine with the default quotas that reads a tenant's override afresh on
 * every request (no override cache), as the quota tests set a limit and create against it at once.
 */
export const createQuotaFixture = (): Promise<EngineFixture> =>
  createEngineFixture({ settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0 } });

/** A tenant's one-off due an hour from now: an active job that no run ends while a test lasts. */
export const farJob = (tenantId: string) =>
  testJob({ tenantId, schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() } });

/** A job definition for tests, with the design's defaults. */
export function testJob(overrides: Partial<NewJob> = {}) {
  return {
    tenantId: "tenant-a",
    name: "test job",
    type: "noop",
    schedule: { cron: "* * * * *", timezone: "UTC" },
    payload: { hello: "world" },
    priority: "normal" as Priority,
    timeoutSeconds: 60,
    policies: {
      retry: { maxAttempts: 5, initialDelayMs: 30_000, maxDelayMs: 3_600_000 },
      misfire: "fire_once" as const,
      overlap: "skip" as const,
      maxConcurrent: 1,
      inFlight: "skip" as const,
    },
    ...overrides,
  };
}

/**
 * `testJob` as a create at `at` stores it, with no run, no pending occurrence and no job after it:
 * for a case that builds its jobs without the engine, changed as it needs.
 */
export function storedJob(jobId: string, at: Date, overrides: Partial<NewJob> = {}): Job {
  return {
    ...testJob(overrides),
    jobId,
    status: "ACTIVE",
    version: 1,
    nextRunAt: null,
    nextDueKey: null,
    createdAt: at.toISOString(),
    updatedAt: at.toISOString(),
    activeRuns: {},
    activeRevision: 0,
    bufferedRunId: null,
    parkedRuns: {},
    lastRun: null,
    dependents: [],
  };
}

/**
 * Attempt 1 of the job's occurrence at `at`, QUEUED, as a claim puts it (`queuedRun`): for a case
 * that writes a job's runs straight into the table, changed as it needs (FAILED, DEAD, ...).
 */
export function firstAttemptAt(engine: Engine, job: Job, at: Date) {
  return queuedRun(
    {
      jobId: job.jobId,
      tenantId: job.tenantId,
      scheduledFor: at,
      dueAt: at,
      attempt: 1,
      priority: job.priority,
      jobVersion: job.version,
    },
    at,
    engine.settings,
  );
}

/**
 * A job whose first run failed for good: created from `overrides` over a one-off due now whose
 * built-in `fail` handler fails once, not retryable, and its first delivery processed, which ends
 * the run DEAD (and a one-off's job COMPLETED).
 */
export async function jobWithDeadRun(
  f: EngineFixture,
  overrides: Partial<NewJob> = {},
): Promise<{ job: Job; dead: Run }> {
  const { job } = await createJob(
    f.engine,
    testJob({
      type: "fail",
      payload: { times: 1, retryable: false },
      schedule: { runAt: new Date().toISOString() },
      ...overrides,
    }),
  );
  await f.process(
    f.workerDeps("w"),
    await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000),
  );
  const dead = (await f.runs()).find((run) => run.jobId === job.jobId && run.status === "DEAD");
  if (!dead) throw new Error(`the first run of job ${job.jobId} did not end DEAD`);
  return { job, dead };
}

/**
 * A job whose first run failed with a retryable error, its retry a due entry about an hour out:
 * its `fail` handler fails once, the backoff an hour, jittered near its top (the engine's random
 * at 0.99), so that the entry waits for the dispatcher rather than the claim's lookahead.
 */
export async function jobWithRetryDue(f: EngineFixture): Promise<{ job: Job; retry: DueEntry }> {
  const hourMs = 3_600_000;
  const { job } = await createJob(
    f.engine,
    testJob({
      type: "fail",
      payload: { times: 1, retryable: true },
      schedule: { runAt: new Date().toISOString() },
      policies: {
        ...testJob().policies,
        retry: { maxAttempts: 3, initialDelayMs: hourMs, maxDelayMs: hourMs },
      },
    }),
  );
  const deps = { ...f.workerDeps("w"), engine: { ...f.engine, random: () => 0.99 } };
  await f.process(deps, await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000));
  const retry = (await f.dueEntries()).find((d) => d.jobId === job.jobId);
  if (!retry) throw new Error(`job ${job.jobId} has no due entry after its first run`);
  return { job, retry };
}
