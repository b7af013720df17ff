import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { JobNotFoundError, RunCancelledError, RunNotFoundError } from "../../shared/errors.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import {
  cancelJob,
  cancelRun,
  createJob,
  pauseJob,
  resumeJob,
  triggerJob,
} from "../../shared/jobs/index.js";
import { rerunIfResumedMeanwhile } from "../../shared/jobs/resume.js";
import { MAX_ATTEMPT, shardOf } from "../../shared/keys.js";
import type { Job, Run } from "../../shared/model.js";
import { METRICS, MetricsRecorder } from "../../shared/observability.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import { writeResumedJob } from "../../shared/storage/job-status.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";
import { copyRunToAttempt } from "../support/seed.js";
import { yearlyCronHalfAYearAway } from "../support/time-of-day.js";
import { waitFor } from "../support/wait.js";

/** A yearly cron that never falls due while the file runs (time-of-day.ts). */
const YEARLY_CRON = yearlyCronHalfAYearAway();

const LEASE_MS = 3_000;
const HEARTBEAT_MS = 300;
/** A cancel is carried out within one heartbeat; the rest is the end write under a loaded machine. */
const WITHIN_HEARTBEAT_MS = HEARTBEAT_MS + 1_500;
/** Never comes: no near occurrence, so the only runs are the ones a test triggers. */
const YEARLY = { cron: YEARLY_CRON, timezone: "UTC" };

async function oneOffDueNow(f: EngineFixture, type: string, payload: unknown = {}) {
  const { job } = await createJob(
    f.engine,
    testJob({ type, payload, schedule: { runAt: new Date().toISOString() }, timeoutSeconds: 60 }),
  );
  const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
  return { job, received };
}

async function recurringTriggered(f: EngineFixture, type: string, payload: unknown = {}) {
  const { job } = await createJob(
    f.engine,
    testJob({ type, payload, schedule: YEARLY, timeoutSeconds: 60 }),
  );
  const run = await triggerJob(f.engine, job.tenantId, job.jobId);
  const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
  return { job, run, received };
}

async function runsOf(f: EngineFixture, jobId: string): Promise<Run[]> {
  return (await f.runs()).filter((r) => r.jobId === jobId);
}

async function runningRun(f: EngineFixture, jobId: string): Promise<Run> {
  return waitFor("the run to be running", async () =>
    (await runsOf(f, jobId)).find((r) => r.status === "RUNNING"),
  );
}

async function jobOf(f: EngineFixture, jobId: string): Promise<Job> {
  const job = await getJob(f.engine, jobId);
  if (job === null) throw new Error(`job ${jobId} is gone`);
  return job;
}

/**
 * The three describes run side by side (describe.concurrent), each on its fixture (tables, queues,
 * settings and log of its own) and each case on jobs of its own; within a describe the cases still
 * run one after another (it.sequential), as they did, so a case's heartbeat bound has at most two
 * neighbours beside it.
 */
