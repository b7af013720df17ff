import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENV } from "../../shared/config.js";
import { processRun } from "../../shared/execution/worker.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob } from "../../shared/jobs/index.js";
import { runId } from "../../shared/keys.js";
import { type Logger, silentObservability } from "../../shared/observability.js";
import { keepCompletedJobForWaitingRun } from "../../shared/storage/job-status.js";
import {
  createEngineFixture,
  deliveryOfRun,
  deployedEnvironment,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import { withFaults, withSqsFaults } from "../support/faults.js";
import { lambdaContext, sqsEvent } from "../support/lambda-events.js";
import { createTestClients, type TestClients } from "../support/namespace.js";
import { upstreamWithDependent } from "../support/triggered-instant.js";
import { waitFor } from "../support/wait.js";

/**
 * The lines an operator follows a failing run by: a delivery the worker could not process (its
 * storage failed, or its tables are not the ones it was deployed with) and a crashed run the DLQ
 * consumer could not record. Each names the run as the rest of its lines do (`tenantId`,
 * `jobId`, `runId`, `attempt`), so one query over the log groups finds all of them; an SQS
 * message id names nothing the operator can look up.
 */
const RUN_MESSAGE = {
  jobId: "01J9Z3V6K8N4QX2M7R5T0W1Y3B",
  scheduledFor: "2026-03-01T12:00:00.000Z",
  dueAt: "2026-03-01T12:00:00.000Z",
  attempt: 2,
  jobVersion: 1,
  priority: "normal",
  tenantId: "tenant-a",
};
const RUN_KEYS = {
  tenantId: RUN_MESSAGE.tenantId,
  jobId: RUN_MESSAGE.jobId,
  runId: runId(RUN_MESSAGE.jobId, RUN_MESSAGE.scheduledFor, RUN_MESSAGE.attempt),
  attempt: RUN_MESSAGE.attempt,
};

/**
 * Each JSON line a call writes to stdout and stderr (Powertools writes its errors there), as
 * Lambda hands them to CloudWatch Logs.
 */
async function linesWrittenBy(call: () => Promise<unknown>): Promise<Record<string, unknown>[]> {
  const written: string[] = [];
  const streams = [process.stdout, process.stderr];
  const writes = streams.map((stream) => stream.write.bind(stream));
  streams.forEach((stream, index) => {
    stream.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
      written.push(String(chunk));
      return writes[index]?.(chunk, ...rest) ?? true;
    }) as typeof stream.write;
  });
  try {
    await call();
  } finally {
    streams.forEach((stream, index) => {
      const write = writes[index];
      if (write) stream.write = write;
    });
  }
  return written
    .flatMap((text) => text.split("\n"))
    .flatMap((line) => {
      try {
        const parsed: unknown = JSON.parse(line);
        return typeof parsed === "object" && parsed !== null
          ? [parsed as Record<string, unknown>]
          : [];
      } catch {
        return [];
      }
    });
}

describe("the deployed worker and DLQ consumer, their storage failing", () => {
  let fixture: EngineFixture;
  let worker: typeof import("../../functions/worker/handler.js").handler;
  let deadLetters: typeof import("../../functions/dlq/handler.js").handler;
  const saved = { ...process.env };

  beforeAll(async () => {
    fixture = await createEngineFixture();
    const { engine } = fixture;
    // Tables that are not there: every read of the run fails, as on a stack whose functions were
    // deployed with the wrong table names, or whose storage refuses them.
    Object.assign(process.env, deployedEnvironment(engine), {
      [ENV.jobsTable]: `${engine.tables.jobs}-gone`,
      [ENV.runsTable]: `${engine.tables.runs}-gone`,
      POWERTOOLS_LOG_LEVEL: "INFO",
      POWERTOOLS_METRICS_DISABLED: "true",
    });
    ({ handler: worker } = await import("../../functions/worker/handler.js"));
    ({ handler: deadLetters } = await import("../../functions/dlq/handler.js"));
  });

  afterAll(async () => {
    process.env = saved;
    await fixture.destroy();
  });

  const eventOf = (receiveCount: number) =>
    sqsEvent(
      `arn:aws:sqs:eu-central-1:123456789012:${fixture.engine.queues.normal.split("/").at(-1)}`,
      [
        {
          MessageId: "m-1",
          ReceiptHandle: "r-1",
          Body: JSON.stringify(RUN_MESSAGE),
          Attributes: { ApproximateReceiveCount: String(receiveCount) },
        },
      ],
    );
  const context = lambdaContext({
    functionName: "Scheduler-prod-Worker",
    region: "eu-central-1",
    account: "123456789012",
    timeoutSeconds: 900,
  });

  it("the worker's line for a delivery it could not process names the run", async () => {
    let answer: unknown;
    const lines = await linesWrittenBy(async () => {
      answer = await worker(eventOf(1), context);
    });
    expect(answer).toEqual({ batchItemFailures: [{ itemIdentifier: "m-1" }] });
    const failed = lines.filter((l) => String(l.message).startsWith("run failed to process"));
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ level: "ERROR", messageId: "m-1", ...RUN_KEYS });
    expect(String(failed[0]?.error)).toContain("ResourceNotFound");
  });

  it("the DLQ consumer's line for a crashed run it could not record names the run", async () => {
    let answer: unknown;
    const lines = await linesWrittenBy(async () => {
      answer = await deadLetters(eventOf(5));
    });
    expect(answer).toEqual({ batchItemFailures: [{ itemIdentifier: "m-1" }] });
    const failed = lines.filter((l) => l.message === "could not dead-letter run");
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ level: "ERROR", messageId: "m-1", ...RUN_KEYS });
  });
});

