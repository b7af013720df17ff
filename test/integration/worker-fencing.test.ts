import { SendMessageBatchCommand, SQSClient } from "@aws-sdk/client-sqs";
import { mockClient } from "aws-sdk-client-mock";
import { afterAll, beforeAll, describe, expect, it, type TestContext } from "vitest";
import { sleep } from "../../shared/clock.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { LeaseLapsedError } from "../../shared/execution/lease-watch.js";
import { processRun } from "../../shared/execution/worker.js";
import { cancelRun, createJob, pauseJob, resumeJob, triggerJob } from "../../shared/jobs/index.js";
import { getTenantJob, jobAsItStands, listDeadLetters } from "../../shared/jobs/queries.js";
import { silentObservability } from "../../shared/observability.js";
import {
  deleteMessages,
  type ReceivedRun,
  sendRuns,
  setVisibility,
} from "../../shared/queue/work-queue.js";
import { runMessageOf } from "../../shared/storage/items.js";
import { repairRunOnJob } from "../../shared/storage/run-on-job.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { requeueRun } from "../../shared/storage/run-requeue.js";
import { startRun } from "../../shared/storage/run-start.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";
import { runOf } from "../support/held-runs.js";
import { createTestClients } from "../support/namespace.js";
import { redriven } from "../support/redriven.js";
import { waitFor } from "../support/wait.js";

const LEASE_MS = 3000;

/** A one-off job due now, of the given type; returns the first delivery of its message. */
async function dueNow(f: EngineFixture, type: string, payload: unknown = {}) {
  const { job } = await createJob(
    f.engine,
    testJob({ type, payload, schedule: { runAt: new Date().toISOString() }, timeoutSeconds: 30 }),
  );
  const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
  return { job, received };
}

/**
 * Processes a delivery whose worker dies between its writes: the job's write after the run's (the
 * one naming lastRun) fails once, as if the process died there.
 */
async function dieBeforeJobWrite(f: EngineFixture, received: ReceivedRun): Promise<void> {
  const dying = withFaults(f.engine, {
    operation: "UpdateItem",
    times: 1,
    match: (input) => String(input.UpdateExpression ?? "").includes("lastRun"),
    error: () => new Error("process died"),
  });
  try {
    await expect(
      processRun({ ...f.workerDeps("dies"), engine: dying.engine }, received),
    ).rejects.toThrow("process died");
  } finally {
    dying.destroy();
  }
  expect(dying.injected.count).toBe(1);
}

/**
 * A worker that froze (or died) after its start leaves its message hidden for the queue's
 * visibility (the worker function's timeout on AWS, 30 s here): once the run's lease lapsed, the
 * reaper re-sends it. Returns that message's delivery.
 */
async function resentOnceLapsed(f: EngineFixture, jobId: string) {
  const started = await waitFor("the run's start", async () => {
    const run = (await f.runs()).find((r) => r.jobId === jobId);
    return run?.status === "RUNNING" ? run : undefined;
  });
  const startedAt = Date.now();
  // Under its live lease the run is left alone.
  expect((await reap(f.engine, { now: new Date(startedAt + REAPER_SETTLE_MS) })).resent).toBe(0);
  await sleep(Date.parse(started.leaseUntil ?? "") + 100 - Date.now());
  // A pass whose settle line lies past the run's deadline (a pass 5 s on), once the lease lapsed.
  const later = new Date(Date.now() + REAPER_SETTLE_MS + 500);
  expect((await reap(f.engine, { now: later })).resent).toBe(1);
  const again = await f.nextDelivery(f.engine.queues.normal, jobId);
  // The re-sent message, not the frozen worker's, which is still hidden.
  expect(again.receiveCount).toBe(1);
  expect(again.message.fence).toBe(1);
  return again;
}

