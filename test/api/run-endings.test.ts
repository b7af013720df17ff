import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { type RunDto, RunPageSchema, RunSchema } from "../../shared/api/schemas/runs.js";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import { processRun } from "../../shared/execution/worker.js";
import { cancelRun } from "../../shared/jobs/cancel-run.js";
import { type ReceivedRun, receiveRuns, setVisibility } from "../../shared/queue/work-queue.js";
import { takeTenantSlot } from "../../shared/quotas/concurrency.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { withFaults } from "../support/faults.js";
import { yearlyCronHalfAYearAway } from "../support/time-of-day.js";
import { type ApiHarness, runOnce, startApi, TENANT_A } from "./support.js";

/** A yearly cron that never falls due while the file runs (time-of-day.ts). */
const YEARLY_CRON = yearlyCronHalfAYearAway();

/**
 * "Did my run happen, when did it start and end, how many attempts, why did it fail": each way an
 * occurrence ends, run by the worker code, as GET /jobs/{id}/runs and the job's lastRun answer it.
 */
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

async function created(body: Record<string, unknown>, on = api): Promise<string> {
  const reply = await on.call("POST", "/jobs", { body });
  expect(reply.status, reply.text).toBe(201);
  return JobSchema.parse(reply.body).id;
}

/** The job's history, newest first, each run's times checked: due, then started, then ended. */
async function historyOf(jobId: string, on = api): Promise<RunDto[]> {
  const reply = await on.call("GET", `/jobs/${jobId}/runs`);
  expect(reply.status, reply.text).toBe(200);
  const runs = RunPageSchema.parse(reply.body).items;
  for (const run of runs) {
    expect(run.finishedAt, run.runId).not.toBeNull();
    if (run.startedAt === null) continue;
    expect(run.startedAt >= run.dueAt, `${run.runId} started before it was due`).toBe(true);
    expect(run.finishedAt !== null && run.finishedAt >= run.startedAt).toBe(true);
    expect(run.durationMs).toBe(Date.parse(run.finishedAt ?? "") - Date.parse(run.startedAt));
  }
  return runs;
}

const lastRunOf = async (jobId: string, on = api) =>
  JobSchema.parse((await on.call("GET", `/jobs/${jobId}`)).body).lastRun;
const summary = (run: RunDto | undefined) =>
  run && {
    runId: run.runId,
    status: run.status,
    scheduledFor: run.scheduledFor,
    attempt: run.attempt,
    finishedAt: run.finishedAt,
  };
const shape = (runs: RunDto[]) => runs.map((r) => [r.attempt, r.status, r.error ?? r.reason]);
const noBackoff = { initialDelaySeconds: 0, maxDelaySeconds: 0 };

