import { afterAll, beforeAll, describe, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { type JobContext, JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import type { WorkerDeps } from "../../shared/execution/worker.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob, editJob, replayDeadLetter, triggerJob } from "../../shared/jobs/index.js";
import { listDeadLetters } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { sendRuns } from "../../shared/queue/work-queue.js";
import { runMessageOf } from "../../shared/storage/items.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { yearlyCronHalfAYearAway } from "../support/time-of-day.js";
import { waitFor } from "../support/wait.js";

/** A yearly cron that never falls due while the file runs (time-of-day.ts). */
const YEARLY_CRON = yearlyCronHalfAYearAway();

const recheckingSoon = <Deps extends WorkerDeps>(deps: Deps): Deps => ({
  ...deps,
  overlapRecheckMs: 1_000,
});

/**
 * `allow` with maxConcurrent 2 holds its bound whatever reaches the workers at once: triggered
 * runs, each delivered twice, replays of dead letters, and the retries of runs that fail.
 *
 * The two describes run side by side (describe.concurrent), each on tables and queues of its own:
 * each case counts only its own handler's runs, and neither bounds real time; one after another
 * they took 16 s in the last fresh-clone CI, most of it waiting on runs that sleep or are held.
 */
describe.concurrent("allow's maxConcurrent under triggers, replays, retries and duplicate deliveries at once", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("never runs more than maxConcurrent, and runs each run once", async ({ expect }) => {
    let phase: "dying" | "running" = "dying";
    let active = 0;
    let most = 0;
    const calls = new Map<string, number>();
    let retryableFailuresLeft = 2;
    const handlers: Record<string, JobHandler> = {
      tracked: async (ctx: JobContext) => {
        if (phase === "dying") throw new JobError("target down", { retryable: false });
        calls.set(ctx.runId, (calls.get(ctx.runId) ?? 0) + 1);
        active++;
        most = Math.max(most, active);
        try {
          await sleep(1200);
          if (retryableFailuresLeft > 0) {
            retryableFailuresLeft--;
            throw new Error("flaky");
          }
        } finally {
          active--;
        }
      },
    };
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "tracked",
        schedule: { cron: YEARLY_CRON, timezone: "UTC" },
        policies: {
          ...testJob().policies,
          overlap: "allow",
          maxConcurrent: 2,
          retry: { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 0 },
        },
      }),
    );
    // Three dead letters, one after another.
    for (let i = 0; i < 3; i++) {
      const run = await triggerJob(f.engine, job.tenantId, job.jobId);
      let received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      while (received.message.scheduledFor !== run.scheduledFor)
        received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      await f.process(f.workerDeps("outage", handlers), received);
    }
    const dead = await listDeadLetters(f.engine, job.tenantId, { limit: 100 });
    expect(dead.items).toHaveLength(3);

    phase = "running";
    const stop = new AbortController();
    const loop = runWorkerLoop(recheckingSoon(f.workerDeps("loop", handlers)), {
      concurrency: 10,
      signal: stop.signal,
    });
    try {
      const [triggered, replayed] = await Promise.all([
        Promise.all(Array.from({ length: 4 }, () => triggerJob(f.engine, job.tenantId, job.jobId))),
        Promise.all(
          dead.items.map(
            async (d) => (await replayDeadLetter(f.engine, job.tenantId, d.runId)).run,
          ),
        ),
      ]);
      // Every triggered run's message is delivered twice.
      await sendRuns(
        f.engine.sqs,
        f.engine.queues,
        triggered.map((run) => ({ message: runMessageOf(run), dueAt: new Date(run.dueAt) })),
        f.engine.clock(),
      );
      const ours = (runs: Run[]) => runs.filter((r) => r.jobId === job.jobId);
      const ended = await waitFor(
        "every run to end",
        async () => {
          const runs = ours(await f.runs());
          return runs.length >= 3 + 4 + 3 + 2 &&
            runs.every((r) => r.status !== "QUEUED" && r.status !== "RUNNING")
            ? runs
            : undefined;
        },
        60_000,
      );
      expect(most).toBe(2);
      // Each run's handler ran once.
      expect([...calls.values()].filter((n) => n !== 1)).toEqual([]);
      const statuses = ended.map((r) => r.status).sort();
      // 3 dead, 2 failed and retried, 4 + 3 + 2 succeeded (the retries among them).
      expect(statuses.filter((s) => s === "SKIPPED")).toEqual([]);
      expect(statuses.filter((s) => s === "FAILED")).toHaveLength(2);
      expect(statuses.filter((s) => s === "SUCCEEDED")).toHaveLength(4 + 3);
      for (const r of [...triggered, ...replayed])
        expect(
          ended.some((e) => e.scheduledFor === r.scheduledFor && e.status === "SUCCEEDED"),
        ).toBe(true);
    } finally {
      stop.abort();
      await loop;
    }
  }, 90_000);
});

describe.concurrent("allow's maxConcurrent lowered while runs are under way", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("runs started after the edit keep to the new bound: none beside the three still running", async ({
    expect,
  }) => {
    let active = 0;
    const activeAtStart = new Map<string, number>();
    let release: () => void = () => undefined;
    const firstThree = new Promise<void>((resolve) => {
      release = resolve;
    });
    let held = 3;
    const handlers: Record<string, JobHandler> = {
      tracked: async (ctx: JobContext) => {
        activeAtStart.set(ctx.runId, active);
        active++;
        try {
          if (held > 0) {
            held--;
            await firstThree;
          } else await sleep(500);
        } finally {
          active--;
        }
      },
    };
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "tracked",
        schedule: { cron: YEARLY_CRON, timezone: "UTC" },
        policies: { ...testJob().policies, overlap: "allow", maxConcurrent: 3 },
      }),
    );
    const stop = new AbortController();
    const loop = runWorkerLoop(recheckingSoon(f.workerDeps("loop", handlers)), {
      concurrency: 10,
      signal: stop.signal,
    });
    try {
      const before = await Promise.all(
        Array.from({ length: 3 }, () => triggerJob(f.engine, job.tenantId, job.jobId)),
      );
      await waitFor("three runs under way", () => active === 3, 20_000);
      const current = await getJob(f.engine, job.jobId);
      if (!current) throw new Error("job gone");
      await editJob(f.engine, job.tenantId, job.jobId, current.version, {
        policies: { ...current.policies, maxConcurrent: 1 },
      });
      const after = await Promise.all(
        Array.from({ length: 3 }, () => triggerJob(f.engine, job.tenantId, job.jobId)),
      );
      // They wait while the three run.
      await sleep(2500);
      expect(after.filter((r) => activeAtStart.has(r.runId))).toEqual([]);
      release();
      const ended = await waitFor(
        "every run to end",
        async () => {
          const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
          return runs.length === 6 && runs.every((r) => r.status === "SUCCEEDED")
            ? runs
            : undefined;
        },
        40_000,
      );
      expect(ended).toHaveLength(6);
      expect(before.map((r) => activeAtStart.get(r.runId)).sort()).toEqual([0, 1, 2]);
      expect(after.map((r) => activeAtStart.get(r.runId))).toEqual([0, 0, 0]);
    } finally {
      stop.abort();
      await loop;
    }
  }, 90_000);
});