describe("fenced execution", () => {
  let f: EngineFixture;
  const warnings: { message: string; fields: Record<string, unknown> }[] = [];
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { leaseMs: LEASE_MS },
      obs: {
        ...silentObservability,
        log: {
          ...silentObservability.log,
          warn: (message, fields = {}) => void warnings.push({ message, fields }),
        },
      },
    });
  });
  afterAll(() => f.destroy());

  it("a worker that froze past its lease is aborted when it wakes; the new holder's result stands", async () => {
    let staleSignal: AbortSignal | undefined;
    const frozen = f.workerDeps(
      "worker-a",
      {
        block: (ctx: JobContext) => {
          staleSignal = ctx.signal;
          return new Promise((resolve) =>
            ctx.signal.addEventListener("abort", resolve, { once: true }),
          );
        },
      },
      // Its first heartbeat comes after the lease has lapsed: it was frozen.
      LEASE_MS * 2,
    );
    const healthy = f.workerDeps("worker-b", { block: async () => undefined });
    const { job, received } = await dueNow(f, "block");

    const stale = processRun(frozen, received);
    const again = await resentOnceLapsed(f, job.jobId);
    expect(await f.process(healthy, again)).toBe("ack");

    expect(await stale).toBe("ack");
    expect(staleSignal?.aborted).toBe(true);
    // Its timers fire as it wakes, in the order they were due: the lease's, set for the lease it
    // last wrote, before its late heartbeat. It writes nothing more.
    expect(staleSignal?.reason).toBeInstanceOf(LeaseLapsedError);
    // The line the operator reads names the run as its other lines do.
    const lapsed = warnings.filter(
      (w) =>
        w.message ===
          "the run's lease lapsed before a heartbeat extended it; this worker writes nothing more" &&
        String(w.fields.runId).startsWith(`${job.jobId}-`),
    );
    expect(lapsed).toHaveLength(1);
    expect(lapsed[0]?.fields).toMatchObject({
      tenantId: job.tenantId,
      jobId: job.jobId,
      attempt: 1,
    });
    const run = await runOf(f, job.jobId);
    expect(run).toMatchObject({ status: "SUCCEEDED", workerId: "worker-b", fence: 2 });
  }, 30_000);

  it("a stale worker that completes after losing the run is rejected and writes nothing", async () => {
    let failedElsewhere: () => void = () => undefined;
    const takenOver = new Promise<void>((resolve) => {
      failedElsewhere = resolve;
    });
    const ignoresSignal = f.workerDeps("worker-a", { slow: () => takenOver }, 60_000);
    // On a host whose clock is 30 s ahead (off by more than a lease, a known limit), the holder's
    // live lease reads lapsed: a copy of the message started there takes the run over, before
    // the lease's end stops the holder's handler.
    const ahead = {
      ...f.workerDeps("worker-b", {
        slow: () => Promise.reject(new Error("boom on attempt 1")),
      }),
      engine: { ...f.engine, clock: () => new Date(Date.now() + 30_000) },
    };
    const { job, received } = await dueNow(f, "slow", {});
    const stale = processRun(ignoresSignal, received);
    await waitFor("the run's start", async () => (await runOf(f, job.jobId)).status === "RUNNING");
    expect(await processRun(ahead, { ...received, receiveCount: 2 })).toBe("ack");
    failedElsewhere();
    // B failed it and queued attempt 2; A's late success must not overwrite either.
    expect(await stale).toBe("ack");
    expect(
      warnings.filter(
        (w) =>
          w.message === "another worker took the run over; this one writes nothing more" &&
          String(w.fields.runId).startsWith(`${job.jobId}-`),
      ),
    ).toHaveLength(1);
    expect(f.metrics.sum("FenceLost", { component: "worker" })).toBeGreaterThanOrEqual(1);
    const runs = (await f.runs())
      .filter((r) => r.jobId === job.jobId)
      .sort((a, b) => a.attempt - b.attempt);
    expect(runs.map((r) => [r.attempt, r.status, r.workerId, r.fence])).toEqual([
      [1, "FAILED", "worker-b", 2],
      [2, "QUEUED", null, 0],
    ]);
    expect(runs[0]?.error).toBe(
      "the job's handler failed unexpectedly (Error); the operator's worker log has the details",
    );
  }, 30_000);
});

