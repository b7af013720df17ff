import { DeleteCommand } from "@aws-sdk/lib-dynamodb";
import { describe, expect, it } from "vitest";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import { runTickLoop } from "../../shared/dispatch/tick.js";
import { NotReplayableError } from "../../shared/errors.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { recoverLostMessages } from "../../shared/execution/restart-recovery.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, replayDeadLetter } from "../../shared/jobs/index.js";
import { MAX_ATTEMPT } from "../../shared/keys.js";
import type { Run } from "../../shared/model.js";
import { deleteMessages, sendRuns, setVisibility } from "../../shared/queue/work-queue.js";
import { runMessageOf } from "../../shared/storage/items.js";
import { getJob, runKeyOf } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import {
  caseFixture,
  type EngineFixture,
  type ShiftedClock,
  shiftedClock,
  testJob,
} from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";
import { copyRunToAttempt } from "../support/seed.js";
import { waitFor } from "../support/wait.js";

// The design's defaults: the lease is as long as the misfire grace.
const LEASE_MS = 60_000;
const GRACE_MS = 60_000;
const FAR_FUTURE = new Date("9999-12-31T00:00:00.000Z");

const hourly = (startAt: Date) => ({ every: "PT1H", startAt: startAt.toISOString() });

/** The helpers below on the fixture and clock given: each case has its own. */
function casesOn(f: EngineFixture, { clock }: ShiftedClock) {
  async function runsOf(jobId: string): Promise<Run[]> {
    return (await f.runs())
      .filter((r) => r.jobId === jobId)
      .sort((a, b) => a.scheduledFor.localeCompare(b.scheduledFor));
  }

  async function onlyRunOf(jobId: string): Promise<Run> {
    const [run, ...more] = await runsOf(jobId);
    if (!run || more.length > 0) throw new Error(`expected one run of ${jobId}`);
    return run;
  }

  /** The delivery of one occurrence of the job; deliveries of its other occurrences are dropped. */
  async function deliveryOf(jobId: string, scheduledFor: string) {
    for (;;) {
      const received = await f.nextDelivery(f.engine.queues.normal, jobId);
      if (received.message.scheduledFor === scheduledFor) return received;
      await deleteMessages(f.engine.sqs, received.queueUrl, [received.receiptHandle]);
    }
  }

  /** The next whole second at least `ms` ahead of the engine's clock. */
  const secondAfter = (ms: number) => new Date(Math.ceil((clock().getTime() + ms) / 1000) * 1000);

  return { runsOf, onlyRunOf, deliveryOf, secondAfter };
}

/**
 * A fixture and clock of the case's own, destroyed when the case ends: each case's clock starts at
 * the machine's, and the reaper's cursor only moves forward (a clock gone back by minutes would find
 * it ahead). The clock runs `time.offsetMs` ahead of the machine's, so a test can let leases lapse
 * and the grace pass without waiting for them; SQS delays stay real.
 */
async function ownFixture(atEnd: (cleanup: () => Promise<void>) => void) {
  const time = shiftedClock();
  const f = await caseFixture(atEnd, {
    settings: { leaseMs: LEASE_MS, misfireGraceMs: GRACE_MS },
    clock: time.clock,
  });
  return { f, time, clock: time.clock, ...casesOn(f, time) };
}

/**
 * Each case waits on real SQS delays and deliveries, a second or more at a time (the file took 20 s
 * alone, 8 s of CPU, one case after another). Side by side, each on tables, queues and a clock of
 * its own, they take the longest case's time.
 */
