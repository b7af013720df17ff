import { describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { cancelRun, createJob, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { sendRuns } from "../../shared/queue/work-queue.js";
import { runMessageOf } from "../../shared/storage/items.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import {
  caseFixture,
  deliveryOfRun,
  type EngineFixture,
  type ShiftedClock,
  shiftedClock,
  testJob,
} from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { waitFor } from "../support/wait.js";

/**
 * The helpers below on the fixture and clock given: each case has its own. The clock runs
 * `time.offsetMs` ahead of the machine's to reach later occurrences at once.
 */
function casesOn(f: EngineFixture, time: ShiftedClock) {
  const { clock } = time;
  async function runsOf(jobId: string): Promise<Run[]> {
    return (await f.runs())
      .filter((r) => r.jobId === jobId)
      .sort((a, b) => a.scheduledFor.localeCompare(b.scheduledFor));
  }

  /**
   * A per-minute buffer_one job whose first run blocks until released, started by a worker that
   * heartbeats every 200 ms (so its lease stays live on the engine's clock as that jumps).
   */
  async function jobWithARunningRun() {
    time.offsetMs = 0;
    let release: () => void = () => undefined;
    const blocking = new Promise<void>((resolve) => {
      release = resolve;
    });
    const startAt = new Date(Math.ceil((Date.now() + 1000) / 1000) * 1000).toISOString();
    const handlers = {
      block: (ctx: JobContext) => (ctx.scheduledFor === startAt ? blocking : Promise.resolve()),
    };
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "block",
        schedule: { every: "PT1M", startAt },
        policies: { ...testJob().policies, misfire: "fire_all", overlap: "buffer_one" },
      }),
    );
    const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const running = f.process(f.workerDeps("ahead", handlers, 200), first);
    await waitFor("the first run to be admitted", async () => {
      const current = await getJob(f.engine, job.jobId);
      return Object.keys(current?.activeRuns ?? {}).length === 1;
    });
    return { job, handlers, release, running };
  }

  /** Moves the engine's clock to occurrence `n` (0 is the first) and delivers that run. */
  async function deliverOccurrence(jobId: string, n: number) {
    time.offsetMs = n * 60_000 + 1000;
    await waitFor("a heartbeat on the new clock", async () => {
      const current = await getJob(f.engine, jobId);
      return Object.values(current?.activeRuns ?? {}).every((l) => l > clock().toISOString());
    });
    const run = (await runsOf(jobId))[n];
    if (!run) throw new Error(`occurrence ${n} was not queued`);
    await sendRuns(
      f.engine.sqs,
      f.engine.queues,
      [{ message: runMessageOf(run), dueAt: new Date(run.dueAt) }],
      clock(),
    );
    for (;;) {
      const received = await f.nextDelivery(f.engine.queues.normal, jobId);
      if (received.message.scheduledFor === run.scheduledFor) return { run, received };
    }
  }

  /**
   * The buffered run's message came back (the batch of the delivery that buffered it was lost) and
   * its next delivery started the run and crashed its worker, whose lease has lapsed since: the
   * engine as a queue whose redrive allows two deliveries (the least the stack takes) sees it, so
   * the DLQ consumer marks the run DEAD. A run still waiting in the buffer (QUEUED) crashed nothing.
   */
  async function crashedOnItsNextStart(run: Run): Promise<Engine> {
    const lapsed = new Date(clock().getTime() - f.engine.settings.leaseMs - 1);
    expect((await startRun(f.engine, run, "crashed", lapsed)).kind).toBe("started");
    return { ...f.engine, settings: { ...f.engine.settings, maxReceiveCount: 2 } };
  }

  async function statusOf(jobId: string, runId: string) {
    const run = (await runsOf(jobId)).find((r) => r.runId === runId);
    return { status: run?.status, reason: run?.reason };
  }
  return { runsOf, jobWithARunningRun, deliverOccurrence, crashedOnItsNextStart, statusOf };
}

/** A fixture and clock of the case's own (the fixture destroyed when the case ends), and the helpers on them. */
async function ownFixture(atEnd: (cleanup: () => Promise<void>) => void) {
  const time = shiftedClock();
  const f = await caseFixture(atEnd, { clock: time.clock });
  return { f, time, ...casesOn(f, time) };
}

/**
 * Each case waits on heartbeats on the jumped clock, a gated run and deliveries (the file took 25
 * s, 7 s of CPU, one case after another). Side by side, each on tables, queues and a clock of its
 * own (another case's receive would take its messages, its clock jump move another's), they take
 * the longest case's time.
 */
