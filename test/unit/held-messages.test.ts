import { ConditionalCheckFailedException, DynamoDBClient } from "@aws-sdk/client-dynamodb";
import {
  type BatchResultErrorEntry,
  ChangeMessageVisibilityBatchCommand,
  type ChangeMessageVisibilityBatchCommandInput,
  ReceiveMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import { DynamoDBDocumentClient, GetCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { mockClient } from "aws-sdk-client-mock";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { DEFAULT_QUOTAS, DEFAULT_SETTINGS } from "../../shared/config.js";
import { HeldMessages } from "../../shared/execution/held-messages.js";
import { receiveVisibilitySeconds } from "../../shared/execution/worker.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { encodeRunMessage, type ReceivedRun } from "../../shared/queue/work-queue.js";
import { mockedEngine } from "../support/mocked-engine.js";

/** SQS keeps a received message hidden at most this long from its receive, however often extended. */
const SQS_MAX_HIDDEN_MS = 43_200_000;

const received: ReceivedRun = {
  message: {
    jobId: "job1",
    scheduledFor: "2026-03-01T12:00:00.000Z",
    dueAt: "2026-03-01T12:00:00.000Z",
    attempt: 1,
    jobVersion: 1,
    priority: "normal",
    tenantId: "tenant-a",
  },
  queueUrl: "queue-normal",
  receiptHandle: "handle-1",
  messageId: "m1",
  receiveCount: 1,
};

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  vi.useRealTimers();
});

/**
 * A HeldMessages over SQS as AWS answers ChangeMessageVisibilityBatch: an entry that would keep
 * its message hidden past 12 hours from its receive fails with InvalidParameterValue (fauxqs
 * takes it). The run is not QUEUED at the fence the message names, so no deadline is moved.
 */
function heldOverAws() {
  let elapsedMs = 0;
  const refused: string[] = [];
  const changes: { handle: string; seconds: number }[] = [];
  const sqs = new SQSClient({ region: "us-east-1" });
  mockClient(sqs)
    .on(ChangeMessageVisibilityBatchCommand)
    .callsFake(async (input: ChangeMessageVisibilityBatchCommandInput) => {
      const failed: BatchResultErrorEntry[] = [];
      for (const entry of input.Entries ?? []) {
        const seconds = entry.VisibilityTimeout ?? 0;
        changes.push({ handle: entry.ReceiptHandle ?? "", seconds });
        // The message was received at elapsed 0.
        if (elapsedMs + seconds * 1000 > SQS_MAX_HIDDEN_MS) {
          refused.push(entry.ReceiptHandle ?? "");
          failed.push({
            Id: entry.Id,
            SenderFault: true,
            Code: "InvalidParameterValue",
            Message: `Value ${seconds} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds].`,
          });
        }
      }
      return {
        Successful: (input.Entries ?? [])
          .filter((e) => !failed.some((f) => f.Id === e.Id))
          .map((e) => ({ Id: e.Id })),
        Failed: failed,
      };
    });
  const doc = DynamoDBDocumentClient.from(new DynamoDBClient({ region: "us-east-1" }));
  mockClient(doc)
    .on(UpdateCommand)
    .rejects(new ConditionalCheckFailedException({ message: "moved on", $metadata: {} }));
  const engine = mockedEngine({
    doc,
    sqs,
    clock: () => new Date(Date.UTC(2026, 2, 1, 12) + elapsedMs),
  });
  // A visibility of 6 s: looked after every second.
  const held = new HeldMessages(engine, 6, () => elapsedMs);
  return {
    held,
    refused,
    changes,
    /** Moves the loop's clock on and lets one look after the held messages run. */
    async advance(ms: number) {
      elapsedMs += ms;
      await vi.advanceTimersByTimeAsync(1000);
    },
  };
}

describe("a message held at its tenant's gate near SQS's 12-hour limit", () => {
  it("is handed back, visible at once, rather than kept until SQS refuses to hide it longer", async () => {
    const { held, refused, changes, advance } = heldOverAws();
    const expired = held.track(received);
    // Most of 12 hours at the gate (renewed all along), then a look every 3 s past the limit.
    await advance(SQS_MAX_HIDDEN_MS - 120_000);
    for (let i = 0; i < 60; i++) await advance(3000);
    // Never asked past the limit: AWS refuses that, and the message is then delivered again
    // (to this loop or another) while this loop still holds it.
    expect(refused).toEqual([]);
    // The hold ended before then, so the loop gives the message back (worker-loop.ts).
    expect(expired?.aborted).toBe(true);
    await held.giveBack(received);
    expect(changes.at(-1)).toEqual({ handle: "handle-1", seconds: 0 });
    await held.stop();
  });
});

describe("a message past its tenant's gate at the hold limit, its run not yet started", () => {
  it("is kept hidden while it waits for a slot of the loop, not left for SQS to deliver again", async () => {
    const { held, changes, advance } = heldOverAws();
    const expired = held.track(received);
    // Its gate opens a minute before the limit; the loop's slots are all busy a few minutes more.
    await advance(11 * 3_600_000 - 60_000);
    held.passedGate(received);
    const renewedBefore = changes.length;
    for (let i = 0; i < 180; i++) await advance(1000);
    // Not handed back (it passed its gate), and renewed all along: hidden till its run starts.
    expect(changes.slice(renewedBefore).filter((c) => c.seconds > 0).length).toBeGreaterThan(30);
    expect(expired?.aborted).toBe(false);
    await held.stop();
  });
});