type LoggedLine = { message: string; fields: Record<string, unknown> };

/** A logger that keeps each line it is given in `lines`. */
function loggingInto(lines: LoggedLine[]): Logger {
  const keep = (message: string, fields: Record<string, unknown> = {}) =>
    void lines.push({ message, fields });
  return { debug: keep, info: keep, warn: keep, error: keep };
}

/** Clients whose DynamoDB requests naming `table` fail as DynamoDB's throttling does. */
function throttlingRequestsTo(table: string): TestClients {
  const clients = createTestClients();
  clients.doc.middlewareStack.add(
    (next) => async (args) => {
      if (JSON.stringify(args.input).includes(table))
        throw Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
          name: "ThrottlingException",
        });
      return next(args);
    },
    { step: "initialize", name: "throttled" },
  );
  return clients;
}

/** Asserts that a line's fields name the one run of `job` by the keys every line about a run has. */
async function expectNamesItsRun(
  f: EngineFixture,
  fields: Record<string, unknown> | undefined,
  job: { readonly tenantId: string; readonly jobId: string },
): Promise<void> {
  const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
  expect(fields).toMatchObject({
    tenantId: job.tenantId,
    jobId: job.jobId,
    runId: run?.runId,
    attempt: 1,
  });
}

describe("the worker loop, its storage failing", () => {
  const lines: LoggedLine[] = [];
  const capturing = loggingInto(lines);
  let f: EngineFixture;
  let throttled: TestClients;
  beforeAll(async () => {
    f = await createEngineFixture({ obs: { ...silentObservability, log: capturing } });
    // The runs table's requests fail; the tenant's quota (in the jobs table) is read, so the
    // delivery passes its gate and fails in its processing.
    throttled = throttlingRequestsTo(f.engine.tables.runs);
  });
  afterAll(async () => {
    throttled.destroy();
    await f.destroy();
  });

  /** Runs a worker loop on `doc` until it logs a line that starts with `prefix`. */
  async function loopLine(doc: TestClients["doc"], name: string, prefix: string) {
    const stop = new AbortController();
    const loop = runWorkerLoop(
      { ...f.workerDeps(name), engine: { ...f.engine, doc } },
      { concurrency: 1, signal: stop.signal, idleWaitSeconds: 0, idleSleepMs: 50 },
    );
    try {
      return await waitFor(
        `the loop's line "${prefix}…"`,
        async () => lines.find((l) => l.message.startsWith(prefix)),
        10_000,
      );
    } finally {
      stop.abort();
      await loop;
    }
  }

  it("its line for a delivery it could not process names the run", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const failed = await loopLine(throttled.doc, "throttled", "run processing failed");
    await expectNamesItsRun(f, failed.fields, job);
    expect(String(failed.fields.error)).toContain("Rate of requests");
  });

  it("its line for a delivery whose tenant's quota it could not read names the run", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    // The jobs table's reads fail: the tenant's quota is read there before the run is started.
    const quotaless = throttlingRequestsTo(f.engine.tables.jobs);
    try {
      const failed = await loopLine(
        quotaless.doc,
        "quotaless",
        "could not read the tenant's quota",
      );
      await expectNamesItsRun(f, failed.fields, job);
    } finally {
      quotaless.destroy();
    }
  });
});

/**
 * The worker's lines about a delivery it starts no run for, or whose message it could not hide
 * for a lease: the operator reads them when a run was delivered twice or came back late, and
 * finds them by the run's keys as every other line about it.
 */