describe("every ending in the history", () => {
  it("a failure, its retry's success: both attempts of the one occurrence, the success its lastRun", async () => {
    const id = await created({
      type: "fail",
      payload: { times: 1, retryable: true },
      schedule: { runAt: new Date().toISOString() },
      retry: { maxAttempts: 3, ...noBackoff },
    });
    await runOnce(api, id);
    await runOnce(api, id);
    const runs = await historyOf(id);
    expect(shape(runs)).toEqual([
      [2, "succeeded", null],
      [1, "failed", "fail: attempt 1 of 1 planned failures"],
    ]);
    expect(new Set(runs.map((r) => r.scheduledFor)).size).toBe(1);
    expect(runs[0]?.dueAt).toBe(runs[1]?.finishedAt);
    expect(await lastRunOf(id)).toEqual(summary(runs[0]));
  });

  it("dead after its retries, then replayed and dead again: each attempt, the dead one naming its replay", async () => {
    const id = await created({
      type: "fail",
      payload: { times: 99, retryable: true },
      schedule: { runAt: new Date().toISOString() },
      retry: { maxAttempts: 2, ...noBackoff },
    });
    await runOnce(api, id);
    await runOnce(api, id);
    const dead = (await historyOf(id))[0];
    const replay = await api.call("POST", `/dead-letters/${dead?.runId}/replay`);
    expect(replay.status, replay.text).toBe(202);
    await runOnce(api, id);
    const runs = await historyOf(id);
    expect(shape(runs)).toEqual([
      [3, "dead", "fail: attempt 3 of 99 planned failures"],
      [2, "dead", "fail: attempt 2 of 99 planned failures"],
      [1, "failed", "fail: attempt 1 of 99 planned failures"],
    ]);
    expect(runs[1]?.replayedBy).toBe(RunSchema.parse(replay.body).runId);
    expect(runs[0]?.reason).toBe(
      "gave up after 3 attempts: fail: attempt 3 of 99 planned failures",
    );
    expect(await lastRunOf(id)).toEqual(summary(runs[0]));
  });

  it("timed out: dead at its last attempt, the timeout as its error, its duration the timeout's", async () => {
    const id = await created({
      type: "sleep",
      payload: { ms: 5_000 },
      timeoutSeconds: 1,
      schedule: { runAt: new Date().toISOString() },
      retry: { maxAttempts: 1 },
    });
    await runOnce(api, id);
    const runs = await historyOf(id);
    expect(shape(runs)).toEqual([[1, "dead", "timed out after 1 s"]]);
    expect(runs[0]?.durationMs).toBeGreaterThanOrEqual(1_000);
    expect(runs[0]?.durationMs).toBeLessThan(5_000);
    expect(await lastRunOf(id)).toEqual(summary(runs[0]));
  });

  it("a queued run cancelled never started: no start, ended when asked, not the job's lastRun", async () => {
    const id = await created({ type: "noop", schedule: { cron: YEARLY_CRON, timezone: "UTC" } });
    const ran = RunSchema.parse((await api.call("POST", `/jobs/${id}/trigger`)).body);
    await runOnce(api, id);
    const queued = RunSchema.parse((await api.call("POST", `/jobs/${id}/trigger`)).body);
    const cancel = await api.call("POST", `/jobs/${id}/runs/${queued.runId}/cancel`);
    expect(cancel.status, cancel.text).toBe(200);
    const runs = await historyOf(id);
    expect(shape(runs)).toEqual([
      [1, "cancelled", "run cancelled"],
      [1, "succeeded", null],
    ]);
    expect(runs[0]).toMatchObject({ startedAt: null, durationMs: null, workerId: null, fence: 0 });
    expect(runs[0]?.finishedAt).toBe(runs[0]?.cancelRequestedAt);
    expect((await lastRunOf(id))?.runId).toBe(ran.runId);
  });
});

