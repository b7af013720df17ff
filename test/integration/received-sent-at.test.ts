import { SendMessageCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeRunMessage, receiveRuns } from "../../shared/queue/work-queue.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";

/**
 * A worker loop bounds a handed-back message's time out by when SQS says it was sent
 * (`quotaWaitStart`): its receive asks for SentTimestamp, and the queue answers it.
 */
describe("a run message the worker loop receives", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("carries when it was sent (SentTimestamp)", async () => {
    const queueUrl = f.engine.queues.low;
    const message = {
      jobId: "job-sent-at",
      scheduledFor: new Date().toISOString(),
      dueAt: new Date().toISOString(),
      attempt: 1,
      jobVersion: 1,
      priority: "low" as const,
      tenantId: "t-sent-at",
      quotaWaitSince: new Date().toISOString(),
    };
    const before = Date.now();
    await f.engine.sqs.send(
      new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: encodeRunMessage(message) }),
    );
    const after = Date.now();
    const [received] = await receiveRuns(f.engine.sqs, queueUrl, { max: 1, waitSeconds: 2 });
    expect(received?.message.jobId).toBe("job-sent-at");
    // Whole milliseconds on the queue's clock, this machine's here.
    expect(received?.sentAt).toBeGreaterThanOrEqual(before - 1_000);
    expect(received?.sentAt).toBeLessThanOrEqual(after + 1_000);
  });
});
