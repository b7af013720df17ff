import { GetQueueAttributesCommand, ReceiveMessageCommand } from "@aws-sdk/client-sqs";
import type { SQSEvent } from "aws-lambda";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { processRecords } from "../../shared/execution/event-source.js";
import type { WorkerDeps } from "../../shared/execution/worker.js";
import { createJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { deleteMessages, setVisibility } from "../../shared/queue/work-queue.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { sqsEvent } from "../support/lambda-events.js";
import { createTestClients, type TestClients } from "../support/namespace.js";
import { waitFor } from "../support/wait.js";

const LEASE_MS = 3000;
/** The work queues' visibility on AWS: the worker function's timeout. */
const QUEUE_VISIBILITY_SECONDS = 900;

interface SqsCall {
  readonly command: string;
  readonly visibilityTimeout?: number;
}

/**
 * The Lambda worker's path (`processRecords`, what functions/worker/handler.ts calls) against
 * fauxqs, with queues hidden for 15 minutes after a receive as on AWS: the SQS requests the
 * worker makes itself are counted on its client.
 */
describe("the Lambda worker and its messages' visibility", () => {
  let f: EngineFixture;
  let queueArn: string;
  let sqsCalls: SqsCall[];
  let clients: TestClients[];
  /** The fixture's engine, its SQS requests counted in `sqsCalls`. */
  let counted: Engine;
  beforeEach(async () => {
    f = await createEngineFixture({
      settings: { leaseMs: LEASE_MS },
      queueVisibilitySeconds: QUEUE_VISIBILITY_SECONDS,
    });
    const { Attributes } = await f.engine.sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: f.engine.queues.normal,
        AttributeNames: ["QueueArn"],
      }),
    );
    queueArn = Attributes?.QueueArn ?? "";
    sqsCalls = [];
    const counting = createTestClients();
    counting.sqs.middlewareStack.add(
      (next, context) => async (args) => {
        const input: object = args.input;
        sqsCalls.push({
          command: String(context.commandName),
          ...("VisibilityTimeout" in input
            ? { visibilityTimeout: Number(input.VisibilityTimeout) }
            : {}),
        });
        return next(args);
      },
      { step: "initialize", name: "countSqsRequests" },
    );
    clients = [counting];
    counted = { ...f.engine, sqs: counting.sqs };
  });
  afterEach(async () => {
    for (const c of clients) c.destroy();
    await f.destroy();
  });

  /** What the event source hands the function: the job's message, received with the queue's visibility. */
  async function deliveryOf(jobId: string, timeoutMs = 20_000): Promise<SQSEvent> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const { Messages = [] } = await f.engine.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: f.engine.queues.normal,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 1,
          MessageSystemAttributeNames: ["ApproximateReceiveCount"],
        }),
      );
      if (Messages.some((m) => !m.Body?.includes(jobId)))
        throw new Error("a message of another job: each test has one job");
      if (Messages.length > 0) return sqsEvent(queueArn, Messages);
    }
    throw new Error(`no delivery for job ${jobId} within ${timeoutMs} ms`);
  }

  /** Runs the batch as the function does, then deletes what it acknowledged, as the event source does. */
  async function invoke(deps: WorkerDeps, event: SQSEvent): Promise<string[]> {
    const { batchItemFailures } = await processRecords(deps, event.Records);
    const failed = batchItemFailures.map((f) => f.itemIdentifier);
    const acked = event.Records.filter((r) => !failed.includes(r.messageId));
    await deleteMessages(
      f.engine.sqs,
      f.engine.queues.normal,
      acked.map((r) => r.receiptHandle),
    );
    return failed;
  }

  /**
   * A DynamoDB client whose process dies right after it took the run: its start write (a message
   * that came back), or its read of the run and its job (a first delivery, whose start waits for
   * the run's first write). Nothing it sends later returns.
   */
  function diesAfterTakingTheRun(): TestClients {
    const c = createTestClients();
    clients.push(c);
    let dead = false;
    c.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (dead) return new Promise<never>(() => undefined);
        const input: object = args.input;
        const update = "UpdateExpression" in input ? String(input.UpdateExpression) : "";
        const result = await next(args);
        if (
          update.includes("fence = fence + :one") ||
          context.commandName === "BatchGetItemCommand"
        )
          dead = true;
        return result;
      },
      { step: "initialize", name: "dieAfterTakingTheRun" },
    );
    return c;
  }

  async function runOf(jobId: string): Promise<Run> {
    const [run, ...others] = (await f.runs()).filter((r) => r.jobId === jobId);
    if (!run || others.length > 0) throw new Error(`expected one run of ${jobId}`);
    return run;
  }

  it("a run that starts and ends normally costs no SQS request of the worker's own, one-off or recurring", async () => {
    // Each schedule is due 200 ms after its own create: one computed before the one-off ran would be
    // in the past, its first occurrence an hour on.
    const soon = () => new Date(Date.now() + 200).toISOString();
    for (const scheduleSoon of [
      () => ({ runAt: soon() }),
      () => ({ every: "PT1H", startAt: soon() }),
    ]) {
      sqsCalls = [];
      const { job } = await createJob(f.engine, testJob({ schedule: scheduleSoon() }));
      const event = await deliveryOf(job.jobId);
      expect(await invoke({ ...f.workerDeps("lambda"), engine: counted }, event)).toEqual([]);
      expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
      expect(sqsCalls).toEqual([]);
    }
  }, 30_000);

  it("a delivery that throws is hidden for a lease from its failure, not the queue's 15 minutes", async () => {
    const throttled = createTestClients();
    clients.push(throttled);
    throttled.doc.middlewareStack.add(
      () => async () => {
        throw Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
          name: "ThrottlingException",
        });
      },
      { step: "initialize", name: "throttledEverything" },
    );
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const event = await deliveryOf(job.jobId);
    const failing = { ...f.workerDeps("lambda"), engine: { ...counted, doc: throttled.doc } };
    expect(await invoke(failing, event)).toEqual(event.Records.map((r) => r.messageId));
    expect(sqsCalls).toEqual([
      { command: "ChangeMessageVisibilityCommand", visibilityTimeout: LEASE_MS / 1000 },
    ]);

    const again = await deliveryOf(job.jobId, 15_000);
    expect(again.Records[0]?.attributes.ApproximateReceiveCount).toBe("2");
    expect(await invoke({ ...f.workerDeps("lambda"), engine: counted }, again)).toEqual([]);
    expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
  }, 30_000);

  it("a run whose Lambda died after taking it is re-sent by the reaper at its deadline, and ends once", async () => {
    let calls = 0;
    const handlers = { counted: async () => void calls++ };
    const { job } = await createJob(
      f.engine,
      testJob({ type: "counted", schedule: { runAt: new Date().toISOString() } }),
    );
    const first = await deliveryOf(job.jobId);
    const doomed = {
      ...f.workerDeps("doomed", handlers),
      engine: { ...counted, doc: diesAfterTakingTheRun().doc },
    };
    // Never settles: the process died after reading the run to start it (a first delivery writes
    // its start with the run's first write), and its message stays hidden.
    void invoke(doomed, first);
    await sleep(500);
    const queued = await runOf(job.jobId);
    expect(queued).toMatchObject({ status: "QUEUED", fence: 0 });
    expect(sqsCalls).toEqual([]);
    // Before the run's deadline (a lease after it was due) the run is left alone.
    expect((await reap(f.engine)).resent).toBe(0);

    // A pass once the deadline and the reaper's settle time have passed, on its clock.
    const pastDeadline = new Date(Date.parse(queued.dueAt) + LEASE_MS + REAPER_SETTLE_MS + 500);
    expect((await reap(f.engine, { now: pastDeadline })).resent).toBe(1);
    const resent = await deliveryOf(job.jobId, 10_000);
    const survivor = { ...f.workerDeps("survivor", handlers), engine: counted };
    expect(await invoke(survivor, resent)).toEqual([]);
    expect(await runOf(job.jobId)).toMatchObject({
      status: "SUCCEEDED",
      workerId: "survivor",
      fence: 1,
    });

    // The first message, back after the queue's visibility (shown here at once rather than waited
    // for): a duplicate, acknowledged without running anything or touching its visibility.
    const [record] = first.Records;
    if (!record) throw new Error("no record");
    await setVisibility(f.engine.sqs, f.engine.queues.normal, record.receiptHandle, 0);
    const late = await deliveryOf(job.jobId);
    expect(late.Records[0]?.attributes.ApproximateReceiveCount).toBe("2");
    expect(await invoke(survivor, late)).toEqual([]);
    expect(calls).toBe(1);
    expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
    expect(sqsCalls.map((c) => c.command)).not.toContain("ChangeMessageVisibilityCommand");
    expect(await f.queueDepth(f.dlqUrl)).toEqual({ visible: 0, delayed: 0, inFlight: 0 });
  }, 40_000);

  it("a message delivered again is hidden for a lease once its run starts, so a crash brings it back a lease later", async () => {
    let calls = 0;
    const handlers = { counted: async () => void calls++ };
    const { job } = await createJob(
      f.engine,
      testJob({ type: "counted", schedule: { runAt: new Date().toISOString() } }),
    );
    const first = await deliveryOf(job.jobId);
    // Back after the queue's visibility (shown here at once): its first worker died before the start.
    const [record] = first.Records;
    if (!record) throw new Error("no record");
    await setVisibility(f.engine.sqs, f.engine.queues.normal, record.receiptHandle, 0);
    const second = await deliveryOf(job.jobId);
    expect(second.Records[0]?.attributes.ApproximateReceiveCount).toBe("2");
    const doomed = {
      ...f.workerDeps("doomed", handlers),
      engine: { ...counted, doc: diesAfterTakingTheRun().doc },
    };
    void invoke(doomed, second);
    await waitFor("the redelivery's visibility", async () => sqsCalls.length > 0);
    expect(sqsCalls).toEqual([
      { command: "ChangeMessageVisibilityCommand", visibilityTimeout: LEASE_MS / 1000 },
    ]);
    expect(await runOf(job.jobId)).toMatchObject({ status: "RUNNING", fence: 1 });

    // Back once the lease lapsed: this delivery starts the run again (a start the redrive counts).
    const third = await deliveryOf(job.jobId, 10_000);
    expect(third.Records[0]?.attributes.ApproximateReceiveCount).toBe("3");
    expect(await invoke({ ...f.workerDeps("survivor", handlers), engine: counted }, third)).toEqual(
      [],
    );
    expect(await runOf(job.jobId)).toMatchObject({
      status: "SUCCEEDED",
      workerId: "survivor",
      fence: 2,
    });
    expect(calls).toBe(1);
  }, 30_000);
});
