import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createEngineFixture,
  deployedEnvironment,
  type EngineFixture,
} from "../support/engine-fixture.js";
import { lambdaContext, sqsEvent } from "../support/lambda-events.js";

/**
 * Messages on the work queues and their DLQs that no scheduler process sent: an operator's test
 * message, a message of another system sent to the wrong queue, a hand-edited redrive. Each has
 * every field a run message has, but no run could have its key. The worker and the DLQ consumer
 * drop them as unreadable; were they to fail on them, SQS would hand them back for good: the
 * worker's to the DLQ, and the DLQ consumer's every few minutes for the queue's 14 days, its
 * alarm firing all that time.
 */
const RUN_MESSAGE = {
  jobId: "01J9Z3V6K8N4QX2M7R5T0W1Y3B",
  scheduledFor: "2026-03-01T12:00:00.000Z",
  dueAt: "2026-03-01T12:00:00.000Z",
  attempt: 1,
  jobVersion: 1,
  priority: "normal",
  tenantId: "tenant-a",
};
const FOREIGN = {
  "a job id no job has": { ...RUN_MESSAGE, jobId: "job #1" },
  "a time that is none": { ...RUN_MESSAGE, scheduledFor: "tomorrow" },
  "attempt 0": { ...RUN_MESSAGE, attempt: 0 },
  "attempt past 9999": { ...RUN_MESSAGE, attempt: 10_000 },
  "a fractional attempt": { ...RUN_MESSAGE, attempt: 1.5 },
};

let fixture: EngineFixture;
let worker: typeof import("../../functions/worker/handler.js").handler;
let deadLetters: typeof import("../../functions/dlq/handler.js").handler;
const saved = { ...process.env };

beforeAll(async () => {
  fixture = await createEngineFixture();
  const { engine } = fixture;
  Object.assign(process.env, deployedEnvironment(engine), { POWERTOOLS_METRICS_DISABLED: "true" });
  ({ handler: worker } = await import("../../functions/worker/handler.js"));
  ({ handler: deadLetters } = await import("../../functions/dlq/handler.js"));
});

afterAll(async () => {
  process.env = saved;
  await fixture.destroy();
});

/** The normal work queue's ARN, as its event source names it. */
const queueArn = () =>
  `arn:aws:sqs:eu-central-1:123456789012:${fixture.engine.queues.normal.split("/").at(-1)}`;
const eventOf = (body: unknown, receiveCount: number) =>
  sqsEvent(queueArn(), [
    {
      MessageId: "m-1",
      ReceiptHandle: "r-1",
      Body: JSON.stringify(body),
      Attributes: { ApproximateReceiveCount: String(receiveCount) },
    },
  ]);
const context = lambdaContext({
  functionName: "Scheduler-prod-Worker",
  region: "eu-central-1",
  account: "123456789012",
  timeoutSeconds: 900,
});

describe("a message no scheduler process sent", () => {
  it.each(Object.entries(FOREIGN))(
    "with %s is dropped by the worker and by the DLQ consumer, not handed back",
    async (_what, body) => {
      expect(await worker(eventOf(body, 1), context)).toEqual({ batchItemFailures: [] });
      expect(await deadLetters(eventOf(body, 5))).toEqual({ batchItemFailures: [] });
    },
  );

  it("a run message of a run that is not there is acknowledged by both as well", async () => {
    expect(await worker(eventOf(RUN_MESSAGE, 1), context)).toEqual({ batchItemFailures: [] });
    expect(await deadLetters(eventOf(RUN_MESSAGE, 5))).toEqual({ batchItemFailures: [] });
  });
});
