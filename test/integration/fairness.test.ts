import { SendMessageBatchCommand, SQSClient } from "@aws-sdk/client-sqs";
import { mockClient } from "aws-sdk-client-mock";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { horizonOf, sweepShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { JobContext, JobHandler } from "../../shared/execution/job-contract.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob, pauseJob, resumeJob, triggerJob } from "../../shared/jobs/index.js";
import type { Priority } from "../../shared/model.js";
import { decodeRunMessage } from "../../shared/queue/work-queue.js";
import { writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { held } from "../support/held-runs.js";
import { seedJobs } from "../support/seed.js";
import { waitFor } from "../support/wait.js";

const SECOND = 1000;

interface SentMessage {
  readonly jobId: string;
  readonly tenantId: string;
  readonly messageGroupId: string | undefined;
}

/**
 * Records every message the engine's SQS client sends, in order. The emulator accepts
 * `MessageGroupId` on a standard queue but does not keep it, so the request is where to look.
 */
function recordSends(f: EngineFixture): { sent: SentMessage[]; stop(): void } {
  const sent: SentMessage[] = [];
  const name = `recordSends-${Math.random()}`;
  f.engine.sqs.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === "SendMessageBatchCommand") {
        const input = args.input as SendMessageBatchCommand["input"];
        for (const entry of input.Entries ?? []) {
          const message = decodeRunMessage(entry.MessageBody);
          if (message)
            sent.push({
              jobId: message.jobId,
              tenantId: message.tenantId,
              messageGroupId: entry.MessageGroupId,
            });
        }
      }
      return next(args);
    },
    { step: "initialize", name },
  );
  return { sent, stop: () => f.engine.sqs.middlewareStack.remove(name) };
}

/**
 * The four groups below each have a fixture of their own and wait on worker loops, leases and
 * handlers that sleep (the file took 28 s in CI, 12 of them the held messages' case, 7.5 s now): side by side,
 * they take the longest group's time. The cases of a group share its fixture (a recording of its
 * sends, its worker loop's queues) and run one after another (it.sequential).
 */