describe.concurrent("recovery, its cases side by side", () => {
  describe("a run whose worker died with the process (SIGKILL) is re-sent until it ends", () => {
    it("the tick loop's reaper re-sends it once the dead worker's lease lapses, after a restart's delivery found it busy", async ({
      onTestFinished,
    }) => {
      const { f, time, clock, onlyRunOf } = await ownFixture(onTestFinished);
      const { job } = await createJob(
        f.engine,
        testJob({ schedule: { runAt: clock().toISOString() } }),
      );
      const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      // The worker took the run and was killed; the in-memory queue lost the message with it.
      const taken = await startRun(f.engine, first.message, "killed", clock());
      expect(taken.kind).toBe("started");
      await deleteMessages(f.engine.sqs, first.queueUrl, [first.receiptHandle]);

      // The restart re-sends every run in flight; the dead worker's lease is still live, so the
      // delivery is acknowledged and nothing runs.
      expect((await reap(f.engine, { overdueBefore: FAR_FUTURE })).resent).toBe(1);
      const busy = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(await f.process(f.workerDeps("restarted"), busy)).toBe("ack");
      expect(await onlyRunOf(job.jobId)).toMatchObject({ status: "RUNNING", fence: 1 });

      const stop = new AbortController();
      const ticks = runTickLoop(f.engine, { owner: "restarted", tickMs: 200, signal: stop.signal });
      try {
        // The lease lapses; a lease after that, the reaper's deadline comes.
        time.offsetMs = 2 * LEASE_MS + 5_000;
        const resent = await f.nextDelivery(f.engine.queues.normal, job.jobId);
        // That message is lost as well: the reaper sends it again a lease later.
        await deleteMessages(f.engine.sqs, resent.queueUrl, [resent.receiptHandle]);
        time.offsetMs += LEASE_MS + REAPER_SETTLE_MS + 5_000;
        const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
        expect(await f.process(f.workerDeps("restarted"), again)).toBe("ack");
      } finally {
        stop.abort();
        await ticks;
      }
      expect(await onlyRunOf(job.jobId)).toMatchObject({
        status: "SUCCEEDED",
        fence: 2,
        workerId: "restarted",
      });
    }, 60_000);
  });

  describe("a restart after a worker died between its run's write and its job's", () => {
    it("the restart's reaper writes the job's side the lost message would have: the one-off completes with its lastRun", async ({
      onTestFinished,
    }) => {
      const { f, clock, onlyRunOf } = await ownFixture(onTestFinished);
      const { job } = await createJob(
        f.engine,
        testJob({ schedule: { runAt: clock().toISOString() } }),
      );
      const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      // The run's SUCCEEDED ending lands; the process dies on the job's write, and the in-memory
      // queue loses the message with it, so no redelivery repairs the job.
      const dying = withFaults(f.engine, {
        operation: "UpdateItem",
        times: 1,
        match: (input) => input.TableName === f.engine.tables.jobs,
        error: () => new Error("worker died between the run's write and the job's"),
      });
      try {
        await expect(
          processRun({ ...f.workerDeps("dying"), engine: dying.engine }, delivery),
        ).rejects.toThrow("worker died");
      } finally {
        dying.destroy();
      }
      await deleteMessages(f.engine.sqs, delivery.queueUrl, [delivery.receiptHandle]);
      expect(await onlyRunOf(job.jobId)).toMatchObject({ status: "SUCCEEDED" });
      expect(await getJob(f.engine, job.jobId)).toMatchObject({ status: "ACTIVE", lastRun: null });

      await recoverLostMessages(f.engine);

      const run = await onlyRunOf(job.jobId);
      expect(await getJob(f.engine, job.jobId)).toMatchObject({
        status: "COMPLETED",
        lastRun: { runId: run.runId, status: "SUCCEEDED" },
      });
    }, 30_000);
  });

  describe("recovered runs are not misfires (lease = grace)", () => {
    it("a run interrupted by its worker's crash runs when redelivered, under skip", async ({
      onTestFinished,
    }) => {
      const { f, time, clock, runsOf, secondAfter } = await ownFixture(onTestFinished);
      const { job } = await createJob(
        f.engine,
        testJob({
          schedule: hourly(secondAfter(1000)),
          policies: { ...testJob().policies, misfire: "skip" },
        }),
      );
      const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect((await startRun(f.engine, first.message, "crashed", clock())).kind).toBe("started");
      // Its lease lapses, and the message comes back: past the grace since the occurrence.
      time.offsetMs = LEASE_MS + 5_000;
      await setVisibility(f.engine.sqs, first.queueUrl, first.receiptHandle, 0);
      const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(await f.process(f.workerDeps("survivor"), again)).toBe("ack");
      const [run] = await runsOf(job.jobId);
      expect(run).toMatchObject({ status: "SUCCEEDED", fence: 2, reason: null });
    }, 30_000);

    it("a run whose message was lost runs when the reaper re-sends it, under skip and fire_once", async ({
      onTestFinished,
    }) => {
      const { f, time, runsOf, deliveryOf, secondAfter } = await ownFixture(onTestFinished);
      // fire_once skips a late run only when a later occurrence is late too: a frequent schedule.
      // Each schedule starts a second after its own create: one computed before the first case ran
      // would have started in the past, its first occurrence 30 s on.
      for (const [misfire, scheduleFrom] of [
        ["skip", hourly],
        ["fire_once", (startAt: Date) => ({ every: "PT30S", startAt: startAt.toISOString() })],
      ] as const) {
        time.offsetMs = 0;
        const { job } = await createJob(
          f.engine,
          testJob({
            schedule: scheduleFrom(secondAfter(1000)),
            policies: { ...testJob().policies, misfire },
          }),
        );
        const lost = await f.nextDelivery(f.engine.queues.normal, job.jobId);
        await deleteMessages(f.engine.sqs, lost.queueUrl, [lost.receiptHandle]);
        // The reaper looks a lease after the run was due, on its next tick.
        time.offsetMs = LEASE_MS + 40_000;
        expect((await reap(f.engine)).resent).toBeGreaterThanOrEqual(1);
        const resent = await deliveryOf(job.jobId, lost.message.scheduledFor);
        expect(await f.process(f.workerDeps("w"), resent)).toBe("ack");
        const run = (await runsOf(job.jobId)).find(
          (r) => r.scheduledFor === lost.message.scheduledFor,
        );
        expect(run).toMatchObject({ status: "SUCCEEDED", fence: 1, reason: null });
      }
    }, 60_000);

    it("a re-sent run the workers only reach more than the grace later is still a misfire", async ({
      onTestFinished,
    }) => {
      const { f, time, runsOf, deliveryOf, secondAfter } = await ownFixture(onTestFinished);
      const { job } = await createJob(
        f.engine,
        testJob({
          schedule: hourly(secondAfter(1000)),
          policies: { ...testJob().policies, misfire: "skip" },
        }),
      );
      const lost = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      await deleteMessages(f.engine.sqs, lost.queueUrl, [lost.receiptHandle]);
      time.offsetMs = LEASE_MS + REAPER_SETTLE_MS + 5_000;
      expect((await reap(f.engine)).resent).toBeGreaterThanOrEqual(1);
      const resent = await deliveryOf(job.jobId, lost.message.scheduledFor);
      // The workers were down: the re-sent message is taken only two minutes later.
      time.offsetMs += 2 * GRACE_MS;
      expect(await f.process(f.workerDeps("w"), resent)).toBe("ack");
      const [run] = await runsOf(job.jobId);
      expect(run?.status).toBe("SKIPPED");
      expect(run?.reason).toMatch(/^misfire: .*policy skip/);
    }, 30_000);

    it("after a restart, what fell due while the scheduler was down still counts from its occurrence", async ({
      onTestFinished,
    }) => {
      const { f, time, runsOf, deliveryOf, secondAfter } = await ownFixture(onTestFinished);
      const { job } = await createJob(
        f.engine,
        testJob({
          schedule: hourly(secondAfter(1000)),
          policies: { ...testJob().policies, misfire: "skip" },
        }),
      );
      const lost = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      await deleteMessages(f.engine.sqs, lost.queueUrl, [lost.receiptHandle]);
      // Down for two minutes; the restart re-sends every run in flight.
      time.offsetMs = 2 * GRACE_MS;
      expect((await reap(f.engine, { overdueBefore: FAR_FUTURE })).resent).toBeGreaterThanOrEqual(
        1,
      );
      const first = await deliveryOf(job.jobId, lost.message.scheduledFor);
      await deleteMessages(f.engine.sqs, first.queueUrl, [first.receiptHandle]);
      // The catch-up is slow: a lease later the tick's reaper sends it again.
      time.offsetMs += LEASE_MS + REAPER_SETTLE_MS + 5_000;
      expect((await reap(f.engine)).resent).toBeGreaterThanOrEqual(1);
      const again = await deliveryOf(job.jobId, lost.message.scheduledFor);
      expect(await f.process(f.workerDeps("w"), again)).toBe("ack");
      const [run] = await runsOf(job.jobId);
      expect(run?.status).toBe("SKIPPED");
      expect(run?.reason).toMatch(/^misfire: .*policy skip/);
    }, 30_000);

    it("a run that waited on buffer_one runs after the run ahead of it, however long that took", async ({
      onTestFinished,
    }) => {
      const { f, time, clock, runsOf, secondAfter } = await ownFixture(onTestFinished);
      let release: () => void = () => undefined;
      const blocking = new Promise<void>((resolve) => {
        release = resolve;
      });
      const handlers = {
        block: (ctx: JobContext) =>
          ctx.scheduledFor === first?.message.scheduledFor ? blocking : Promise.resolve(),
      };
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "block",
          schedule: { every: "PT1M", startAt: secondAfter(1000).toISOString() },
          policies: { ...testJob().policies, misfire: "skip", overlap: "buffer_one" },
        }),
      );
      const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      // Heartbeats every 200 ms keep the first run's lease live on the engine's clock as it jumps.
      const ahead = f.process(f.workerDeps("a", handlers, 200), first);
      await waitFor("the first run to be admitted", async () => {
        const current = await getJob(f.engine, job.jobId);
        return Object.keys(current?.activeRuns ?? {}).length === 1;
      });

      // A minute on, the second occurrence starts while the first still runs: it is buffered.
      time.offsetMs = 61_000;
      await waitFor("a heartbeat on the new clock", async () => {
        const current = await getJob(f.engine, job.jobId);
        return Object.values(current?.activeRuns ?? {}).every((l) => l > clock().toISOString());
      });
      const second = (await runsOf(job.jobId))[1];
      if (!second) throw new Error("no second occurrence queued");
      await sendRuns(
        f.engine.sqs,
        f.engine.queues,
        [{ message: runMessageOf(second), dueAt: new Date(second.dueAt) }],
        clock(),
      );
      const secondDelivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(secondDelivery.message.scheduledFor).toBe(second.scheduledFor);
      expect(await f.process(f.workerDeps("b", handlers), secondDelivery)).toBe("ack");
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(second.runId);

      // The first run takes two more minutes; the buffered one starts past the grace.
      time.offsetMs += 2 * GRACE_MS;
      release();
      expect(await ahead).toBe("ack");
      const woken = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(woken.message.scheduledFor).toBe(second.scheduledFor);
      expect(await f.process(f.workerDeps("b", handlers), woken)).toBe("ack");
      const [firstRun, secondRun] = await runsOf(job.jobId);
      expect(firstRun?.status).toBe("SUCCEEDED");
      expect(secondRun).toMatchObject({ status: "SUCCEEDED", reason: null });
    }, 60_000);
  });

  describe("a run at attempt 9999, the last a run can have", () => {
    it("whose worker died is re-sent by the reaper and runs again as attempt 9999; failing there, it is dead, not retried", async ({
      onTestFinished,
    }) => {
      const { f, time, clock, onlyRunOf, secondAfter } = await ownFixture(onTestFinished);
      // A policy past the last attempt (the API allows 100): only the four digits of a stored attempt stop it.
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "fail",
          payload: { retryable: true },
          schedule: { runAt: secondAfter(1000).toISOString() },
          policies: {
            ...testJob().policies,
            retry: { maxAttempts: 20_000, initialDelayMs: 1_000, maxDelayMs: 1_000 },
          },
        }),
      );
      const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      await deleteMessages(f.engine.sqs, first.queueUrl, [first.receiptHandle]);
      // The occurrence at its last attempt (as if replayed up to there), taken by a worker that dies.
      const last = { ...first.message, attempt: MAX_ATTEMPT };
      await copyRunToAttempt(f.engine, first.message, MAX_ATTEMPT);
      await f.engine.doc.send(
        new DeleteCommand({ TableName: f.engine.tables.runs, Key: runKeyOf(first.message) }),
      );
      expect((await startRun(f.engine, last, "crashed", clock())).kind).toBe("started");

      time.offsetMs = LEASE_MS + 40_000;
      expect((await reap(f.engine)).resent).toBeGreaterThanOrEqual(1);
      const resent = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(resent.message.attempt).toBe(MAX_ATTEMPT);
      expect(await f.process(f.workerDeps("survivor"), resent)).toBe("ack");

      const dead = await onlyRunOf(job.jobId);
      expect(dead).toMatchObject({
        attempt: MAX_ATTEMPT,
        status: "DEAD",
        fence: 2,
        reason: `gave up after ${MAX_ATTEMPT} attempts: fail: attempt ${MAX_ATTEMPT} (every attempt fails: no payload.times)`,
      });
      expect((await f.dueEntries()).filter((e) => e.jobId === job.jobId)).toEqual([]);
      await expect(replayDeadLetter(f.engine, job.tenantId, dead.runId)).rejects.toThrow(
        NotReplayableError,
      );
    }, 30_000);
  });
});