describe.concurrent("crashes", () => {
  /**
   * A fixture per test, destroyed when it ends: some reap on a clock ahead, and the reaper's cursor
   * only moves forward, so a later test's runs (on the machine's clock) could lie behind it. With
   * tables and queues of their own, the cases run side by side (most of their time is waiting for
   * a lease to lapse, a message to come back or SQS to move it to the DLQ).
   */
  const crashFixture = async (onTestFinished: TestContext["onTestFinished"]) => {
    const f = await createEngineFixture({ settings: { leaseMs: LEASE_MS }, maxReceiveCount: 2 });
    onTestFinished(() => f.destroy());
    return f;
  };

  it("a worker that dies mid-run leaves the message to a second worker, which finishes with fence 2", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    const { job, received } = await dueNow(f, "noop");
    // What a worker does before it runs the handler, and then nothing: it died.
    const started = await startRun(f.engine, received.message, "doomed", new Date());
    expect(started.kind).toBe("started");
    await setVisibility(f.engine.sqs, received.queueUrl, received.receiptHandle, LEASE_MS / 1000);

    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(f.workerDeps("survivor"), again)).toBe("ack");
    expect(await runOf(f, job.jobId)).toMatchObject({
      status: "SUCCEEDED",
      workerId: "survivor",
      fence: 2,
    });
  }, 20_000);

  it("a second delivery of a finished run is acknowledged without calling the handler", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    let calls = 0;
    const deps = f.workerDeps("w", { counted: async () => void calls++ });
    const { job, received } = await dueNow(f, "counted");
    expect(await processRun(deps, received)).toBe("ack");
    expect(await f.process(deps, received)).toBe("ack");
    expect(calls).toBe(1);
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
  });

  it("a worker that dies between recording its run and writing the job leaves that write to the next delivery", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    // Fault injection on a real client: every write of a job's lastRun fails, as if the process died there.
    const dying = createTestClients();
    dying.doc.middlewareStack.add(
      (next) => async (args) => {
        const input: object = args.input;
        const update = "UpdateExpression" in input ? String(input.UpdateExpression) : "";
        if (update.includes("lastRun")) throw new Error("process died");
        return next(args);
      },
      { step: "initialize", name: "dieBeforeTheJobWrite" },
    );
    let calls = 0;
    const handlers = { counted: async () => void calls++ };
    // An `every` starting now would begin an hour later by the time it is created; start it just ahead.
    const soon = () => new Date(Date.now() + 200).toISOString();
    try {
      for (const scheduleOf of [
        () => ({ runAt: soon() }),
        // Daily: its next run is too far off for the ending to leave the job's write to it.
        () => ({ every: "P1D", startAt: soon() }),
      ]) {
        const schedule = scheduleOf();
        const { job } = await createJob(f.engine, testJob({ type: "counted", schedule }));
        const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
        const crashing = {
          ...f.workerDeps("dies", handlers),
          engine: { ...f.engine, doc: dying.doc },
        };
        await expect(processRun(crashing, first)).rejects.toThrow("process died");
        const run = await runOf(f, job.jobId);
        expect(run.status).toBe("SUCCEEDED");
        const before = await getJob(f.engine, job.jobId);
        expect(before?.lastRun).toBeNull();
        if ("runAt" in schedule) expect(before?.status).toBe("ACTIVE");
        else expect(Object.keys(before?.activeRuns ?? {})).toEqual([run.runId]);

        await setVisibility(f.engine.sqs, first.queueUrl, first.receiptHandle, 0);
        const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
        expect(await f.process(f.workerDeps("next", handlers), again)).toBe("ack");
        const after = await getJob(f.engine, job.jobId);
        expect(after?.lastRun).toMatchObject({ runId: run.runId, status: "SUCCEEDED" });
        expect(after?.activeRuns).toEqual({});
        expect(after?.status).toBe("runAt" in schedule ? "COMPLETED" : "ACTIVE");
      }
      expect(calls).toBe(2);
    } finally {
      dying.destroy();
    }
  }, 20_000);

  it("a one-off's triggered run whose worker dies between its writes becomes its lastRun, however the job's own occurrence ends", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    // A one-off due 90 s ago, triggered; the trigger's run SUCCEEDED, its worker died before the
    // job's write, and the next delivery finds it ended. The job's own occurrence ends around it:
    // skipped at create (misfire skip: the job is COMPLETED before the trigger), or queued (misfire
    // fire_once) and cancelled before the trigger, before that next delivery or after it.
    const cases = [
      { misfire: "skip", cancel: null },
      { misfire: "fire_once", cancel: "before the trigger" },
      { misfire: "fire_once", cancel: "before the next delivery" },
      { misfire: "fire_once", cancel: "after the next delivery" },
    ] as const;
    const seen: { misfire: string; cancel: string | null; status: string; lastRun: unknown }[] = [];
    const expected: typeof seen = [];
    for (const { misfire, cancel } of cases) {
      const { job } = await createJob(
        f.engine,
        testJob({
          schedule: { runAt: new Date(Date.now() - 90_000).toISOString() },
          policies: { ...testJob().policies, misfire, overlap: "skip" },
        }),
      );
      const [own] = (await f.runs()).filter((r) => r.jobId === job.jobId);
      if (own === undefined) throw new Error("no run of the job's own occurrence");
      expect(own.status).toBe(misfire === "skip" ? "SKIPPED" : "QUEUED");
      // A queued one's message is held until the end, when it comes to a run already ended.
      const ownDelivery = own.status === "QUEUED" ? await f.nextDeliveryOfRun(own) : null;
      const cancelOwn = async () => {
        const cancelled = await cancelRun(f.engine, job.tenantId, job.jobId, own.runId);
        expect(cancelled.status).toBe("CANCELLED");
      };

      if (cancel === "before the trigger") await cancelOwn();
      const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
      const first = await f.nextDeliveryOfRun(triggered);
      await dieBeforeJobWrite(f, first);
      const finished = await getRun(f.engine, triggered);
      expect(finished?.status).toBe("SUCCEEDED");

      if (cancel === "before the next delivery") await cancelOwn();
      await setVisibility(f.engine.sqs, first.queueUrl, first.receiptHandle, 0);
      expect(await f.process(f.workerDeps("next"), await f.nextDeliveryOfRun(triggered))).toBe(
        "ack",
      );
      if (cancel === "after the next delivery") await cancelOwn();
      if (ownDelivery !== null)
        expect(await f.process(f.workerDeps("late"), ownDelivery)).toBe("ack");

      // As the API reads it (GET /jobs/{id}).
      const read = await asGetShows(f, job);
      seen.push({ misfire, cancel, status: read.status, lastRun: read.lastRun });
      expected.push({
        misfire,
        cancel,
        status: "COMPLETED",
        lastRun: {
          runId: triggered.runId,
          status: "SUCCEEDED",
          scheduledFor: triggered.scheduledFor,
          attempt: 1,
          finishedAt: finished?.finishedAt ?? "",
        },
      });
    }
    expect(seen).toEqual(expected);
  }, 30_000);

  it("a one-off's own run whose worker dies between its writes becomes its lastRun on a job paused meanwhile, which its resume completes", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await dieBeforeJobWrite(f, first);
    const run = await runOf(f, job.jobId);
    expect(run.status).toBe("SUCCEEDED");
    await pauseJob(f.engine, job.tenantId, job.jobId);

    await setVisibility(f.engine.sqs, first.queueUrl, first.receiptHandle, 0);
    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(f.workerDeps("next"), again)).toBe("ack");
    const summary = {
      runId: run.runId,
      status: "SUCCEEDED",
      scheduledFor: run.scheduledFor,
      attempt: 1,
      finishedAt: run.finishedAt,
    };
    // The pause stands; the run's lastRun is written all the same.
    expect(await getJob(f.engine, job.jobId)).toMatchObject({ status: "PAUSED", lastRun: summary });
    await resumeJob(f.engine, job.tenantId, job.jobId);
    expect(await getJob(f.engine, job.jobId)).toMatchObject({
      status: "COMPLETED",
      lastRun: summary,
    });
  }, 20_000);

  it("a repair decided on a stale read of the job never sets its lastRun back", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const own = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(f.workerDeps("w"), own)).toBe("ack");
    const older = await runOf(f, job.jobId);
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(await f.process(f.workerDeps("w"), await f.nextDeliveryOfRun(triggered))).toBe("ack");
    const newer = await getJob(f.engine, job.jobId);
    expect(newer?.lastRun?.runId).toBe(triggered.runId);

    // What a delivery of the older run would write had it read the job before the newer run's ending.
    const outcome = await repairRunOnJob(f.engine, older, {
      status: "SUCCEEDED",
      ran: true,
      tracked: false,
      completesJob: false,
    });
    expect(outcome).toEqual({ kind: "refused", job: newer });
    expect((await getJob(f.engine, job.jobId))?.lastRun?.runId).toBe(triggered.runId);
  }, 20_000);

  it("a dispatcher that dies between its transaction and SendMessage leaves a QUEUED run the reaper sends", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    // Fault injection: this engine's SQS refuses every send, as if the process died before sending.
    const brokenSqs = new SQSClient({ region: "us-east-1" });
    mockClient(brokenSqs).on(SendMessageBatchCommand).rejects(new Error("process died"));
    const crashing = { ...f.engine, sqs: brokenSqs };
    const { job } = await createJob(
      crashing,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const queued = await runOf(f, job.jobId);
    expect(queued.status).toBe("QUEUED");
    const depth = await f.queueDepth(f.engine.queues.normal);
    expect(depth.visible + depth.delayed).toBe(0);

    // Nothing is overdue yet; a lease past the run's start deadline, the reaper sends it.
    expect((await reap(f.engine)).resent).toBe(0);
    const later = new Date(Date.now() + LEASE_MS + REAPER_SETTLE_MS + 1000);
    expect((await reap(f.engine, { now: later })).resent).toBe(1);
    const resent = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(f.workerDeps("w"), resent)).toBe("ack");
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
    expect(f.metrics.sum("ReaperResends")).toBe(1);
  }, 20_000);

  it("the reaper leaves a run alone while its lease is live, and re-sends it once the lease lapses", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    const { job, received } = await dueNow(f, "noop");
    const t0 = Date.now();
    // Started late (two seconds past the reaper's settle line): its lease outlives its start
    // deadline, as a long run's does.
    const startedAt = t0 + REAPER_SETTLE_MS + 2000;
    const started = await startRun(f.engine, received.message, "slow", new Date(startedAt));
    expect(started.kind).toBe("started");
    const overdueButLive = await reap(f.engine, {
      now: new Date(t0 + LEASE_MS + REAPER_SETTLE_MS + 1000),
    });
    expect(overdueButLive).toMatchObject({ resent: 0 });
    expect(overdueButLive.examined).toBeGreaterThanOrEqual(1);
    // Its deadline moved to a lease past its lease, so the next pass does not even read it.
    const before = f.metrics.sum("ReaperResends");
    const afterLease = startedAt + LEASE_MS + REAPER_SETTLE_MS;
    expect((await reap(f.engine, { now: new Date(afterLease + 500) })).resent).toBe(0);
    const lapsed = await reap(f.engine, { now: new Date(afterLease + LEASE_MS + 500) });
    expect(lapsed.resent).toBe(1);
    expect(f.metrics.sum("ReaperResends") - before).toBe(1);
    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(again.message.jobId).toBe(job.jobId);
  }, 20_000);

  it("a message that crashes its worker every time reaches the DLQ and its run is marked DEAD", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    const { job, received } = await dueNow(f, "noop");
    await crashEveryDeliveryIntoDlq(f, received);
    const run = await runOf(f, job.jobId);
    expect(run.status).toBe("DEAD");
    expect(run.reason).toMatch(/^worker crashed/);
    const dead = await listDeadLetters(f.engine, job.tenantId, { limit: 10 });
    expect(dead.items.map((r) => r.runId)).toContain(run.runId);
  }, 30_000);

  it("a recurring job's run dead-lettered by the DLQ is its job's lastRun, not the success before it", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" }, timeoutSeconds: 30 }),
    );
    // An earlier run succeeded: the job's lastRun.
    const ok = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(await f.process(f.workerDeps("w"), await f.nextDeliveryOfRun(ok))).toBe("ack");
    expect((await asGetShows(f, job)).lastRun?.runId).toBe(ok.runId);

    // The next run crashes its worker on each of its two deliveries.
    const doomed = await triggerJob(f.engine, job.tenantId, job.jobId);
    await crashEveryDeliveryIntoDlq(f, await f.nextDeliveryOfRun(doomed));

    const dead = await getRun(f.engine, doomed);
    expect(dead).toMatchObject({
      status: "DEAD",
      reason: expect.stringMatching(/^worker crashed/),
    });
    // What GET /jobs/{id} answers: the run that finished last is the dead one.
    const shown = await asGetShows(f, job);
    expect(shown.lastRun).toEqual({
      runId: doomed.runId,
      status: "DEAD",
      scheduledFor: doomed.scheduledFor,
      attempt: 1,
      finishedAt: dead?.finishedAt,
    });
  }, 30_000);

  it("a recurring job's run asked to cancel while it ran, then ended CANCELLED by the DLQ, is its job's lastRun: its handler ran", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" }, timeoutSeconds: 30 }),
    );
    const ok = await triggerJob(f.engine, job.tenantId, job.jobId);
    expect(await f.process(f.workerDeps("w"), await f.nextDeliveryOfRun(ok))).toBe("ack");

    // The next run is asked to cancel while its last delivery runs it; that delivery crashes too.
    const doomed = await triggerJob(f.engine, job.tenantId, job.jobId);
    await crashEveryDeliveryIntoDlq(f, await f.nextDeliveryOfRun(doomed), async () => {
      const asked = await cancelRun(f.engine, job.tenantId, job.jobId, doomed.runId);
      expect(asked).toMatchObject({ status: "RUNNING", cancelledBy: "api" });
    });

    const cancelled = await getRun(f.engine, doomed);
    expect(cancelled).toMatchObject({ status: "CANCELLED", cancelledBy: "api", durationMs: null });
    // What GET /jobs/{id} answers: the run that finished last, whose handler ran, is this one.
    const shown = await asGetShows(f, job);
    expect(shown.lastRun).toEqual({
      runId: doomed.runId,
      status: "CANCELLED",
      scheduledFor: doomed.scheduledFor,
      attempt: 1,
      finishedAt: cancelled?.finishedAt,
    });
  }, 30_000);

  it("a message whose deliveries never start its run reaches the DLQ, but the run is not dead: the reaper sends it again", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    const { job, received } = await dueNow(f, "noop");
    // Two workers each die holding the message before they start it (or fail a storage call).
    await setVisibility(f.engine.sqs, received.queueUrl, received.receiptHandle, 1);
    const second = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await setVisibility(f.engine.sqs, second.queueUrl, second.receiptHandle, 1);
    const inDlq = await redriven(f, job.jobId, LEASE_MS + 10_000);
    await handleCrashedRun(f.engine, inDlq.message, inDlq.receiveCount);
    const run = await runOf(f, job.jobId);
    expect(run).toMatchObject({ status: "QUEUED", fence: 0 });

    const reaped = await reap(f.engine, {
      now: new Date(Date.parse(run.dueAt) + LEASE_MS + REAPER_SETTLE_MS + 1000),
    });
    expect(reaped.resent).toBeGreaterThanOrEqual(1);
    expect(
      await f.process(
        f.workerDeps("survivor"),
        await f.nextDelivery(f.engine.queues.normal, job.jobId),
      ),
    ).toBe("ack");
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
  }, 30_000);

  it("starts before a message was sent do not count against it: a requeued run is not dead when its new message is redriven unstarted", async ({
    onTestFinished,
  }) => {
    const f = await crashFixture(onTestFinished);
    const { job, received } = await dueNow(f, "noop");
    await deleteMessages(f.engine.sqs, received.queueUrl, [received.receiptHandle]);
    // Started twice (the first start's worker died), then put back to QUEUED with a new message,
    // as an overlap wait or a worker's shutdown does.
    const first = await startRun(f.engine, received.message, "died", new Date());
    expect(first.kind).toBe("started");
    const second = await startRun(
      f.engine,
      received.message,
      "waiter",
      new Date(Date.now() + LEASE_MS + 1000),
    );
    if (second.kind !== "started") throw new Error(`not started: ${second.kind}`);
    expect(second.run.fence).toBe(2);
    await requeueRun(f.engine, second.run, "waiting", new Date());
    await sendRuns(
      f.engine.sqs,
      f.engine.queues,
      [{ message: runMessageOf(second.run), dueAt: new Date() }],
      new Date(),
    );
    // Its new message's two deliveries die before starting it.
    for (let i = 0; i < 2; i++) {
      const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(delivery.message.fence).toBe(2);
      await setVisibility(f.engine.sqs, delivery.queueUrl, delivery.receiptHandle, 1);
    }
    const inDlq = await redriven(f, job.jobId, LEASE_MS + 10_000);
    await handleCrashedRun(f.engine, inDlq.message, inDlq.receiveCount);
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "QUEUED", fence: 2 });
  }, 30_000);
});

