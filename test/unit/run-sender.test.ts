import {
  SendMessageBatchCommand,
  type SendMessageBatchCommandInput,
  SQSClient,
} from "@aws-sdk/client-sqs";
import { mockClient } from "aws-sdk-client-mock";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { DEFAULT_SETTINGS } from "../../shared/config.js";
import { RunSender } from "../../shared/dispatch/run-sender.js";
import type { Priority, Run } from "../../shared/model.js";
import { decodeRunMessage } from "../../shared/queue/work-queue.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { mockedEngine } from "../support/mocked-engine.js";

const START = Date.parse("2026-03-01T12:00:00.000Z");

beforeEach(() => {
  vi.useFakeTimers({ now: START });
});

afterEach(() => {
  vi.useRealTimers();
});

/** A sender over an SQS that records each SendMessageBatch as its runs' job ids, on a clock the fake timers move. */
function recordingSender() {
  const batches: { queue: string | undefined; jobs: string[] }[] = [];
  /** When each message sent becomes visible, in ms after START: its send plus its whole seconds of delay. */
  const visibleAfterMs: number[] = [];
  const sqs = new SQSClient({ region: "us-east-1" });
  mockClient(sqs)
    .on(SendMessageBatchCommand)
    .callsFake(async (input: SendMessageBatchCommandInput) => {
      const entries = input.Entries ?? [];
      batches.push({
        queue: input.QueueUrl,
        jobs: entries.map((e) => decodeRunMessage(e.MessageBody)?.jobId ?? "?"),
      });
      for (const e of entries)
        visibleAfterMs.push(Date.now() - START + (e.DelaySeconds ?? 0) * 1000);
      return { Successful: entries.map((e) => ({ Id: e.Id, MessageId: e.Id })), Failed: [] };
    });
  const engine = mockedEngine({ sqs, clock: () => new Date() });
  const sender = new RunSender(engine, { sendFailures: 0 });
  return { sender, batches, visibleAfterMs, jobsSent: () => batches.map((b) => b.jobs) };
}

/** A claimed run of job `jobId`, due `inMs` after the clock's now. */
function runDue(jobId: string, inMs: number, priority: Priority = "normal"): Run {
  const now = new Date();
  const dueAt = new Date(now.getTime() + inMs);
  const spec = {
    jobId,
    tenantId: "t1",
    scheduledFor: dueAt,
    dueAt,
    attempt: 1,
    priority,
    jobVersion: 1,
  };
  return queuedRun(spec, now, DEFAULT_SETTINGS).run;
}

