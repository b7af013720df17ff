import { SendMessageBatchCommand, SQSClient } from "@aws-sdk/client-sqs";
import { mockClient } from "aws-sdk-client-mock";
import { describe, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob } from "../../shared/jobs/index.js";
import { sendRuns } from "../../shared/queue/work-queue.js";
import { runMessageOf } from "../../shared/storage/items.js";
import { caseFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { waitFor } from "../support/wait.js";

/**
 * Each case on tables and queues of its own (caseFixture): a loop takes every message in its
 * queues, and the receives a case counts are its own client's. The early message's case runs
 * first, alone (it.sequential): beside the other two's loops, with two busy loops on the machine,
 * its due run started after the early one's second (2 runs of 2). The other two run side by side
 * after it. One after another on one fixture the three took 11 s of the timed group.
 */
describe.concurrent("the worker loop", () => {
  it.sequential("holds an early message until its second without taking the slot a due run needs", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    // A's message is delivered at once though A is due 1.9 s later, as SQS's whole-second delays do.
    const unsent = new SQSClient({ region: "us-east-1" });
    mockClient(unsent).on(SendMessageBatchCommand).resolves({ Successful: [], Failed: [] });
    const a = await createJob(
      { ...f.engine, sqs: unsent },
      testJob({ schedule: { runAt: new Date(Date.now() + 1900).toISOString() } }),
    );
    const [queuedA] = (await f.runs()).filter((r) => r.jobId === a.job.jobId);
    if (!queuedA) throw new Error("A has no QUEUED run");
    await sendRuns(
      f.engine.sqs,
      f.engine.queues,
      [{ message: runMessageOf(queuedA), dueAt: new Date(queuedA.dueAt) }],
      new Date(queuedA.dueAt),
    );

    const stop = new AbortController();
    // One slot: before, A's wait for its second held it, and B, due at once, waited behind A.
    const loop = runWorkerLoop(f.workerDeps("one-slot"), {
      concurrency: 1,
      signal: stop.signal,
      idleWaitSeconds: 0,
      idleSleepMs: 50,
    });
    try {
      await waitFor(
        "the loop to take A's message",
        async () => (await f.queueDepth(f.engine.queues.normal)).inFlight === 1,
        5000,
      );
      const b = await createJob(
        f.engine,
        testJob({ schedule: { runAt: new Date().toISOString() } }),
      );
      const finished = await waitFor(
        "both runs to finish",
        async () => {
          const runs = (await f.runs()).filter(
            (r) => r.jobId === a.job.jobId || r.jobId === b.job.jobId,
          );
          return runs.length === 2 && runs.every((r) => r.status === "SUCCEEDED")
            ? runs
            : undefined;
        },
        10_000,
      );
      const lag = (jobId: string) => {
        const run = finished.find((r) => r.jobId === jobId);
        return Date.parse(run?.startedAt ?? "") - Date.parse(run?.scheduledFor ?? "");
      };
      expect(lag(b.job.jobId)).toBeLessThan(1000);
      expect(lag(a.job.jobId)).toBeGreaterThanOrEqual(0);
      const startedA = finished.find((r) => r.jobId === a.job.jobId)?.startedAt ?? "";
      const startedB = finished.find((r) => r.jobId === b.job.jobId)?.startedAt ?? "";
      expect(startedB < startedA).toBe(true);
    } finally {
      stop.abort();
      await loop;
    }
  }, 30_000);

  it("reads a backlog with several receives at once, and makes one at a time when idle", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    // A client of its own, so that counting its receives counts only this loop's.
    const counted = createTestClients();
    let inFlight = 0;
    let mostInFlight = 0;
    const inFlightAt: { at: number; inFlight: number }[] = [];
    counted.sqs.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== "ReceiveMessageCommand") return next(args);
        inFlight++;
        mostInFlight = Math.max(mostInFlight, inFlight);
        inFlightAt.push({ at: Date.now(), inFlight });
        try {
          return await next(args);
        } finally {
          inFlight--;
        }
      },
      { step: "initialize", name: "countReceives" },
    );
    const jobs = 80;
    const dueAt = new Date(Date.now() + 3000).toISOString();
    const created = await Promise.all(
      Array.from({ length: jobs }, () =>
        createJob(f.engine, testJob({ schedule: { runAt: dueAt } })),
      ),
    );
    const ids = new Set(created.map((c) => c.job.jobId));
    const stop = new AbortController();
    const loop = runWorkerLoop(
      { ...f.workerDeps("backlog"), engine: { ...f.engine, sqs: counted.sqs } },
      { concurrency: 100, signal: stop.signal, idleWaitSeconds: 0, idleSleepMs: 20 },
    );
    try {
      await waitFor(
        "every run to succeed",
        async () => {
          const done = (await f.runs()).filter((r) => ids.has(r.jobId) && r.status === "SUCCEEDED");
          return done.length === jobs || undefined;
        },
        20_000,
      );
      expect(mostInFlight).toBeGreaterThan(1);
      const idleSince = Date.now();
      await sleep(500);
      const idle = inFlightAt.filter((r) => r.at > idleSince + 100);
      expect(idle.length).toBeGreaterThan(0);
      expect(Math.max(...idle.map((r) => r.inFlight))).toBe(1);
    } finally {
      stop.abort();
      await loop;
      counted.sqs.destroy();
      counted.dynamo.destroy();
    }
  }, 30_000);

  it("idle, long-polls every queue at once: a run sent to a higher queue starts at once, not after the low queue's poll", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    const counted = createTestClients();
    /** Each long poll: its queue, and the bodies it brought back once back. */
    const longPolls: { queueUrl: string; bodies?: string[] }[] = [];
    let receives = 0;
    counted.sqs.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== "ReceiveMessageCommand") return next(args);
        receives++;
        const input = args.input as { WaitTimeSeconds?: number; QueueUrl?: string };
        if ((input.WaitTimeSeconds ?? 0) === 0) return next(args);
        const poll: (typeof longPolls)[number] = { queueUrl: input.QueueUrl ?? "" };
        longPolls.push(poll);
        const result = await next(args);
        const output = result.output as { Messages?: { Body?: string }[] };
        poll.bodies = (output.Messages ?? []).map((m) => m.Body ?? "");
        return result;
      },
      { step: "initialize", name: "countReceives" },
    );
    const stop = new AbortController();
    // The default idle wait: a one-second long poll.
    const loop = runWorkerLoop(
      { ...f.workerDeps("idle"), engine: { ...f.engine, sqs: counted.sqs } },
      { concurrency: 4, signal: stop.signal },
    );
    try {
      await sleep(1500);
      const idleReceives = receives;
      await sleep(2000);
      // Three empty short receives and three long polls a second, not a short poll every few ms.
      expect(receives - idleReceives).toBeLessThanOrEqual(16);
      // Before, only the low queue was long-polled, and a high run waited for a short poll after
      // the low queue's second. Which poll brought it back says so whatever the machine's load; a
      // bound on its start lag did not, nor did holding that the poll went out before the create
      // began (a create slower than a poll's second, on a loaded CI, meets the poll after).
      const highPollOut = () =>
        longPolls.some((p) => p.queueUrl === f.engine.queues.high && p.bodies === undefined);
      await waitFor("the high queue's long poll to go out", highPollOut, 3000);
      const { job } = await createJob(
        f.engine,
        testJob({ priority: "high", schedule: { runAt: new Date().toISOString() } }),
      );
      await waitFor(
        "the high run to succeed",
        async () => (await f.runs()).find((r) => r.jobId === job.jobId && r.status === "SUCCEEDED"),
        10_000,
      );
      const broughtBy = longPolls.filter((p) => p.bodies?.some((b) => b.includes(job.jobId)));
      expect(broughtBy.map((p) => p.queueUrl)).toEqual([f.engine.queues.high]);
    } finally {
      stop.abort();
      await loop;
      counted.sqs.destroy();
      counted.dynamo.destroy();
    }
  }, 30_000);
});