/**
 * The run `first` delivers starts and crashes its worker before recording anything, on that
 * delivery and the next (the queue's maxReceiveCount is 2); once SQS has moved its message to the
 * redrive DLQ and its lease has lapsed, the DLQ consumer handles it.
 */
async function crashEveryDeliveryIntoDlq(
  f: EngineFixture,
  first: ReceivedRun,
  /** Called while the last delivery holds the run started (its lease live), before it crashes. */
  whileRunning?: () => Promise<void>,
): Promise<void> {
  const run = first.message;
  const crashed = await startRun(f.engine, run, "crash-1", new Date());
  if (crashed.kind !== "started") throw new Error(`not started: ${crashed.kind}`);
  await setVisibility(f.engine.sqs, first.queueUrl, first.receiptHandle, 1);
  const second = await f.nextDeliveryOfRun(run);
  // The second start comes the moment the first's lease has lapsed: its own lease, which the
  // test then waits out, ends a lease after that, not a lease after a second more.
  const afterLease = new Date(Date.parse(crashed.run.leaseUntil ?? "") + 1);
  expect((await startRun(f.engine, second.message, "crash-2", afterLease)).kind).toBe("started");
  await whileRunning?.();
  await setVisibility(f.engine.sqs, second.queueUrl, second.receiptHandle, 1);
  const inDlq = await redriven(f, run.jobId, LEASE_MS + 10_000);
  await waitFor(
    "the crashed run's lease to lapse",
    async () => ((await getRun(f.engine, run))?.leaseUntil ?? "") < new Date().toISOString(),
    10_000,
  );
  await handleCrashedRun(f.engine, inDlq.message, inDlq.receiveCount);
}

/** The job as GET /jobs/{id} answers it (its lastRun as the runs stand). */
async function asGetShows(f: EngineFixture, job: { tenantId: string; jobId: string }) {
  return jobAsItStands(f.engine, await getTenantJob(f.engine, job.tenantId, job.jobId));
}