describe.concurrent("buffer_one, its cases side by side", () => {
  describe("buffer_one after a buffered run ends without being admitted", () => {
    it("a buffered run that dies (redrive DLQ) or is skipped (edited out of the schedule) frees the slot for the next overlap", async ({
      onTestFinished,
    }) => {
      const { f, jobWithARunningRun, deliverOccurrence, crashedOnItsNextStart, statusOf } =
        await ownFixture(onTestFinished);
      const { job, handlers, release, running } = await jobWithARunningRun();
      const worker = f.workerDeps("next", handlers);

      // Occurrence 1 overlaps the running one and waits in the buffer; its next start crashes its
      // worker, and its message then reaches the DLQ.
      const one = await deliverOccurrence(job.jobId, 1);
      expect(await f.process(worker, one.received)).toBe("ack");
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(one.run.runId);
      await handleCrashedRun(await crashedOnItsNextStart(one.run), runMessageOf(one.run), 2);
      expect(await statusOf(job.jobId, one.run.runId)).toMatchObject({ status: "DEAD" });
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBeNull();

      // Occurrence 2 overlaps too: it waits in the buffer rather than being skipped.
      const two = await deliverOccurrence(job.jobId, 2);
      expect(await f.process(worker, two.received)).toBe("ack");
      expect(await statusOf(job.jobId, two.run.runId)).toMatchObject({
        status: "QUEUED",
        reason: "waiting: overlap policy buffer_one",
      });
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(two.run.runId);

      // A new schedule no longer has occurrence 2: the buffered run's next delivery skips it, and
      // frees the slot.
      const before = await getJob(f.engine, job.jobId);
      if (!before) throw new Error("job gone");
      const shifted = new Date(Date.parse(two.run.scheduledFor) + 30_000).toISOString();
      await editJob(f.engine, job.tenantId, job.jobId, before.version, {
        schedule: { every: "PT1M", startAt: shifted },
      });
      const again = await deliverOccurrence(job.jobId, 2);
      expect(again.run.runId).toBe(two.run.runId);
      expect(await f.process(worker, again.received)).toBe("ack");
      const skipped = await statusOf(job.jobId, two.run.runId);
      expect(skipped.status).toBe("SKIPPED");
      expect(skipped.reason).toMatch(/^job edited/);
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBeNull();

      release();
      expect(await running).toBe("ack");
    }, 60_000);

    it("a slot whose run ended without freeing it (the worker died in between) is taken over by the next overlap", async ({
      onTestFinished,
    }) => {
      const { f, jobWithARunningRun, deliverOccurrence, crashedOnItsNextStart, statusOf } =
        await ownFixture(onTestFinished);
      const { job, handlers, release, running } = await jobWithARunningRun();
      const one = await deliverOccurrence(job.jobId, 1);
      expect(await f.process(f.workerDeps("next", handlers), one.received)).toBe("ack");
      const redrive = await crashedOnItsNextStart(one.run);
      // Fault injection on a real client: the write that frees the slot fails, as if the process died.
      const dying = createTestClients();
      dying.doc.middlewareStack.add(
        (next) => async (args) => {
          const input: object = args.input;
          const update = "UpdateExpression" in input ? String(input.UpdateExpression) : "";
          if (update.includes("REMOVE bufferedRunId")) throw new Error("process died");
          return next(args);
        },
        { step: "initialize", name: "dieBeforeTheSlotIsFreed" },
      );
      try {
        await expect(
          handleCrashedRun({ ...redrive, doc: dying.doc }, runMessageOf(one.run), 2),
        ).rejects.toThrow("process died");
      } finally {
        dying.destroy();
      }
      expect(await statusOf(job.jobId, one.run.runId)).toMatchObject({ status: "DEAD" });
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(one.run.runId);

      const two = await deliverOccurrence(job.jobId, 2);
      expect(await f.process(f.workerDeps("next", handlers), two.received)).toBe("ack");
      expect(await statusOf(job.jobId, two.run.runId)).toMatchObject({ status: "QUEUED" });
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(two.run.runId);

      release();
      expect(await running).toBe("ack");
      // The run ahead ended: the buffered one is sent at once and runs.
      const woken = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(woken.message.scheduledFor).toBe(two.run.scheduledFor);
      expect(await f.process(f.workerDeps("next", handlers), woken)).toBe("ack");
      expect(await statusOf(job.jobId, two.run.runId)).toMatchObject({ status: "SUCCEEDED" });
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBeNull();
    }, 60_000);
  });

  describe("buffer_one when the run ahead is cancelled", () => {
    it("sends the buffered run the moment the cancelled run ends, not at its next recheck", async ({
      onTestFinished,
    }) => {
      const { f, runsOf, jobWithARunningRun, deliverOccurrence, statusOf } =
        await ownFixture(onTestFinished);
      const { job, handlers, release, running } = await jobWithARunningRun();
      // The buffered run's own recheck is far off: only the ending of the run ahead can wake it.
      const worker = { ...f.workerDeps("next", handlers), overlapRecheckMs: 60_000 };
      const one = await deliverOccurrence(job.jobId, 1);
      expect(await f.process(worker, one.received)).toBe("ack");
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(one.run.runId);

      const ahead = (await runsOf(job.jobId))[0];
      if (!ahead) throw new Error("the first run is gone");
      await cancelRun(f.engine, job.tenantId, job.jobId, ahead.runId);
      // Its worker carries the cancel out within a heartbeat and ends it CANCELLED.
      expect(await running).toBe("ack");
      expect(await statusOf(job.jobId, ahead.runId)).toMatchObject({ status: "CANCELLED" });
      const woken = await f.nextDelivery(f.engine.queues.normal, job.jobId, 5_000);
      expect(woken.message.scheduledFor).toBe(one.run.scheduledFor);
      expect(await f.process(worker, woken)).toBe("ack");
      expect(await statusOf(job.jobId, one.run.runId)).toMatchObject({ status: "SUCCEEDED" });
      release();
    }, 60_000);
  });

  describe("buffer_one when the job is paused while a run waits", () => {
    it("the waiting run is parked when the run ahead ends, and runs after resume, alone", async ({
      onTestFinished,
    }) => {
      const { f, runsOf, jobWithARunningRun, deliverOccurrence, statusOf } =
        await ownFixture(onTestFinished);
      const { job, handlers, release, running } = await jobWithARunningRun();
      const worker = f.workerDeps("next", handlers);
      const one = await deliverOccurrence(job.jobId, 1);
      expect(await f.process(worker, one.received)).toBe("ack");
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(one.run.runId);

      await pauseJob(f.engine, job.tenantId, job.jobId);
      release();
      expect(await running).toBe("ack");
      // Woken by the ending, it finds the job paused: parked, not run and not skipped.
      const woken = await f.nextDelivery(f.engine.queues.normal, job.jobId, 5_000);
      expect(woken.message.scheduledFor).toBe(one.run.scheduledFor);
      expect(await f.process(worker, woken)).toBe("ack");
      expect(await statusOf(job.jobId, one.run.runId)).toMatchObject({
        status: "QUEUED",
        reason: "waiting: job paused",
      });

      await resumeJob(f.engine, job.tenantId, job.jobId);
      const again = await f.nextDelivery(f.engine.queues.normal, job.jobId, 5_000);
      expect(again.message.scheduledFor).toBe(one.run.scheduledFor);
      expect(await f.process(worker, again)).toBe("ack");
      expect(await statusOf(job.jobId, one.run.runId)).toMatchObject({ status: "SUCCEEDED" });
      const after = await getJob(f.engine, job.jobId);
      expect(after?.bufferedRunId ?? null).toBeNull();
      const ran = (await runsOf(job.jobId)).filter((r) => r.status === "SUCCEEDED");
      expect(ran.map((r) => r.scheduledFor)).toEqual(
        (await runsOf(job.jobId)).slice(0, 2).map((r) => r.scheduledFor),
      );
    }, 60_000);
  });

  describe("buffer_one when the next occurrence comes as the run ahead ends", () => {
    it("the run waiting in the buffer runs first: the newcomer waits behind it, not ahead of it", async ({
      onTestFinished,
    }) => {
      const { f, time, runsOf, jobWithARunningRun, deliverOccurrence, statusOf } =
        await ownFixture(onTestFinished);
      const { job, handlers, release, running } = await jobWithARunningRun();
      const worker = f.workerDeps("next", handlers);
      const one = await deliverOccurrence(job.jobId, 1);
      expect(await f.process(worker, one.received)).toBe("ack");
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(one.run.runId);

      // The run ahead ends (its ending sends the buffered run again), and occurrence 2 falls due
      // before that message is taken.
      release();
      expect(await running).toBe("ack");
      time.offsetMs = 2 * 60_000 + 1000;
      const two = (await runsOf(job.jobId))[2];
      if (!two) throw new Error("occurrence 2 was not queued");
      expect(await processRun(worker, deliveryOfRun(f.engine, two))).toBe("ack");
      expect(await statusOf(job.jobId, two.runId)).toMatchObject({
        status: "QUEUED",
        reason: "waiting: overlap policy buffer_one",
      });

      // The buffered run takes the slot; the newcomer then takes the waiting place, and runs after it.
      const woken = await f.nextDelivery(f.engine.queues.normal, job.jobId, 5_000);
      expect(woken.message.scheduledFor).toBe(one.run.scheduledFor);
      expect(await f.process(worker, woken)).toBe("ack");
      expect(await statusOf(job.jobId, one.run.runId)).toMatchObject({ status: "SUCCEEDED" });
      expect(await processRun(worker, deliveryOfRun(f.engine, two))).toBe("ack");
      expect(await statusOf(job.jobId, two.runId)).toMatchObject({ status: "SUCCEEDED" });
    }, 60_000);
  });
});