describe.concurrent("cancelling a run", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
  });
  afterAll(() => f.destroy());

  it.sequential("a running sleep is cancelled within one heartbeat: its signal says cancelled, the run ends CANCELLED with when and by what, and no retry follows", async () => {
    let signal: AbortSignal | undefined;
    const deps = f.workerDeps(
      "worker-a",
      {
        sleepy: async (ctx: JobContext) => {
          signal = ctx.signal;
          await sleep(30_000, ctx.signal);
        },
      },
      HEARTBEAT_MS,
    );
    const { job, received } = await oneOffDueNow(f, "sleepy");
    const processing = f.process(deps, received);
    const running = await runningRun(f, job.jobId);

    const asked = await cancelRun(f.engine, job.tenantId, job.jobId, running.runId);
    const askedAt = Date.now();
    expect(asked).toMatchObject({ status: "RUNNING", cancelledBy: "api" });
    expect(asked.cancelRequestedAt).not.toBeNull();

    expect(await processing).toBe("ack");
    expect(Date.now() - askedAt).toBeLessThan(WITHIN_HEARTBEAT_MS);
    expect(signal?.aborted).toBe(true);
    expect(signal?.reason).toBeInstanceOf(RunCancelledError);
    const reason: unknown = signal?.reason;
    expect(reason instanceof Error ? reason.message : "").toContain("cancelled");

    const runs = await runsOf(f, job.jobId);
    expect(runs).toHaveLength(1);
    const [ended] = runs;
    expect(ended).toMatchObject({
      status: "CANCELLED",
      cancelledBy: "api",
      cancelRequestedAt: asked.cancelRequestedAt,
      reason: "run cancelled",
    });
    expect(Date.parse(ended?.finishedAt ?? "")).toBeGreaterThanOrEqual(
      Date.parse(asked.cancelRequestedAt ?? ""),
    );
    // The one-off has nothing left to run.
    expect((await jobOf(f, job.jobId)).status).toBe("COMPLETED");
    // A repeat (a client's retry) answers the run as it ended.
    expect(await cancelRun(f.engine, job.tenantId, job.jobId, running.runId)).toEqual(ended);
  }, 40_000);

  it.sequential("a running webhook is cancelled within one heartbeat and its request is aborted", async () => {
    const closedEarly: number[] = [];
    const server: Server = createServer((request, response) => {
      request.resume();
      const answer = setTimeout(() => {
        response.writeHead(200);
        response.end("{}");
      }, 30_000);
      // The connection closing before the answer is the worker giving up on the request.
      response.on("close", () => {
        if (!response.writableFinished) closedEarly.push(Date.now());
        clearTimeout(answer);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "http",
          payload: { hello: "slow" },
          target: { url, timeoutSeconds: 60 },
          schedule: { runAt: new Date().toISOString() },
          timeoutSeconds: 60,
        }),
      );
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      const processing = f.process(f.workerDeps("worker-web", {}, HEARTBEAT_MS), received);
      const running = await runningRun(f, job.jobId);
      // The request is under way at the receiver.
      await sleep(200);

      await cancelRun(f.engine, job.tenantId, job.jobId, running.runId);
      const askedAt = Date.now();
      expect(await processing).toBe("ack");
      expect(Date.now() - askedAt).toBeLessThan(WITHIN_HEARTBEAT_MS);
      await waitFor("the request to be aborted", () => closedEarly.length === 1, 5_000);
      expect((closedEarly[0] ?? 0) - askedAt).toBeLessThan(WITHIN_HEARTBEAT_MS);
      const runs = await runsOf(f, job.jobId);
      expect(runs.map((r) => [r.status, r.cancelledBy])).toEqual([["CANCELLED", "api"]]);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }, 40_000);

  it.sequential.each([
    ["succeeds", async () => ({ ok: true })],
    [
      "fails (retryable)",
      async () => {
        throw new Error("boom");
      },
    ],
  ])(
    "a handler that ignores its signal and then %s records nothing but CANCELLED; no retry",
    async (outcome, ending) => {
      let release: () => void = () => undefined;
      const released = new Promise<void>((resolve) => {
        release = resolve;
      });
      // Its heartbeat never comes before the handler ends: only the end write can see the cancel.
      const deps = f.workerDeps(
        "worker-deaf",
        {
          deaf: async () => {
            await released;
            return ending();
          },
        },
        60_000,
      );
      const { job, received } = await oneOffDueNow(f, "deaf");
      const processing = f.process(deps, received);
      const running = await runningRun(f, job.jobId);
      await cancelRun(f.engine, job.tenantId, job.jobId, running.runId);
      release();
      expect(await processing).toBe("ack");

      const runs = await runsOf(f, job.jobId);
      // A failure puts its next attempt before its ending; refused by the cancel, it takes it back.
      const retried = outcome === "fails (retryable)" ? [[2, "SKIPPED", null]] : [];
      expect(runs.map((r) => [r.attempt, r.status, r.cancelledBy])).toEqual([
        [1, "CANCELLED", "api"],
        ...retried,
      ]);
      expect(runs[0]?.durationMs).not.toBeNull();
      expect((await f.dueEntries()).filter((e) => e.jobId === job.jobId)).toEqual([]);
      expect((await jobOf(f, job.jobId)).status).toBe("COMPLETED");
    },
    40_000,
  );

  it.sequential("a queued run is cancelled at once; its message is acknowledged without running", async () => {
    let ran = false;
    const deps = f.workerDeps("worker-q", {
      marker: async () => {
        ran = true;
      },
    });
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "marker",
        payload: {},
        schedule: { runAt: new Date(Date.now() + 2_000).toISOString() },
      }),
    );
    const [queued] = await runsOf(f, job.jobId);
    expect(queued?.status).toBe("QUEUED");
    const cancelled = await cancelRun(f.engine, job.tenantId, job.jobId, queued?.runId ?? "");
    expect(cancelled).toMatchObject({
      status: "CANCELLED",
      cancelledBy: "api",
      reason: "run cancelled",
    });
    expect(cancelled.cancelRequestedAt).toBe(cancelled.finishedAt);
    expect((await jobOf(f, job.jobId)).status).toBe("COMPLETED");

    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(deps, received)).toBe("ack");
    expect(ran).toBe(false);
    expect((await runsOf(f, job.jobId)).map((r) => r.status)).toEqual(["CANCELLED"]);
  }, 30_000);

  it.sequential("a run whose worker died after the cancel request is ended by its next delivery without running", async () => {
    let ran = false;
    const deps = f.workerDeps("worker-next", {
      marker: async () => {
        ran = true;
      },
    });
    const { job, received } = await oneOffDueNow(f, "marker");
    // A worker starts it and dies: the run is RUNNING under its lease.
    const started = await startRun(f.engine, received.message, "worker-dead", new Date());
    expect(started.kind).toBe("started");
    const run = await getRun(f.engine, received.message);
    const asked = await cancelRun(f.engine, job.tenantId, job.jobId, run?.runId ?? "");
    expect(asked.status).toBe("RUNNING");
    await sleep(LEASE_MS + 200);

    expect(await processRun(deps, received)).toBe("ack");
    expect(ran).toBe(false);
    const runs = await runsOf(f, job.jobId);
    expect(runs.map((r) => [r.status, r.cancelledBy, r.fence])).toEqual([["CANCELLED", "api", 2]]);
  }, 30_000);

  it.sequential("a cancel whose job write meets a claim's transaction (TransactionConflict) tries it again and ends the run", async () => {
    const { job, received } = await recurringTriggered(f, "noop");
    // A worker started it a lease ago and died: no worker holds it, so the cancel ends it now.
    const started = await startRun(
      f.engine,
      received.message,
      "worker-dead",
      new Date(Date.now() - LEASE_MS - 1_000),
    );
    if (started.kind !== "started") throw new Error(`not started: ${started.kind}`);
    const faulty = withFaults(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => String(input.UpdateExpression).startsWith("REMOVE activeRuns"),
    });
    try {
      const cancelled = await cancelRun(faulty.engine, job.tenantId, job.jobId, started.run.runId);
      expect(cancelled).toMatchObject({ status: "CANCELLED", cancelledBy: "api" });
    } finally {
      faulty.destroy();
    }
    expect(faulty.injected.count).toBe(1);
    expect((await jobOf(f, job.jobId)).activeRuns).not.toHaveProperty(started.run.runId);
  }, 30_000);

  it.sequential("a job cancel whose sweep's ending of a queued run meets a transaction (TransactionConflict) tries it again: the cancel answers, the run ends CANCELLED", async () => {
    const { job, run } = await recurringTriggered(f, "noop");
    const faulty = withFaults(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) =>
        input.TableName === f.engine.tables.runs &&
        input.ConditionExpression === "#status = :was AND fence = :fence",
    });
    try {
      await expect(cancelJob(faulty.engine, job.tenantId, job.jobId)).resolves.toMatchObject({
        status: "CANCELLED",
      });
    } finally {
      faulty.destroy();
    }
    expect(faulty.injected.count).toBe(1);
    expect((await runsOf(f, job.jobId)).map((r) => [r.runId, r.status])).toEqual([
      [run.runId, "CANCELLED"],
    ]);
  }, 30_000);

  it.sequential("unknown runs, another job's run and another tenant's job are not found", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: YEARLY }));
    const { job: other } = await createJob(f.engine, testJob({ schedule: YEARLY }));
    const run = await triggerJob(f.engine, job.tenantId, job.jobId);
    await expect(cancelRun(f.engine, "tenant-b", job.jobId, run.runId)).rejects.toThrow(
      JobNotFoundError,
    );
    await expect(cancelRun(f.engine, job.tenantId, other.jobId, run.runId)).rejects.toThrow(
      RunNotFoundError,
    );
    await expect(cancelRun(f.engine, job.tenantId, job.jobId, "nonsense")).rejects.toThrow(
      RunNotFoundError,
    );
    await expect(
      cancelRun(f.engine, job.tenantId, job.jobId, `${job.jobId}-20300101T000000000-1`),
    ).rejects.toThrow(RunNotFoundError);
  });
});