describe("RunSender: how long a run waits for its batch to fill", () => {
  it.each([
    { due: "now", inMs: 0, sentAfterMs: 100 },
    { due: "30 s ago", inMs: -30_000, sentAfterMs: 100 },
    { due: "in 1.05 s", inMs: 1_050, sentAfterMs: 100 },
    { due: "in 1.1 s", inMs: 1_100, sentAfterMs: 1_000 },
    { due: "in 1.5 s", inMs: 1_500, sentAfterMs: 1_000 },
    { due: "in 5.05 s", inMs: 5_050, sentAfterMs: 1_000 },
  ])(
    "sends a run due $due alone $sentAfterMs ms after it was claimed",
    async ({ inMs, sentAfterMs }) => {
      const { sender, jobsSent } = recordingSender();
      await sender.add([runDue("alone", inMs)]);
      await vi.advanceTimersByTimeAsync(sentAfterMs - 1);
      expect(jobsSent()).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(jobsSent()).toEqual([["alone"]]);
    },
  );

  it("holds a run due 5.5 s ahead for up to a second, and sends it with the runs claimed meanwhile", async () => {
    const { sender, jobsSent } = recordingSender();
    await sender.add([runDue("later-0", 5_500)]);
    await vi.advanceTimersByTimeAsync(500);
    expect(jobsSent()).toEqual([]);
    await sender.add([runDue("later-1", 5_500)]);
    await vi.advanceTimersByTimeAsync(499);
    expect(jobsSent()).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(jobsSent()).toEqual([["later-0", "later-1"]]);
  });

  it("sends ten runs due later at once, without waiting for their deadline", async () => {
    const { sender, jobsSent } = recordingSender();
    for (let i = 0; i < 10; i++) await sender.add([runDue(`later-${i}`, 5_000)]);
    expect(jobsSent()).toEqual([Array.from({ length: 10 }, (_, i) => `later-${i}`)]);
  });

  it("a run due now added to a lingering batch brings the whole batch's send forward", async () => {
    const { sender, jobsSent } = recordingSender();
    await sender.add([runDue("later", 5_500)]);
    await vi.advanceTimersByTimeAsync(300);
    await sender.add([runDue("due-now", 0)]);
    await vi.advanceTimersByTimeAsync(99);
    expect(jobsSent()).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(jobsSent()).toEqual([["later", "due-now"]]);
    // Nothing is left to send at the later run's own deadline.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(jobsSent()).toHaveLength(1);
  });

  it("a run due later added to a batch of one due now changes nothing: the batch goes at 100 ms", async () => {
    const { sender, jobsSent } = recordingSender();
    await sender.add([runDue("due-now", 0)]);
    await vi.advanceTimersByTimeAsync(50);
    await sender.add([runDue("later", 5_500)]);
    await vi.advanceTimersByTimeAsync(50);
    expect(jobsSent()).toEqual([["due-now", "later"]]);
  });

  it("keeps a batch per queue: a high-priority run due now does not send the normal ones lingering", async () => {
    const { sender, batches } = recordingSender();
    await sender.add([runDue("normal-later", 5_500), runDue("high-now", 0, "high")]);
    await vi.advanceTimersByTimeAsync(100);
    expect(batches).toEqual([{ queue: "queue-high", jobs: ["high-now"] }]);
    await vi.advanceTimersByTimeAsync(900);
    expect(batches.map((b) => b.queue)).toEqual(["queue-high", "queue-normal"]);
  });

  it("a flush sends everything buffered at once, whatever its deadlines", async () => {
    const { sender, batches } = recordingSender();
    await sender.add([runDue("later", 5_500), runDue("high-now", 0, "high")]);
    await sender.flush();
    expect(batches.map((b) => b.jobs).sort()).toEqual([["high-now"], ["later"]]);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(batches).toHaveLength(2);
  });
});

describe("RunSender: a run's wait for its batch never makes it visible later", () => {
  /** When the run's message becomes visible, sent `sendAfterMs` after its claim: the delay is whole seconds, rounded down. */
  const visibleAfter = (dueInMs: number, sendAfterMs: number) =>
    sendAfterMs + Math.max(0, Math.floor((dueInMs - sendAfterMs) / 1000)) * 1000;

  it.each([0, 1_050, 1_100, 1_500, 1_999, 2_000, 2_050, 2_500, 3_050, 5_000, 5_999])(
    "a run due %i ms after its claim is visible no later than after the 100 ms linger",
    async (dueInMs) => {
      const { sender, visibleAfterMs } = recordingSender();
      await sender.add([runDue("one", dueInMs)]);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(visibleAfterMs).toHaveLength(1);
      const [visible = Number.NaN] = visibleAfterMs;
      expect(visible).toBeLessThanOrEqual(visibleAfter(dueInMs, 100));
      // Not so early that the worker sends it back instead of waiting (MAX_EARLY_WAIT_MS).
      expect(visible).toBeGreaterThan(dueInMs - 2_000);
    },
  );
});

describe("RunSender: a run sent before its deadline is visible no later than after the 100 ms linger", () => {
  it("a run due in 1.5 s, sent at 400 ms with a run due now, is visible by 1.1 s", async () => {
    const { sender, jobsSent, visibleAfterMs } = recordingSender();
    await sender.add([runDue("later", 1_500)]);
    await vi.advanceTimersByTimeAsync(300);
    await sender.add([runDue("due-now", 0)]);
    await vi.advanceTimersByTimeAsync(100);
    expect(jobsSent()).toEqual([["later", "due-now"]]);
    const [later = Number.NaN] = visibleAfterMs;
    expect(later).toBeLessThanOrEqual(1_100);
  });
});
