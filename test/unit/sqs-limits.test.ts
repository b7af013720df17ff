import {
  BatchEntryIdsNotDistinct,
  ChangeMessageVisibilityCommand,
  OverLimit,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  type SendMessageBatchCommandInput,
  SQSClient,
  SQSServiceException,
  TooManyEntriesInBatchRequest,
} from "@aws-sdk/client-sqs";
import { mockClient } from "aws-sdk-client-mock";
import { describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import type { Logger } from "../../shared/observability.js";
import { type OutgoingRun, sendRuns, setVisibility } from "../../shared/queue/work-queue.js";
import { mockedEngine } from "../support/mocked-engine.js";

/**
 * SQS limits the sandbox's emulator (fauxqs) does not enforce, pinned where the code meets them:
 * the mocked client answers with the errors AWS SQS gives past each limit.
 */

const now = new Date("2026-03-01T12:00:00.000Z");
/** AWS's InvalidParameterValue, which the SDK has no class of its own for. */
function invalidParameterValue(message: string): SQSServiceException {
  return new SQSServiceException({
    name: "InvalidParameterValue",
    $fault: "client",
    message,
    $metadata: {},
  });
}

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} };

function engineWith(sqs: SQSClient, log: Logger = silent): Engine {
  return mockedEngine({ sqs, clock: () => now, obs: { log, metrics: { add() {} } } });
}

function run(i: number, dueInMs: number): OutgoingRun {
  return {
    message: {
      jobId: `job${i}`,
      scheduledFor: now.toISOString(),
      dueAt: new Date(now.getTime() + dueInMs).toISOString(),
      attempt: 1,
      jobVersion: 1,
      priority: "normal",
      tenantId: "t".repeat(256),
    },
    dueAt: new Date(now.getTime() + dueInMs),
  };
}

/** SendMessageBatch as AWS checks it: ten entries, distinct ids, delays to 900 s, 256 KiB a batch. */
function awsSendMessageBatch(sent: SendMessageBatchCommandInput[]) {
  return async (input: SendMessageBatchCommandInput) => {
    const entries = input.Entries ?? [];
    if (entries.length > 10)
      throw new TooManyEntriesInBatchRequest({
        message: "Maximum number of entries per request are 10.",
        $metadata: {},
      });
    if (new Set(entries.map((e) => e.Id)).size !== entries.length)
      throw new BatchEntryIdsNotDistinct({
        message: "Id entries are not distinct.",
        $metadata: {},
      });
    for (const e of entries)
      if ((e.DelaySeconds ?? 0) > 900)
        throw invalidParameterValue(
          `Value ${e.DelaySeconds} for parameter DelaySeconds is invalid.`,
        );
    const bytes = entries.reduce((sum, e) => sum + Buffer.byteLength(e.MessageBody ?? ""), 0);
    if (bytes > 262_144)
      throw invalidParameterValue("Batch requests cannot be longer than 262144 bytes.");
    sent.push(input);
    return {
      Successful: entries.map((e) => ({ Id: e.Id, MessageId: `m-${e.Id}`, MD5OfMessageBody: "" })),
      Failed: [],
    };
  };
}

describe("SendMessageBatch within SQS's limits", () => {
  it("sends a run given twice, many runs, and runs due hours out, ten to a request with distinct ids and delays to 900 s", async () => {
    const sqs = new SQSClient({ region: "us-east-1" });
    const sent: SendMessageBatchCommandInput[] = [];
    mockClient(sqs).on(SendMessageBatchCommand).callsFake(awsSendMessageBatch(sent));
    const twice = run(0, 7_200_000);
    const runs = [twice, twice, ...Array.from({ length: 23 }, (_, i) => run(i + 1, i * 600_000))];
    await sendRuns(sqs, engineWith(sqs).queues, runs, now);
    const entries = sent.flatMap((s) => s.Entries ?? []);
    expect(entries).toHaveLength(25);
    expect(Math.max(...sent.map((s) => s.Entries?.length ?? 0))).toBe(10);
    expect(Math.max(...entries.map((e) => e.DelaySeconds ?? 0))).toBe(900);
  });
});

describe("ChangeMessageVisibility within SQS's limits", () => {
  it("asks at most 43,200 s, however long is asked for", async () => {
    const sqs = new SQSClient({ region: "us-east-1" });
    const asked: number[] = [];
    mockClient(sqs)
      .on(ChangeMessageVisibilityCommand)
      .callsFake(async (input: { VisibilityTimeout?: number }) => {
        const seconds = input.VisibilityTimeout ?? 0;
        if (seconds > 43_200)
          throw invalidParameterValue(
            `Value ${seconds} for parameter VisibilityTimeout is invalid.`,
          );
        asked.push(seconds);
        return {};
      });
    await setVisibility(sqs, "queue-normal", "handle-1", 100_000);
    expect(asked).toEqual([43_200]);
  });
});

describe("a worker loop whose queue is at SQS's 120,000 messages in flight", () => {
  it("logs the OverLimit refusal, backs off and stops when asked, nothing thrown", async () => {
    const sqs = new SQSClient({ region: "us-east-1" });
    let receives = 0;
    mockClient(sqs)
      .on(ReceiveMessageCommand)
      .callsFake(async () => {
        receives++;
        throw new OverLimit({ message: "Too many messages in flight.", $metadata: {} });
      });
    const warnings: { message: string; fields: unknown }[] = [];
    const log: Logger = {
      ...silent,
      warn: (message, fields) => warnings.push({ message, fields }),
    };
    const stop = new AbortController();
    const loop = runWorkerLoop(
      { engine: engineWith(sqs, log), handlers: new Map(), workerId: "w1" },
      { concurrency: 1, signal: stop.signal, idleWaitSeconds: 0 },
    );
    await new Promise((resolve) => setTimeout(resolve, 1500));
    stop.abort();
    await loop;
    // One refusal a second, not a busy loop.
    expect(receives).toBeGreaterThanOrEqual(1);
    expect(receives).toBeLessThanOrEqual(3);
    expect(warnings[0]).toEqual({
      message: "receive failed; backing off",
      fields: expect.objectContaining({ error: expect.stringContaining("OverLimit") }),
    });
  });
});
