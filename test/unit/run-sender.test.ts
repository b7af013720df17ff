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
    { due: "now", inMs: 0 },
    { due: "30 s ago", inMs: -30_000 },
    { due: "in 1.05 s", inMs: 1_050 },
    { due: "in 1.5 s", inMs: 1_500 },
    { due: "in 5.05 s", inMs: 5_050 },
  ])("sends a run due $due alone 100 ms after it was claimed", async ({ inMs }) => {
    const { sender, jobsSent } = recordingSender();
    await sender.add([runDue("alone", inMs)]);
    await vi.advanceTimersByTimeAsync(99);
    expect(jobsSent()).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(jobsSent()).toEqual([["alone"]]);
  });

  it("sends ten runs at once, without waiting", async () => {
    const { sender, jobsSent } = recordingSender();
    for (let i = 0; i < 10; i++) await sender.add([runDue(`later-${i}`, 5_000)]);
    expect(jobsSent()).toEqual([Array.from({ length: 10 }, (_, i) => `later-${i}`)]);
  });

  it("a run added to a waiting batch goes with it, 100 ms after the first was claimed", async () => {
    const { sender, jobsSent } = recordingSender();
    await sender.add([runDue("due-now", 0)]);
    await vi.advanceTimersByTimeAsync(50);
    await sender.add([runDue("later", 5_500)]);
    await vi.advanceTimersByTimeAsync(49);
    expect(jobsSent()).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(jobsSent()).toEqual([["due-now", "later"]]);
  });

  it("a flush sends everything buffered at once", async () => {
    const { sender, batches } = recordingSender();
    await sender.add([runDue("later", 5_500), runDue("high-now", 0, "high")]);
    await sender.flush();
    expect(batches.map((b) => b.jobs).sort()).toEqual([["high-now"], ["later"]]);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(batches).toHaveLength(2);
  });
});

describe("RunSender: a run is visible in the second before it is due", () => {
  it.each([0, 1_050, 1_100, 1_500, 1_999, 2_000, 2_050, 2_500, 3_050, 5_000, 5_999])(
    "a run due %i ms after its claim, sent at 100 ms",
    async (dueInMs) => {
      const { sender, visibleAfterMs } = recordingSender();
      await sender.add([runDue("one", dueInMs)]);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(visibleAfterMs).toHaveLength(1);
      const [visible = Number.NaN] = visibleAfterMs;
      expect(visible).toBeLessThanOrEqual(Math.max(dueInMs, 100));
      expect(visible).toBeGreaterThan(dueInMs - 1_000);
    },
  );

  it("a run due in 1.5 s, sent at once by a flush, or at 100 ms", async () => {
    const { sender, visibleAfterMs } = recordingSender();
    await sender.add([runDue("flushed", 1_500)]);
    await sender.flush();
    await sender.add([runDue("lingered", 1_400)]);
    await vi.advanceTimersByTimeAsync(100);
    // Flushed at 0 ms: a delay of 1 s, visible at 1 s; claimed at 0 ms, due at 1.4 s, sent at 100 ms: 1 s, 1.1 s.
    expect(visibleAfterMs).toEqual([1_000, 1_100]);
  });
});
