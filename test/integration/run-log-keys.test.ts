import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENV } from "../../shared/config.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob } from "../../shared/jobs/index.js";
import { runId } from "../../shared/keys.js";
import { type Logger, silentObservability } from "../../shared/observability.js";
import {
  createEngineFixture,
  deployedEnvironment,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import { lambdaContext, sqsEvent } from "../support/lambda-events.js";
import { createTestClients, type TestClients } from "../support/namespace.js";
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

describe("the worker loop, its storage failing", () => {
  const lines: { message: string; fields: Record<string, unknown> }[] = [];
  const capturing: Logger = {
    debug: (message, fields = {}) => void lines.push({ message, fields }),
    info: (message, fields = {}) => void lines.push({ message, fields }),
    warn: (message, fields = {}) => void lines.push({ message, fields }),
    error: (message, fields = {}) => void lines.push({ message, fields }),
  };
  let f: EngineFixture;
  let throttled: TestClients;
  beforeAll(async () => {
    f = await createEngineFixture({ obs: { ...silentObservability, log: capturing } });
    throttled = createTestClients();
    // The runs table's requests fail; the tenant's quota (in the jobs table) is read, so the
    // delivery passes its gate and fails in its processing.
    throttled.doc.middlewareStack.add(
      (next) => async (args) => {
        if (JSON.stringify(args.input).includes(f.engine.tables.runs))
          throw Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
            name: "ThrottlingException",
          });
        return next(args);
      },
      { step: "initialize", name: "throttledRuns" },
    );
  });
  afterAll(async () => {
    throttled.destroy();
    await f.destroy();
  });

  it("its line for a delivery it could not process names the run", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const stop = new AbortController();
    const loop = runWorkerLoop(
      { ...f.workerDeps("throttled"), engine: { ...f.engine, doc: throttled.doc } },
      { concurrency: 1, signal: stop.signal, idleWaitSeconds: 0, idleSleepMs: 50 },
    );
    try {
      const failed = await waitFor(
        "the loop's line for the failed delivery",
        async () => lines.find((l) => l.message.startsWith("run processing failed")),
        10_000,
      );
      const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
      expect(failed.fields).toMatchObject({
        tenantId: job.tenantId,
        jobId: job.jobId,
        runId: run?.runId,
        attempt: 1,
      });
      expect(String(failed.fields.error)).toContain("Rate of requests");
    } finally {
      stop.abort();
      await loop;
    }
  });
});