describe.concurrent("cancelling a job's running runs", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
  });
  afterAll(() => f.destroy());

  const sleepy = (f: EngineFixture, workerId: string) =>
    f.workerDeps(
      workerId,
      { sleepy: async (ctx: JobContext) => sleep(30_000, ctx.signal) },
      HEARTBEAT_MS,
    );

  it.sequential("POST /jobs/{id}/cancel also cancels a running run (cancelledBy job-cancel), within a heartbeat", async () => {
    const { job, received } = await recurringTriggered(f, "sleepy");
    const processing = f.process(sleepy(f, "worker-jc"), received);
    await runningRun(f, job.jobId);
    // The worker lists the run on its job (its admission) a moment after starting it.
    await waitFor(
      "the run's admission",
      async () => Object.keys((await jobOf(f, job.jobId)).activeRuns).length === 1,
    );

    const cancelled = await cancelJob(f.engine, job.tenantId, job.jobId);
    const askedAt = Date.now();
    expect(cancelled.status).toBe("CANCELLED");
    expect(await processing).toBe("ack");
    expect(Date.now() - askedAt).toBeLessThan(WITHIN_HEARTBEAT_MS);
    const runs = await runsOf(f, job.jobId);
    expect(runs.map((r) => [r.status, r.cancelledBy, r.reason])).toEqual([
      ["CANCELLED", "job-cancel", "job cancelled"],
    ]);
    const after = await jobOf(f, job.jobId);
    expect(after.activeRuns).toEqual({});
    expect(after.lastRun?.status).toBe("CANCELLED");
  }, 40_000);

  it.sequential("pause with running: cancel cancels the run in progress (cancelledBy pause); the job stays paused", async () => {
    const { job, received } = await recurringTriggered(f, "sleepy");
    const processing = f.process(sleepy(f, "worker-pc"), received);
    await runningRun(f, job.jobId);

    const paused = await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    const askedAt = Date.now();
    expect(paused.status).toBe("PAUSED");
    expect(await processing).toBe("ack");
    expect(Date.now() - askedAt).toBeLessThan(WITHIN_HEARTBEAT_MS);
    const runs = await runsOf(f, job.jobId);
    expect(runs.map((r) => [r.status, r.cancelledBy])).toEqual([["CANCELLED", "pause"]]);
    expect((await jobOf(f, job.jobId)).status).toBe("PAUSED");
  }, 40_000);

  it.sequential("pause with running: finish (the default) lets the run in progress succeed", async () => {
    const { job, received } = await recurringTriggered(f, "sleep", { ms: 1_500 });
    const processing = f.process(f.workerDeps("worker-pf", {}, HEARTBEAT_MS), received);
    await runningRun(f, job.jobId);

    const paused = await pauseJob(f.engine, job.tenantId, job.jobId, { running: "finish" });
    expect(paused.status).toBe("PAUSED");
    expect(await processing).toBe("ack");
    const runs = await runsOf(f, job.jobId);
    expect(runs.map((r) => [r.status, r.cancelledBy ?? null])).toEqual([["SUCCEEDED", null]]);
  }, 40_000);

  /** A one-off `sleep` of `ms`, running under a worker, paused with running: cancel until its run ended. */
  async function pauseCancelledOneOff(ms: number, misfire: MisfirePolicy = "fire_once") {
    const runAt = new Date().toISOString();
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "sleep",
        payload: { ms },
        schedule: { runAt },
        policies: { ...testJob().policies, misfire },
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const processing = f.process(f.workerDeps("worker-pr", {}, HEARTBEAT_MS), received);
    await runningRun(f, job.jobId);
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    expect(await processing).toBe("ack");
    const runs = await runsOf(f, job.jobId);
    expect(runs.map((r) => [r.attempt, r.status, r.cancelledBy])).toEqual([
      [1, "CANCELLED", "pause"],
    ]);
    expect((await jobOf(f, job.jobId)).status).toBe("PAUSED");
    return { job, runAt };
  }

  const byAttempt = (runs: Run[]) => [...runs].sort((a, b) => a.attempt - b.attempt);

  it.sequential("a one-off paused with running: cancel runs again on resume (its next attempt) and completes", async () => {
    const { job, runAt } = await pauseCancelledOneOff(2_000);

    const resumed = await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(resumed.status).toBe("ACTIVE");
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(received.message.attempt).toBe(2);
    expect(await f.process(f.workerDeps("worker-pr2", {}, HEARTBEAT_MS), received)).toBe("ack");

    const runs = byAttempt(await runsOf(f, job.jobId));
    expect(runs.map((r) => [r.attempt, r.status, r.scheduledFor])).toEqual([
      [1, "CANCELLED", runAt],
      [2, "SUCCEEDED", runAt],
    ]);
    expect(await jobOf(f, job.jobId)).toMatchObject({ status: "COMPLETED", nextRunAt: null });
    expect((await f.dueEntries()).filter((e) => e.jobId === job.jobId)).toEqual([]);
  }, 40_000);

  it.sequential("resume called twice at once, and once more, gives the paused-and-cancelled one-off exactly one new run", async () => {
    const { job } = await pauseCancelledOneOff(30_000);

    const both = await Promise.all([
      resumeJob(f.engine, job.tenantId, job.jobId),
      resumeJob(f.engine, job.tenantId, job.jobId),
    ]);
    expect(both.map((j) => j.status)).toEqual(["ACTIVE", "ACTIVE"]);
    expect((await resumeJob(f.engine, job.tenantId, job.jobId)).status).toBe("ACTIVE");

    const runs = byAttempt(await runsOf(f, job.jobId));
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([
      [1, "CANCELLED"],
      [2, "QUEUED"],
    ]);
    expect((await f.dueEntries()).filter((e) => e.jobId === job.jobId)).toEqual([]);
    const deliveries = await f.receiveAll(f.engine.queues.normal, { quietMs: 1_500 });
    expect(
      deliveries.filter((d) => d.message.jobId === job.jobId).map((d) => d.message.attempt),
    ).toEqual([2]);
  }, 40_000);

  it.sequential("under misfire skip, a resume past the grace records the one-off's new run SKIPPED and completes the job", async () => {
    const { job } = await pauseCancelledOneOff(30_000, "skip");
    const later = new Date(Date.now() + f.engine.settings.misfireGraceMs + 60_000);

    const resumed = await resumeJob({ ...f.engine, clock: () => later }, job.tenantId, job.jobId);
    expect(resumed.status).toBe("COMPLETED");
    const runs = byAttempt(await runsOf(f, job.jobId));
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([
      [1, "CANCELLED"],
      [2, "SKIPPED"],
    ]);
    expect(runs[1]?.reason).toContain("policy skip");
    expect((await f.dueEntries()).filter((e) => e.jobId === job.jobId)).toEqual([]);
  }, 40_000);

  it.sequential("a resume before the paused one-off's cancelled run has ended: that ending does not complete the job, and the new run does", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "sleep",
        payload: { ms: 1_000 },
        schedule: { runAt: new Date().toISOString() },
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // No heartbeat before the handler ends: only the end write sees the pause's cancel request.
    const processing = f.process(f.workerDeps("worker-late", {}, 60_000), received);
    await runningRun(f, job.jobId);
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    expect((await resumeJob(f.engine, job.tenantId, job.jobId)).status).toBe("ACTIVE");
    expect(await processing).toBe("ack");
    expect((await jobOf(f, job.jobId)).status).toBe("ACTIVE");

    const next = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(next.message.attempt).toBe(2);
    expect(await f.process(f.workerDeps("worker-late2", {}, HEARTBEAT_MS), next)).toBe("ack");
    const runs = byAttempt(await runsOf(f, job.jobId));
    expect(runs.map((r) => [r.attempt, r.status, r.cancelledBy ?? null])).toEqual([
      [1, "CANCELLED", "pause"],
      [2, "SUCCEEDED", null],
    ]);
    expect((await jobOf(f, job.jobId)).status).toBe("COMPLETED");
  }, 40_000);

  it.sequential.for(["transaction", "plain"] as const)(
    "a resume whose claim never happens (it died after its write) leaves the entry: the next pass gives the one-off its one new run (oneOffClaimWrites %s)",
    { timeout: 40_000 },
    async (claimWrites) => {
      const { job, runAt } = await pauseCancelledOneOff(30_000);
      // The claim's commit moves the job on, counting its queued occurrences: the transaction's
      // job update, or a one-off's plain job update with plain claims on.
      const countsQueued = (update: unknown) => String(update).includes("occurrencesQueued");
      const claims = (input: Record<string, unknown>) =>
        claimWrites === "plain"
          ? countsQueued(input.UpdateExpression)
          : (
              (input.TransactItems as { Update?: { UpdateExpression?: string } }[] | undefined) ??
              []
            ).some((item) => countsQueued(item.Update?.UpdateExpression));
      const engine = {
        ...f.engine,
        settings: { ...f.engine.settings, oneOffClaimWrites: claimWrites },
      };
      const faulty = withFaults(
        engine,
        claimWrites === "plain"
          ? {
              operation: "UpdateItem",
              times: 1,
              match: claims,
              error: () =>
                Object.assign(new Error("injected refusal"), {
                  name: "ValidationException",
                  $metadata: { httpStatusCode: 400 },
                }),
            }
          : { operation: "TransactWriteItems", times: 1, match: claims, reason: "ValidationError" },
      );
      try {
        const resumed = await resumeJob(faulty.engine, job.tenantId, job.jobId);
        expect(resumed).toMatchObject({ status: "ACTIVE", nextRunAt: runAt });
        expect(faulty.injected.count).toBe(1);
      } finally {
        faulty.destroy();
      }
      // The claim put the new attempt's run before its commit failed: it waits, unsent, and
      // the entry is still there.
      expect(byAttempt(await runsOf(f, job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
        [1, "CANCELLED"],
        [2, "QUEUED"],
      ]);
      expect((await f.dueEntries()).filter((e) => e.jobId === job.jobId)).toHaveLength(1);
      expect((await resumeJob(engine, job.tenantId, job.jobId)).status).toBe("ACTIVE");
      const shard = shardOf(job.jobId, f.engine.settings.shardCount);
      await dispatchShard(engine, shard, "pass-resume-1");
      await dispatchShard(engine, shard, "pass-resume-2");
      const runs = byAttempt(await runsOf(f, job.jobId));
      expect(runs.map((r) => [r.attempt, r.status])).toEqual([
        [1, "CANCELLED"],
        [2, "QUEUED"],
      ]);
      expect((await f.dueEntries()).filter((e) => e.jobId === job.jobId)).toEqual([]);
    },
  );

  it.sequential("a resume that commits before the pause has asked its running run to cancel: the one-off still gets its new run", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "sleep",
        payload: { ms: 1_000 },
        schedule: { runAt: new Date().toISOString() },
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const processing = f.process(f.workerDeps("worker-race", {}, HEARTBEAT_MS), received);
    await runningRun(f, job.jobId);
    const name = "resumeBeforeCancelRequest";
    let resumedFirst = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        const input = args.input as { UpdateExpression?: string };
        if (!resumedFirst && input.UpdateExpression?.startsWith("SET cancelRequestedAt")) {
          resumedFirst = true;
          expect((await resumeJob(f.engine, job.tenantId, job.jobId)).status).toBe("ACTIVE");
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(resumedFirst).toBe(true);
    expect(await processing).toBe("ack");

    const next = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(next.message.attempt).toBe(2);
    expect(await f.process(f.workerDeps("worker-race2", {}, HEARTBEAT_MS), next)).toBe("ack");
    const runs = byAttempt(await runsOf(f, job.jobId));
    expect(runs.map((r) => [r.attempt, r.status, r.cancelledBy ?? null])).toEqual([
      [1, "CANCELLED", "pause"],
      [2, "SUCCEEDED", null],
    ]);
    expect((await jobOf(f, job.jobId)).status).toBe("COMPLETED");
  }, 40_000);

  it.sequential("a resume that committed before the pause cancelled the one-off's run at attempt 9999: the pause completes the job, with no next attempt", async () => {
    const { job, runAt } = await pauseCancelledOneOff(30_000);
    await copyRunToAttempt(
      f.engine,
      { jobId: job.jobId, scheduledFor: runAt, attempt: 1 },
      MAX_ATTEMPT,
    );
    // As the resume that committed first left it: ACTIVE, its one-off's run not yet asked to cancel.
    await writeResumedJob(f.engine, await jobOf(f, job.jobId), null, new Date());

    await rerunIfResumedMeanwhile(f.engine, job.tenantId, job.jobId);
    expect(await jobOf(f, job.jobId)).toMatchObject({ status: "COMPLETED", nextRunAt: null });
    expect(byAttempt(await runsOf(f, job.jobId)).map((r) => [r.attempt, r.status])).toEqual([
      [1, "CANCELLED"],
      [MAX_ATTEMPT, "CANCELLED"],
    ]);
    expect((await f.dueEntries()).filter((e) => e.jobId === job.jobId)).toEqual([]);
  }, 40_000);

  it.sequential("a one-off whose run finished while it was paused (running: finish) is COMPLETED on resume, not ACTIVE with nothing to run", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "sleep",
        payload: { ms: 1_000 },
        schedule: { runAt: new Date().toISOString() },
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const processing = f.process(f.workerDeps("worker-fin", {}, HEARTBEAT_MS), received);
    await runningRun(f, job.jobId);
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "finish" });
    expect(await processing).toBe("ack");
    expect((await runsOf(f, job.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect((await jobOf(f, job.jobId)).status).toBe("PAUSED");

    expect(await resumeJob(f.engine, job.tenantId, job.jobId)).toMatchObject({
      status: "COMPLETED",
      nextRunAt: null,
    });
    expect((await runsOf(f, job.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect((await f.dueEntries()).filter((e) => e.jobId === job.jobId)).toEqual([]);
  }, 40_000);
});

describe.concurrent("a run cancelled while its worker runs it with its start unwritten", () => {
  const warnings: string[] = [];
  const infos: string[] = [];
  let f: EngineFixture;
  beforeAll(async () => {
    const noop = () => undefined;
    f = await createEngineFixture({
      settings: { leaseMs: 30_000 },
      obs: {
        log: {
          debug: noop,
          info: (message) => infos.push(message),
          warn: (message) => warnings.push(message),
          error: noop,
        },
        metrics: { add: noop },
      },
    });
  });
  afterAll(() => f.destroy());

  it.sequential("is told as a cancel in the worker's log and counts no lost fence: no other worker took it over", async () => {
    let release = () => {};
    let started = () => {};
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    // The default heartbeat (a third of the lease, 10 s): the start stays unwritten meanwhile.
    const deps = f.workerDeps("worker-u", {
      held: async () => {
        started();
        await new Promise<void>((resolve) => {
          release = resolve;
        });
      },
    });
    const { job, received } = await oneOffDueNow(f, "held");
    const processing = f.process(deps, received);
    await running;
    const [queued] = await runsOf(f, job.jobId);
    expect(queued?.status).toBe("QUEUED");
    await cancelRun(f.engine, job.tenantId, job.jobId, queued?.runId ?? "");
    release();

    expect(await processing).toBe("ack");
    expect((await runsOf(f, job.jobId)).map((r) => [r.status, r.cancelledBy])).toEqual([
      ["CANCELLED", "api"],
    ]);
    const metrics = f.engine.obs.metrics;
    if (!(metrics instanceof MetricsRecorder)) throw new Error("the fixture records metrics");
    expect(metrics.sum(METRICS.fenceLost)).toBe(0);
    expect(warnings.filter((w) => w.includes("another worker"))).toEqual([]);
    expect(infos.filter((i) => i.includes("cancelled"))).toHaveLength(1);
  }, 30_000);
});