describe("the worker's lines about a delivery's message", () => {
  const lines: LoggedLine[] = [];
  const capturing = loggingInto(lines);
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ obs: { ...silentObservability, log: capturing } });
  });
  afterAll(async () => {
    await f.destroy();
  });

  it("a delivery of a run that has ended names the run", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const deps = f.workerDeps("twice");
    await f.process(deps, await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000));
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    if (!run) throw new Error("no run");
    expect(run.status).toBe("SUCCEEDED");
    const before = lines.length;
    expect(await processRun(deps, deliveryOfRun(f.engine, run))).toBe("ack");
    const line = lines.slice(before).find((l) => l.message.startsWith("delivery of a run that"));
    expect(line?.fields).toMatchObject({
      tenantId: job.tenantId,
      jobId: job.jobId,
      runId: run.runId,
      attempt: 1,
    });
  });

  it("a redelivery whose message SQS will not hide for a lease names the run", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000);
    const before = lines.length;
    // Delivered before and received for longer than a lease (the Lambda event source's), under a
    // receipt handle SQS refuses.
    await processRun(f.workerDeps("redelivered"), {
      ...received,
      receiptHandle: "a-handle-sqs-never-gave",
      receiveCount: 2,
      visibilitySeconds: 900,
    });
    const line = lines.slice(before).find((l) => l.message.startsWith("could not set a message's"));
    await expectNamesItsRun(f, line?.fields, job);
  });
  it("an ending whose dependents' fan-out failed names the run that ended", async () => {
    const { job: upstream } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    await createJob(
      f.engine,
      testJob({ schedule: { after: { jobs: [upstream.jobId], on: "success" } } }),
    );
    // The dependent's run write (its TRIGGERED# record) refused: the entry waits for a pass.
    const refused = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: 1,
      match: (input) => JSON.stringify(input.TransactItems ?? []).includes('"sk":"TRIGGERED#'),
      reason: "ValidationError",
    });
    const before = lines.length;
    try {
      const received = await f.nextDelivery(f.engine.queues.normal, upstream.jobId, 15_000);
      expect(
        await f.process({ ...f.workerDeps("fan-out"), engine: refused.engine }, received),
      ).toBe("ack");
      expect(refused.injected.count).toBe(1);
    } finally {
      refused.destroy();
    }
    const line = lines.slice(before).find((l) => l.message.startsWith("could not fan a trigger"));
    await expectNamesItsRun(f, line?.fields, upstream);
  });
  it("a fan-out whose runs SQS refused names the upstream's tenant, job and run", async () => {
    const { upstream, dependent } = await upstreamWithDependent(f.engine);
    const received = await f.nextDelivery(f.engine.queues.normal, upstream.jobId, 15_000);
    const refused = withSqsFaults(f.engine, {
      operation: "SendMessageBatch",
      kind: "refuseEntries",
      times: 100,
    });
    const before = lines.length;
    try {
      await processRun({ ...f.workerDeps("fan-out-send"), engine: refused.engine }, received);
      expect(refused.injected.count).toBeGreaterThan(0);
    } finally {
      refused.destroy();
    }
    const line = lines.slice(before).find((l) => l.message.startsWith("a fan-out could not send"));
    const [run] = (await f.runs()).filter((r) => r.jobId === upstream.jobId);
    const [queued] = (await f.runs()).filter((r) => r.jobId === dependent.jobId);
    expect(line?.fields).toMatchObject({
      tenantId: upstream.tenantId,
      jobId: upstream.jobId,
      upstreamRunId: run?.runId,
      runs: [queued?.runId],
    });
  });

  it("a waiting run whose completed job could not be kept names the run", async () => {
    const broken = createTestClients();
    broken.doc.middlewareStack.add(
      () => async () => {
        throw Object.assign(new Error("Requested resource not found"), {
          name: "ResourceNotFoundException",
        });
      },
      { step: "initialize", name: "noTables" },
    );
    const run = {
      tenantId: "tenant-a",
      jobId: RUN_MESSAGE.jobId,
      scheduledFor: "2020-01-01T00:00:00.000Z",
      attempt: 3,
    };
    const before = lines.length;
    try {
      await keepCompletedJobForWaitingRun({ ...f.engine, doc: broken.doc }, run, new Date());
    } finally {
      broken.destroy();
    }
    const line = lines
      .slice(before)
      .find((l) => l.message.startsWith("could not keep a completed"));
    expect(line?.fields).toMatchObject({
      tenantId: run.tenantId,
      jobId: run.jobId,
      runId: runId(run.jobId, run.scheduledFor, run.attempt),
      attempt: run.attempt,
    });
  });
});