describe("a running run whose worker died, cancelled before the reaper comes", () => {
  const LEASE_MS = 6_000;
  let now = new Date(Math.ceil(Date.now() / 1000) * 1000);
  let fixed: ApiHarness;
  /** The same, its tenants at most one run at a time (the deployment's concurrentRuns). */
  let capped: ApiHarness;
  beforeAll(async () => {
    fixed = await startApi({ clock: () => now, settings: { leaseMs: LEASE_MS } });
    capped = await startApi({
      clock: () => now,
      settings: { leaseMs: LEASE_MS, quotas: { ...DEFAULT_QUOTAS, concurrentRuns: 1 } },
    });
  });
  afterAll(async () => {
    await fixed.close();
    await capped.close();
  });

  /**
   * The worker code runs the job's next message, a sleep long enough for a heartbeat to write its
   * start, and dies at its ending's write, after the handler ran: the run stays RUNNING under the
   * dead worker's lease.
   */
  async function runDyingAtItsEnding(jobId: string, on = fixed): Promise<ReceivedRun> {
    const dying = withFaults(on.fixture.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => String(input.UpdateExpression).includes("durationMs = :durationMs"),
      error: () => new Error("worker died"),
    });
    const deps = { ...on.fixture.workerDeps("w-dying", {}, 100), engine: dying.engine };
    let delivery: ReceivedRun | undefined;
    try {
      const deadline = Date.now() + 15_000;
      while (delivery === undefined && Date.now() < deadline) {
        const received = await receiveRuns(dying.engine.sqs, dying.engine.queues.normal, {
          max: 10,
          waitSeconds: 1,
        });
        for (const message of received.filter((r) => r.message.jobId === jobId)) {
          delivery = message;
          await expect(processRun(deps, message)).rejects.toThrow("worker died");
        }
      }
    } finally {
      dying.destroy();
    }
    expect(dying.injected.count).toBe(1);
    if (delivery === undefined) throw new Error(`no delivery for job ${jobId}`);
    return delivery;
  }

  /** A recurring job's triggered run whose worker died mid-run, under its dead worker's live lease. */
  async function runUnderLiveLease(on = fixed): Promise<{
    id: string;
    runId: string;
    delivery: ReceivedRun;
  }> {
    const id = await created(
      { type: "sleep", payload: { ms: 600 }, schedule: { cron: YEARLY_CRON, timezone: "UTC" } },
      on,
    );
    const triggered = await on.call("POST", `/jobs/${id}/trigger`);
    expect(triggered.status, triggered.text).toBe(202);
    const { runId } = RunSchema.parse(triggered.body);
    const delivery = await runDyingAtItsEnding(id, on);
    const running = await on.call("GET", `/jobs/${id}/runs/${runId}`);
    expect(RunSchema.parse(running.body)).toMatchObject({
      status: "running",
      startedAt: now.toISOString(),
      durationMs: null,
    });
    return { id, runId, delivery };
  }

  /** The run's cancel, its job's cancel, or its job's pause with running: cancel. */
  function askedToCancel(how: "run" | "job" | "pause", id: string, runId: string, on = fixed) {
    if (how === "run") return on.call("POST", `/jobs/${id}/runs/${runId}/cancel`);
    if (how === "job") return on.call("POST", `/jobs/${id}/cancel`);
    return on.call("POST", `/jobs/${id}/pause`, { body: { running: "cancel" } });
  }

  /** A recurring job's triggered run whose worker died mid-run, its lease lapsed since. */
  async function runUnderLapsedLease(): Promise<{ id: string; runId: string }> {
    const { id, runId } = await runUnderLiveLease();
    // The dead worker's lease lapses; the reaper has not come yet.
    now = new Date(now.getTime() + LEASE_MS + 1_500);
    return { id, runId };
  }

  it("its handler ran: a run's cancel, a job's cancel or a pause with running: cancel gives it its start to the cancel as durationMs, and it is its job's lastRun", async () => {
    for (const how of ["run", "job", "pause"] as const) {
      const { id, runId } = await runUnderLapsedLease();
      const asked = await askedToCancel(how, id, runId);
      expect(asked.status, asked.text).toBe(200);
      const runs = await historyOf(id, fixed);
      expect(shape(runs), how).toEqual([
        [
          1,
          "cancelled",
          how === "run"
            ? "run cancelled"
            : how === "job"
              ? "job cancelled"
              : "job paused with running: cancel",
        ],
      ]);
      expect(runs[0], how).toMatchObject({
        runId,
        finishedAt: now.toISOString(),
        durationMs: LEASE_MS + 1_500,
      });
      expect(await lastRunOf(id, fixed), how).toEqual(summary(runs[0]));
      // A job's cancel or pause answers the job as its write of the run left it.
      if (how !== "run") expect(JobSchema.parse(asked.body).lastRun, how).toEqual(summary(runs[0]));
    }
  });

  it("a run's cancel that died between the run's ending and its job's write: its repeat (200, the run cancelled) makes that write", async () => {
    const { id, runId } = await runUnderLapsedLease();
    const dying = withFaults(fixed.fixture.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => String(input.UpdateExpression).includes("lastRun = :lastRun"),
      error: () => new Error("api function died"),
    });
    try {
      await expect(cancelRun(dying.engine, TENANT_A, id, runId)).rejects.toThrow(
        "api function died",
      );
    } finally {
      dying.destroy();
    }
    expect(await lastRunOf(id, fixed)).toBeNull();
    const again = await fixed.call("POST", `/jobs/${id}/runs/${runId}/cancel`);
    expect(again.status, again.text).toBe(200);
    const runs = await historyOf(id, fixed);
    expect(runs[0]).toMatchObject({ runId, status: "cancelled", durationMs: LEASE_MS + 1_500 });
    expect(RunSchema.parse(again.body)).toEqual(runs[0]);
    expect(await lastRunOf(id, fixed)).toEqual(summary(runs[0]));
  });

  it("asked to cancel under its worker's live lease, that worker then dead: the next delivery ends it cancelled as asked, and it is its job's lastRun: its handler ran", async () => {
    for (const how of ["run", "job", "pause"] as const) {
      const { id, runId, delivery } = await runUnderLiveLease();
      const asked = await askedToCancel(how, id, runId);
      expect(asked.status, asked.text).toBe(200);
      const by = how === "run" ? "api" : how === "job" ? "job-cancel" : "pause";
      const requested = RunSchema.parse(
        (await fixed.call("GET", `/jobs/${id}/runs/${runId}`)).body,
      );
      expect(requested, how).toMatchObject({
        status: "running",
        cancelRequestedAt: now.toISOString(),
        cancelledBy: by,
      });
      // The worker never heartbeats again: its lease lapses, and the run's message comes back.
      now = new Date(now.getTime() + LEASE_MS + 1_500);
      const { fixture } = fixed;
      await setVisibility(fixture.engine.sqs, delivery.queueUrl, delivery.receiptHandle, 0);
      const again = await fixture.nextDelivery(fixture.engine.queues.normal, id);
      expect(await fixture.process(fixture.workerDeps("w-next"), again), how).toBe("ack");
      const ended = RunSchema.parse((await fixed.call("GET", `/jobs/${id}/runs/${runId}`)).body);
      expect(ended, how).toMatchObject({
        status: "cancelled",
        cancelledBy: by,
        cancelRequestedAt: requested.cancelRequestedAt,
        finishedAt: now.toISOString(),
        // As the DLQ's ending of such a run: the start it shows is this delivery's, which never
        // ran the handler, and no ending measured the one that did.
        durationMs: null,
      });
      expect(await lastRunOf(id, fixed), how).toEqual(summary(ended));
    }
  });

  it("asked to cancel under its worker's live lease, that worker then dead: a repeat of the cancel once the lease lapsed ends it at once, its start to the repeat as durationMs, and it is its job's lastRun", async () => {
    for (const how of ["run", "job", "pause"] as const) {
      const { id, runId } = await runUnderLiveLease();
      const asked = await askedToCancel(how, id, runId);
      expect(asked.status, asked.text).toBe(200);
      const requestedAt = now.toISOString();
      // The worker never heartbeats again: its lease lapses; the reaper has not come yet.
      now = new Date(now.getTime() + LEASE_MS + 1_500);
      const again = await askedToCancel(how, id, runId);
      expect(again.status, again.text).toBe(200);
      const ended = RunSchema.parse((await fixed.call("GET", `/jobs/${id}/runs/${runId}`)).body);
      expect(ended.status, how).toBe("cancelled");
      const runs = await historyOf(id, fixed);
      expect(runs, how).toHaveLength(1);
      expect(runs[0], how).toMatchObject({
        runId,
        status: "cancelled",
        cancelledBy: how === "run" ? "api" : how === "job" ? "job-cancel" : "pause",
        cancelRequestedAt: requestedAt,
        finishedAt: now.toISOString(),
        durationMs: LEASE_MS + 1_500,
      });
      if (how === "run")
        expect(RunSchema.parse(again.body), how).toMatchObject({ status: "cancelled" });
      expect(await lastRunOf(id, fixed), how).toEqual(summary(runs[0]));
    }
  });

  it("a cancel at once with the worker of the reaper's re-send of a run under a lapsed lease: the run ends once, and that ending is its lastRun", async () => {
    const { id, runId } = await runUnderLapsedLease();
    // Past the run's reaper deadline (a lease after its lapsed lease) and the reaper's settle line.
    now = new Date(now.getTime() + LEASE_MS + REAPER_SETTLE_MS + 1_000);
    const { fixture } = fixed;
    expect((await reap(fixture.engine)).resent).toBe(1);
    const again = await fixture.nextDelivery(fixture.engine.queues.normal, id);
    const [asked] = await Promise.all([
      fixed.call("POST", `/jobs/${id}/runs/${runId}/cancel`),
      fixture.process(fixture.workerDeps("w-next", {}, 100), again),
    ]);
    expect(asked.status === 200 || asked.status === 409, asked.text).toBe(true);
    const runs = await historyOf(id, fixed);
    expect(runs).toHaveLength(1);
    const [run] = runs;
    // Cancelled by the cancel (the dead worker's run measured to it), or by the new delivery's
    // worker on its request, or ended by that worker before the cancel came (409).
    expect(
      run?.status === "cancelled" || (run?.status === "succeeded" && asked.status === 409),
    ).toBe(true);
    expect(await lastRunOf(id, fixed)).toEqual(summary(run));
  });

  it.each([
    ["its overlap policy behind the job's next run", "waiting: overlap policy skip"],
    ["its tenant's concurrentRuns quota", "waiting: tenant at its concurrentRuns quota (1)"],
  ])(
    "delivered again after its worker died, waiting for %s, then cancelled (a run's cancel, a job's cancel): its handler ran, so it is its job's lastRun",
    async (_, reason) => {
      const quota = reason.includes("quota");
      const on = quota ? capped : fixed;
      for (const how of ["run", "job"] as const) {
        const { id, runId, delivery } = await runUnderLiveLease(on);
        now = new Date(now.getTime() + LEASE_MS + 1_500);
        const { fixture } = on;
        if (quota) {
          // Another job's run holds the tenant's one slot, under a live lease.
          const other = await created(
            { type: "noop", schedule: { cron: YEARLY_CRON, timezone: "UTC" } },
            on,
          );
          const holder = RunSchema.parse((await on.call("POST", `/jobs/${other}/trigger`)).body);
          const held = await getRun(fixture.engine, { ...holder, jobId: other });
          if (held === null) throw new Error("no holder run");
          expect((await takeTenantSlot(fixture.engine, held, now)).kind).toBe("taken");
        } else {
          // The job's next run is under way (its worker dies too, under a live lease).
          const next = await on.call("POST", `/jobs/${id}/trigger`);
          expect(next.status, next.text).toBe(202);
          await runDyingAtItsEnding(id, on);
        }
        await setVisibility(fixture.engine.sqs, delivery.queueUrl, delivery.receiptHandle, 0);
        const again = await fixture.nextDelivery(fixture.engine.queues.normal, id);
        expect(await fixture.process(fixture.workerDeps("w-next"), again), how).toBe("ack");
        const waiting = RunSchema.parse((await on.call("GET", `/jobs/${id}/runs/${runId}`)).body);
        expect(waiting, how).toMatchObject({ status: "queued", reason });
        const asked = await askedToCancel(how, id, runId, on);
        expect(asked.status, asked.text).toBe(200);
        const ended = RunSchema.parse((await on.call("GET", `/jobs/${id}/runs/${runId}`)).body);
        // As a delivery's ending of a run asked to cancel under a worker that died: no durationMs.
        expect(ended, how).toMatchObject({
          status: "cancelled",
          cancelledBy: how === "run" ? "api" : "job-cancel",
          finishedAt: now.toISOString(),
          durationMs: null,
        });
        expect(await lastRunOf(id, on), how).toEqual(summary(ended));
        const stored = await getJob(on.fixture.engine, id);
        expect(stored?.activeRuns[runId], how).toBeUndefined();
        // The holder's slot lapses before the next case.
        if (quota) now = new Date(now.getTime() + LEASE_MS + 1_000);
      }
    },
  );
});