describe("a worker loop holding a message at its tenant's gate for 11 hours", () => {
  it("makes it visible again while it runs, not only at its stop", async () => {
    vi.useFakeTimers({
      toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "performance"],
    });
    const sqs = new SQSClient({ region: "us-east-1" });
    const visibilities: number[] = [];
    let receives = 0;
    mockClient(sqs)
      .on(ReceiveMessageCommand)
      .callsFake(async () => {
        receives++;
        return receives === 1
          ? {
              Messages: [
                {
                  MessageId: "m1",
                  ReceiptHandle: "handle-1",
                  Body: encodeRunMessage(received.message),
                  Attributes: { ApproximateReceiveCount: "1" },
                },
              ],
            }
          : {};
      })
      .on(ChangeMessageVisibilityBatchCommand)
      .callsFake(async (input: ChangeMessageVisibilityBatchCommandInput) => {
        for (const e of input.Entries ?? []) visibilities.push(e.VisibilityTimeout ?? 0);
        return { Successful: (input.Entries ?? []).map((e) => ({ Id: e.Id })), Failed: [] };
      });
    const doc = DynamoDBDocumentClient.from(new DynamoDBClient({ region: "us-east-1" }));
    // No override: the tenant has the deployment's quota, no run at all at once.
    mockClient(doc)
      .on(GetCommand)
      .resolves({})
      .on(UpdateCommand)
      .rejects(new ConditionalCheckFailedException({ message: "moved on", $metadata: {} }));
    const engine = mockedEngine({
      doc,
      sqs,
      settings: { ...DEFAULT_SETTINGS, quotas: { ...DEFAULT_QUOTAS, concurrentRuns: 0 } },
      clock: () => new Date(Date.UTC(2026, 2, 1, 12) + performance.now()),
    });
    const stop = new AbortController();
    const loop = runWorkerLoop(
      { engine, handlers: new Map(), workerId: "w1" },
      { concurrency: 1, signal: stop.signal, idleWaitSeconds: 0, idleSleepMs: 3_600_000 },
    );
    await vi.advanceTimersByTimeAsync(11 * 3_600_000 - 60_000);
    expect(visibilities).not.toContain(0);
    await vi.advanceTimersByTimeAsync(120_000);
    expect(visibilities.at(-1)).toBe(0);
    stop.abort();
    await vi.advanceTimersByTimeAsync(3_600_000);
    await loop;
  });
});

/**
 * A HeldMessages at the default lease (visibility 62 s: a look every 10.3 s) over a runs table
 * that takes every push of a run's reaper deadline; the message is received `lateMs` after it was
 * due. `pushes` are the deadlines asked for.
 */
function heldReceivedLate(lateMs: number) {
  let elapsedMs = 0;
  const due = Date.parse(received.message.dueAt);
  const pushes: string[] = [];
  const sqs = new SQSClient({ region: "us-east-1" });
  mockClient(sqs)
    .on(ChangeMessageVisibilityBatchCommand)
    .callsFake(async (input: ChangeMessageVisibilityBatchCommandInput) => ({
      Successful: (input.Entries ?? []).map((e) => ({ Id: e.Id })),
      Failed: [],
    }));
  const doc = DynamoDBDocumentClient.from(new DynamoDBClient({ region: "us-east-1" }));
  mockClient(doc)
    .on(UpdateCommand)
    .callsFake(async (input: { ExpressionAttributeValues?: Record<string, unknown> }) => {
      pushes.push(String(input.ExpressionAttributeValues?.[":deadline"]));
      return {};
    });
  const engine = mockedEngine({ doc, sqs, clock: () => new Date(due + lateMs + elapsedMs) });
  const visibilitySeconds = receiveVisibilitySeconds(engine.settings.leaseMs / 1000);
  const held = new HeldMessages(engine, visibilitySeconds, () => elapsedMs);
  const lookMs = Math.ceil((visibilitySeconds * 1000) / 6);
  return {
    held,
    pushes,
    /** The deadline a push at elapsed `atMs` asks for: a lease on from the engine's clock then. */
    deadlineAt: (atMs: number) =>
      new Date(due + lateMs + atMs + engine.settings.leaseMs).toISOString(),
    lookMs,
    /** Moves the loop's clock on by `looks` looks after the held messages, each run. */
    async look(looks = 1) {
      for (let i = 0; i < looks; i++) {
        elapsedMs += lookMs;
        await vi.advanceTimersByTimeAsync(lookMs);
      }
    },
  };
}

describe("a message received late and held at its tenant's gate", () => {
  // Its run's reaper deadline is a lease after it was due: received 0.8 of a lease late, it has
  // 12 s left, less than the 30 s (half a lease) a look waited for from the receive.
  it("has its run's reaper deadline moved at the first look, not half a lease after its receive", async () => {
    const { held, pushes, deadlineAt, lookMs, look } = heldReceivedLate(48_000);
    held.track(received);
    await look();
    expect(pushes).toEqual([deadlineAt(lookMs)]);
    await held.stop();
  });

  it("received on time, costs no write until half a lease has passed", async () => {
    const { held, pushes, deadlineAt, lookMs, look } = heldReceivedLate(0);
    held.track(received);
    // Looks at 10.3 s and 20.7 s: under half a lease since it was due; the third, at 31 s, moves it.
    await look(2);
    expect(pushes).toEqual([]);
    await look();
    expect(pushes).toEqual([deadlineAt(3 * lookMs)]);
    await held.stop();
  });
});