describe.concurrent("fairness, its groups side by side", () => {
  describe("fair claiming", () => {
    let f: EngineFixture;
    beforeAll(async () => {
      f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
    });
    afterAll(() => f.destroy());

    it("takes turns between two tenants' entries in one bucket, whatever their key order", async () => {
      const now = new Date();
      const dueAt = new Date(Math.floor(now.getTime() / SECOND) * SECOND - 5 * SECOND);
      // One second, one bucket: the big tenant's job ids sort before the small tenant's, so in key
      // order all 30 of its entries come first (a bucket's query reads them all in one page, so
      // more of them would show nothing more).
      const spec = (tenantId: string, prefix: string, count: number) =>
        Array.from({ length: count }, (_, i) => ({
          jobId: `${prefix}${String(i).padStart(5, "0")}`,
          schedule: { runAt: dueAt.toISOString() },
          dueAt,
          tenantId,
        }));
      await seedJobs(f, [...spec("tenant-big", "a", 30), ...spec("tenant-small", "b", 5)], now);
      const recording = recordSends(f);
      try {
        const stats = await sweepShard(f.engine, 0, {
          from: new Date(now.getTime() - 120 * SECOND),
          to: now,
          now,
          horizonEnd: horizonOf(now, f.engine.settings.lookaheadMs).end,
          // One claim at a time: the order of the claims is the order of the sends.
          concurrency: 1,
        });
        expect(stats.runs).toBe(35);
        const order = recording.sent.map((m) => m.jobId);
        expect(order).toHaveLength(35);
        const small = order.flatMap((jobId, i) => (jobId.startsWith("b") ? [i] : []));
        // In turns: big, small, big, small, … until the small tenant has none left.
        expect(small).toEqual([1, 3, 5, 7, 9]);
        const tenantOf = (jobId: string) => (jobId.startsWith("b") ? "tenant-small" : "tenant-big");
        expect(recording.sent.filter((m) => m.messageGroupId !== tenantOf(m.jobId))).toEqual([]);
      } finally {
        recording.stop();
      }
    }, 60_000);
  });

  describe("MessageGroupId", () => {
    let f: EngineFixture;
    beforeAll(async () => {
      f = await createEngineFixture();
    });
    afterAll(() => f.destroy());

    it.sequential("is the job's tenant on every send: create, trigger, retry, reaper re-send, resume", async () => {
      const recording = recordSends(f);
      try {
        const soon = () => new Date(Date.now() + 2 * SECOND).toISOString();
        // Create's fast path sends the run it claims.
        const created = await createJob(
          f.engine,
          testJob({ tenantId: "t-create", schedule: { runAt: soon() } }),
        );
        // A trigger sends its run at once.
        const hourly = await createJob(
          f.engine,
          testJob({ tenantId: "t-trigger", schedule: { cron: "0 * * * *", timezone: "UTC" } }),
        );
        await triggerJob(f.engine, "t-trigger", hourly.job.jobId);
        // A failure's next attempt inside the fast-path window is sent by the worker.
        const failing = await createJob(
          f.engine,
          testJob({
            tenantId: "t-retry",
            type: "fail",
            payload: { times: 1 },
            schedule: { runAt: new Date().toISOString() },
            policies: {
              ...testJob().policies,
              retry: { maxAttempts: 3, initialDelayMs: 1000, maxDelayMs: 1000 },
            },
          }),
        );
        const delivery = await f.nextDelivery(f.engine.queues.normal, failing.job.jobId);
        await f.process(f.workerDeps("w1"), delivery);
        // The reaper re-sends a run whose message never went out.
        const unsent = new SQSClient({ region: "us-east-1" });
        mockClient(unsent).on(SendMessageBatchCommand).resolves({ Successful: [], Failed: [] });
        const lost = await createJob(
          { ...f.engine, sqs: unsent },
          testJob({ tenantId: "t-reaper", schedule: { runAt: new Date().toISOString() } }),
        );
        await reap(f.engine, { overdueBefore: new Date(Date.now() + 10 * 60 * SECOND) });
        // Resume sends the runs its worker parked while the job was paused.
        const paused = await createJob(
          f.engine,
          testJob({ tenantId: "t-resume", schedule: { runAt: new Date().toISOString() } }),
        );
        await pauseJob(f.engine, "t-resume", paused.job.jobId);
        const parked = await f.nextDelivery(f.engine.queues.normal, paused.job.jobId);
        await f.process(f.workerDeps("w2"), parked);
        const sentBeforeResume = recording.sent.length;
        await resumeJob(f.engine, "t-resume", paused.job.jobId);

        const tenantOf = new Map([
          [created.job.jobId, "t-create"],
          [hourly.job.jobId, "t-trigger"],
          [failing.job.jobId, "t-retry"],
          [lost.job.jobId, "t-reaper"],
          [paused.job.jobId, "t-resume"],
        ]);
        const sends = recording.sent.filter((m) => tenantOf.has(m.jobId));
        const sentFor = (jobId: string) => sends.filter((m) => m.jobId === jobId).length;
        expect(sentFor(created.job.jobId)).toBeGreaterThanOrEqual(1);
        expect(sentFor(hourly.job.jobId)).toBeGreaterThanOrEqual(1);
        // The first attempt at create, the retry by the worker.
        expect(sentFor(failing.job.jobId)).toBeGreaterThanOrEqual(2);
        expect(sentFor(lost.job.jobId)).toBeGreaterThanOrEqual(1);
        expect(
          recording.sent.slice(sentBeforeResume).filter((m) => m.jobId === paused.job.jobId),
        ).toHaveLength(1);
        for (const message of sends) {
          expect(message.messageGroupId, message.jobId).toBe(tenantOf.get(message.jobId));
          expect(message.tenantId, message.jobId).toBe(tenantOf.get(message.jobId));
        }
      } finally {
        recording.stop();
      }
    }, 60_000);

    // SQS refuses a MessageGroupId past 128 characters, and a tenant id may be 256 (a long IAM
    // path, a JWT subject); the emulator checks none, so the sends are read as made.
    it.sequential("is at most 128 characters: a longer tenant's is a digest no tenant id can be, its own", async () => {
      const recording = recordSends(f);
      try {
        const tenants = [128, 129, 256].map((length) => `t${"x".repeat(length - 2)}${length % 10}`);
        const jobIds = new Set<string>();
        for (const tenantId of tenants) {
          const { job } = await createJob(
            f.engine,
            testJob({ tenantId, schedule: { runAt: new Date().toISOString() } }),
          );
          jobIds.add(job.jobId);
        }
        const groups = new Map(
          recording.sent
            .filter((m) => jobIds.has(m.jobId))
            .map((m) => [m.tenantId, m.messageGroupId ?? ""]),
        );
        expect([...groups.keys()].map((t) => t.length)).toEqual([128, 129, 256]);
        expect([...groups.values()].map((g) => g.length <= 128)).toEqual([true, true, true]);
        expect(groups.get(tenants[0] ?? "")).toBe(tenants[0]);
        expect(new Set(groups.values()).size).toBe(3);
        for (const long of tenants.slice(1)) expect(groups.get(long)).toMatch(/^#[0-9a-f]{64}$/);
      } finally {
        recording.stop();
      }
    }, 30_000);
  });

  describe("the worker loop's fairness", () => {
    let f: EngineFixture;
    beforeAll(async () => {
      f = await createEngineFixture();
    });
    afterAll(() => f.destroy());

    /**
     * A handler that records when each job started and how many ran at once. The nth run to start
     * takes `ms[n]`, or the last of `ms`, after what `hold` returns for it has settled.
     */
    function tracked(ms: readonly number[], hold?: (ctx: JobContext) => Promise<void> | undefined) {
      const startedAt = new Map<string, number>();
      let running = 0;
      let mostRunning = 0;
      const runningOf = new Map<string, number>();
      const mostRunningOf = new Map<string, number>();
      const handler: JobHandler = async (ctx) => {
        const duration = ms[startedAt.size] ?? ms.at(-1) ?? 0;
        startedAt.set(ctx.jobId, Date.now());
        running++;
        mostRunning = Math.max(mostRunning, running);
        const tenantRunning = (runningOf.get(ctx.tenantId) ?? 0) + 1;
        runningOf.set(ctx.tenantId, tenantRunning);
        mostRunningOf.set(
          ctx.tenantId,
          Math.max(mostRunningOf.get(ctx.tenantId) ?? 0, tenantRunning),
        );
        try {
          await hold?.(ctx);
          await new Promise((resolve) => setTimeout(resolve, duration));
        } finally {
          running--;
          runningOf.set(ctx.tenantId, (runningOf.get(ctx.tenantId) ?? 1) - 1);
        }
      };
      return {
        handler,
        startedAt,
        mostRunning: () => mostRunning,
        mostRunningOf: (tenantId: string) => mostRunningOf.get(tenantId) ?? 0,
      };
    }

    async function createMany(
      count: number,
      overrides: { tenantId: string; priority: Priority; type: string; runAt: string },
    ): Promise<string[]> {
      const ids: string[] = [];
      // One at a time: the queue holds them in this order.
      for (let i = 0; i < count; i++) {
        const created = await createJob(
          f.engine,
          testJob({
            tenantId: overrides.tenantId,
            priority: overrides.priority,
            type: overrides.type,
            schedule: { runAt: overrides.runAt },
          }),
        );
        ids.push(created.job.jobId);
      }
      return ids;
    }

    // The high runs are held until low's first run has started: with all ten slots taken by high
    // runs that do not end, only the guard (low received first, its slot kept) starts a low run,
    // whatever the machine's speed (docs/architecture.md "Starvation guard").
    it.sequential("keeps low priority's share of the slots while high is saturated (the starvation guard)", async () => {
      const highRuns = held();
      const track = tracked([300], (ctx) =>
        ctx.tenantId === "t-high" ? highRuns.released : undefined,
      );
      const now = new Date().toISOString();
      const high = await createMany(40, {
        tenantId: "t-high",
        priority: "high",
        type: "tracked-guard",
        runAt: now,
      });
      const low = await createMany(3, {
        tenantId: "t-low",
        priority: "low",
        type: "tracked-guard",
        runAt: now,
      });
      const stop = new AbortController();
      const loop = runWorkerLoop(f.workerDeps("guard", { "tracked-guard": track.handler }), {
        concurrency: 10,
        signal: stop.signal,
        idleWaitSeconds: 0,
        idleSleepMs: 20,
        lowPriorityShare: 0.1,
      });
      let highBeforeLow = Number.NaN;
      try {
        await waitFor(
          "low's first run to start beside high runs that do not end",
          () => low.some((id) => track.startedAt.has(id)),
          30_000,
        );
        highBeforeLow = high.filter((id) => track.startedAt.has(id)).length;
        highRuns.release();
        await waitFor(
          "every run to start",
          () => track.startedAt.size === high.length + low.length,
          30_000,
        );
      } finally {
        stop.abort();
        highRuns.release();
        await loop;
      }
      // Low's one slot of ten (10 %) is kept: high had at most the other nine.
      expect(
        highBeforeLow,
        `${highBeforeLow} high runs started before low's first`,
      ).toBeLessThanOrEqual(9);
      expect(track.mostRunning()).toBeLessThanOrEqual(10);
    }, 60_000);

    it.sequential("receives past a capped tenant's backlog: another tenant's runs behind it start at once, the capped one never runs more than its cap nor goes back through the table", async () => {
      // The backlog's runs are held until the quiet runs have started: the loop reaches the quiet
      // messages by receiving past the backlog, in as long as the machine takes for those receives.
      const backlogRuns = held();
      const track = tracked([300], (ctx) =>
        ctx.tenantId === "t-backlog" ? backlogRuns.released : undefined,
      );
      await writeQuotaOverride(f.engine, "t-backlog", { concurrentRuns: 2 }, new Date());
      const runAt = new Date().toISOString();
      // In queue order: the capped tenant's 40, then the quiet tenant's 3.
      const backlog = await createMany(40, {
        tenantId: "t-backlog",
        priority: "normal",
        type: "tracked-gate",
        runAt,
      });
      const quiet = await createMany(3, {
        tenantId: "t-quiet",
        priority: "normal",
        type: "tracked-gate",
        runAt,
      });
      const stop = new AbortController();
      // Four slots, eight messages held: without the gate, the backlog's messages fill the loop.
      const loop = runWorkerLoop(f.workerDeps("gate", { "tracked-gate": track.handler }), {
        concurrency: 4,
        signal: stop.signal,
        idleWaitSeconds: 0,
        idleSleepMs: 20,
      });
      try {
        await waitFor(
          "the quiet tenant's runs to start",
          () => quiet.every((id) => track.startedAt.has(id)),
          30_000,
        );
        const startedBacklog = backlog.filter((id) => track.startedAt.has(id)).length;
        // None of the backlog's runs ended: the quiet runs started beside its first two (its cap).
        expect(
          startedBacklog,
          `${startedBacklog} of the backlog's runs started first`,
        ).toBeLessThanOrEqual(2);
        backlogRuns.release();
        await waitFor("every run to start", () => track.startedAt.size === 43, 60_000);
      } finally {
        stop.abort();
        backlogRuns.release();
        await loop;
      }
      const ours = async () =>
        (await f.runs()).filter((r) => backlog.includes(r.jobId) || quiet.includes(r.jobId));
      await waitFor("every run to end", async () =>
        (await ours()).every((r) => r.status === "SUCCEEDED"),
      );
      const runs = await ours();
      expect(runs).toHaveLength(43);
      // Held at the gate, not sent back to wait: every run started once.
      expect(runs.map((r) => r.fence)).toEqual(runs.map(() => 1));
      expect(track.mostRunningOf("t-backlog")).toBeLessThanOrEqual(2);
    }, 90_000);

    it.sequential("gives a freed slot to the tenant with no run in progress before one whose runs fill the slots", async () => {
      // The first run takes 0.5 s and the second 1.5 s, so one slot is freed well before the other.
      const track = tracked([500, 1500, 100]);
      // Due together 2 s out: the loop holds four messages (two per slot) while they wait for
      // their second, in queue order big, big, big, small.
      const runAt = new Date(Math.ceil(Date.now() / SECOND) * SECOND + 2 * SECOND).toISOString();
      const big = await createMany(3, {
        tenantId: "t-big",
        priority: "normal",
        type: "tracked-turns",
        runAt,
      });
      const [small] = await createMany(1, {
        tenantId: "t-small",
        priority: "normal",
        type: "tracked-turns",
        runAt,
      });
      if (small === undefined) throw new Error("no small job");
      // Started when all four are visible, the loop receives them in queue order (the emulator
      // makes a delayed message visible up to a second early, by when it was sent).
      await sleep(Date.parse(runAt) - 100 - Date.now());
      const stop = new AbortController();
      const loop = runWorkerLoop(f.workerDeps("turns", { "tracked-turns": track.handler }), {
        concurrency: 2,
        signal: stop.signal,
        idleWaitSeconds: 0,
        idleSleepMs: 20,
      });
      try {
        await waitFor("every run to start", () => track.startedAt.size === 4, 30_000);
      } finally {
        stop.abort();
        await loop;
      }
      // The first freed slot goes to the small tenant, not to the big one's third run.
      const lastBig = Math.max(...big.map((id) => track.startedAt.get(id) ?? Number.NaN));
      expect(track.startedAt.get(small)).toBeLessThan(lastBig);
    }, 60_000);
  });

  describe("messages held at a tenant's gate", () => {
    let f: EngineFixture;
    // A 2 s lease: the loop receives with 4 s of visibility (the lease and the early wait).
    beforeAll(async () => {
      f = await createEngineFixture({ settings: { leaseMs: 2_000, misfireGraceMs: 60_000 } });
    });
    afterAll(() => f.destroy());

    it("stay invisible, and off the reaper's list, while they wait longer than their visibility and the lease", async () => {
      await writeQuotaOverride(f.engine, "t-slow", { concurrentRuns: 1 }, new Date());
      const received: string[] = [];
      f.engine.sqs.middlewareStack.add(
        (next, context) => async (args) => {
          const result = await next(args);
          if (context.commandName === "ReceiveMessageCommand") {
            const output = result.output as { Messages?: { Body?: string }[] };
            for (const m of output.Messages ?? []) {
              const message = decodeRunMessage(m.Body);
              if (message) received.push(message.jobId);
            }
          }
          return result;
        },
        { step: "initialize", name: "recordReceives" },
      );
      const runAt = new Date().toISOString();
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const created = await createJob(
          f.engine,
          testJob({ tenantId: "t-slow", type: "slow-gate", schedule: { runAt } }),
        );
        ids.push(created.job.jobId);
      }
      const handler: JobHandler = () => sleep(2_500);
      const stop = new AbortController();
      const loop = runWorkerLoop(f.workerDeps("held", { "slow-gate": handler }, 500), {
        concurrency: 4,
        signal: stop.signal,
        idleWaitSeconds: 0,
        idleSleepMs: 20,
      });
      let resent = 0;
      // The tick's reaper, as the sandbox runs it (here every second; the lease is 2 s).
      const ticking = (async () => {
        while (!stop.signal.aborted) {
          resent += (await reap(f.engine)).resent;
          await sleep(1_000);
        }
      })();
      try {
        // The third waits about 5 s at the gate, past its 4 s of visibility and its 2 s lease.
        await waitFor(
          "every run to succeed",
          async () => {
            const runs = (await f.runs()).filter((r) => ids.includes(r.jobId));
            return runs.length === 3 && runs.every((r) => r.status === "SUCCEEDED");
          },
          60_000,
          200,
        );
      } finally {
        stop.abort();
        await loop;
        await ticking;
      }
      const runs = (await f.runs()).filter((r) => ids.includes(r.jobId));
      expect({
        resent,
        received: received.filter((id) => ids.includes(id)).sort(),
        misfireFromSet: runs.filter((r) => r.misfireFrom !== null).length,
      }).toEqual({ resent: 0, received: [...ids].sort(), misfireFromSet: 0 });
    }, 90_000);
  });
});
