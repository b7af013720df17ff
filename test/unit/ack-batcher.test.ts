import { DeleteMessageBatchCommand, SQSClient } from "@aws-sdk/client-sqs";
import { mockClient } from "aws-sdk-client-mock";
import { describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { AckBatcher } from "../../shared/execution/ack-batcher.js";
import type { Logger } from "../../shared/observability.js";
import type { ReceivedRun } from "../../shared/queue/work-queue.js";

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} };

function received(queueUrl: string, i: number): ReceivedRun {
  return {
    message: {
      jobId: `job${i}`,
      scheduledFor: "2026-03-01T12:00:00.000Z",
      dueAt: "2026-03-01T12:00:00.000Z",
      attempt: 1,
      jobVersion: 1,
      priority: "normal",
      tenantId: "tenant-a",
    },
    queueUrl,
    receiptHandle: `handle-${i}`,
    messageId: `m${i}`,
    receiveCount: 1,
  };
}

describe("AckBatcher", () => {
  it("deletes ten to a request, and flush waits for a delete already sent", async () => {
    // A slow delete, injected: the tenth ack sends the batch at once, and the loop's last flush
    // must not return while it is still on the wire (the process may exit right after).
    const sqs = new SQSClient({ region: "us-east-1" });
    const deleted: string[] = [];
    mockClient(sqs)
      .on(DeleteMessageBatchCommand)
      .callsFake(async (input: { Entries?: { ReceiptHandle?: string }[] }) => {
        await sleep(200);
        for (const e of input.Entries ?? []) deleted.push(e.ReceiptHandle ?? "");
        return { Successful: [], Failed: [] };
      });
    const acks = new AckBatcher(sqs, silent);
    for (let i = 0; i < 10; i++) acks.add(received("queue-a", i));
    // Nothing is left pending: the ten went out in one request when the tenth was added.
    await acks.flush();
    expect(deleted).toHaveLength(10);
    expect(new Set(deleted).size).toBe(10);
  });

  it("a failed delete is logged, not thrown: the messages come back and are acknowledged again", async () => {
    const sqs = new SQSClient({ region: "us-east-1" });
    mockClient(sqs).on(DeleteMessageBatchCommand).rejects(new Error("throttled"));
    const warnings: string[] = [];
    const acks = new AckBatcher(sqs, { ...silent, warn: (message) => warnings.push(message) });
    acks.add(received("queue-a", 1));
    await acks.flush();
    expect(warnings).toEqual(["could not delete acknowledged messages"]);
  });
});
