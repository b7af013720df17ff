import { afterAll, describe, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import type { JobHandler } from "../../shared/execution/job-contract.js";
import { processRun, type WorkerDeps } from "../../shared/execution/worker.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import type { MisfirePolicy, OverlapPolicy } from "../../shared/policies.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import {
  caseFixture,
  type EngineFixture,
  shiftedClock,
  testJob,
} from "../support/engine-fixture.js";
import { clientsDyingAfterAdmission } from "../support/faults.js";
import type { TestClients } from "../support/namespace.js";
import { waitFor } from "../support/wait.js";

const LEASE_MS = 4000;
/** Shorter than the lease, as the worker loop's redelivery (lease + 2 s) is longer than the grace. */
const GRACE_MS = 3000;
/**
 * The shortest lookahead (60 s): a job running every second has each occurrence within it claimed
 * at its create, a run item and a message each, and the cases need only the first few seconds'.
 */
const LOOKAHEAD_MS = 60_000;
const SETTINGS = {
  settings: { leaseMs: LEASE_MS, misfireGraceMs: GRACE_MS, lookaheadMs: LOOKAHEAD_MS },
};

const made: TestClients[] = [];
afterAll(() => {
  for (const c of made) c.destroy();
});

/** A run held back by its overlap policy looks again a second later, not 5 s. */
const recheckingSoon = (deps: WorkerDeps): WorkerDeps => ({ ...deps, overlapRecheckMs: 1_000 });

/** A worker whose every request hangs once its run's admission is written: it died mid-run. */
function dyingWorker(
  fixture: EngineFixture,
  workerId: string,
  handlers: Record<string, JobHandler>,
): WorkerDeps {
  const dying = clientsDyingAfterAdmission();
  made.push(dying);
  // A short beat: a first delivery holds its start unwritten only while its first write comes
  // well before the run's reaper deadline, a lease after it was due.
  const deps = fixture.workerDeps(workerId, handlers, 500);
  return { ...deps, engine: { ...deps.engine, doc: dying.doc } };
}

/**
 * Overlap `skip` (the default) skips a first attempt that meets a run under way, and `buffer_one`
 * one that finds the waiting place held. A first attempt whose handler a worker started and that
 * worker died (a crash, a Lambda timeout) had its turn, as a retry has: delivered again while the
 * job's next run is under way, it waits for that run (beside buffer_one's waiting run, without
 * taking its place) and runs after it, rather than end SKIPPED with no retry and no dead letter.
 *
 * The four cases run side by side, most of each its wait for the crashed run's lease to lapse, each
 * on tables and queues of its own (caseFixture): on one queue, a case's message that came back
 * while the case was busy elsewhere (its run ahead ending) was received and put back by the other
 * three until the redrive took it to the DLQ, and in one CI run all four waited out their 20 s.
 */
describe.concurrent("a first attempt whose worker died after its admission, delivered again while the next run is under way", () => {
  const written = { status: "RUNNING", fence: 1 } as const;
  const unwritten = { status: "QUEUED", fence: 0 } as const;
  it.for<[string, OverlapPolicy, number, typeof written | typeof unwritten]>([
    ["its start written (RUNNING, lease lapsed: a takeover)", "skip", 2, written],
    ["its start held unwritten (QUEUED, fence 0)", "skip", 1, unwritten],
    ["its start written (RUNNING, lease lapsed: a takeover)", "buffer_one", 2, written],
    ["its start held unwritten (QUEUED, fence 0)", "buffer_one", 1, unwritten],
  ])(
    "%s waits for the run under way and runs after it, under %s",
    { timeout: 30_000 },
    async ([, overlap, receiveCount, crashedAs], { expect, onTestFinished }) => {
      const f = await caseFixture(onTestFinished, SETTINGS);
      let ran = 0;
      let release: () => void = () => undefined;
      const blocking = new Promise<void>((resolve) => {
        release = resolve;
      });
      const handlers: Record<string, JobHandler> = {
        first: async () => {
          ran++;
        },
      };
      const blocked: JobHandler = () => blocking;
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "first",
          schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
          policies: { ...testJob().policies, overlap },
        }),
      );

      // The first run's handler runs, and its worker dies before recording anything more.
      const first = await triggerJob(f.engine, job.tenantId, job.jobId);
      const firstDelivery = await f.nextDeliveryOfRun(first);
      void processRun(dyingWorker(f, "dies", handlers), { ...firstDelivery, receiveCount });
      await waitFor("the first run's handler", () => ran === 1);
      expect(await getRun(f.engine, first)).toMatchObject(crashedAs);
      expect((await getJob(f.engine, job.jobId))?.activeRuns[first.runId]).toBeDefined();

      // Its lease lapses, and the job's next run starts and is under way.
      await sleep(LEASE_MS + 300);
      const second = await triggerJob(f.engine, job.tenantId, job.jobId);
      const secondRunning = f.process(
        f.workerDeps("next", { first: blocked }),
        await f.nextDeliveryOfRun(second),
      );
      await waitFor("the next run's admission", async () => {
        const current = await getJob(f.engine, job.jobId);
        return current?.activeRuns[second.runId] !== undefined;
      });

      // Under buffer_one, another run holds the one waiting place.
      const buffered =
        overlap === "buffer_one" ? await triggerJob(f.engine, job.tenantId, job.jobId) : null;
      if (buffered !== null) {
        await f.process(f.workerDeps("buffered", handlers), await f.nextDeliveryOfRun(buffered));
        expect((await getJob(f.engine, job.jobId))?.bufferedRunId).toBe(buffered.runId);
      }

      // The crashed run's message comes back.
      expect(
        await f.process(recheckingSoon(f.workerDeps("recovers", handlers)), {
          ...firstDelivery,
          receiveCount: 2,
        }),
      ).toBe("ack");
      expect(await getRun(f.engine, first)).toMatchObject({
        status: "QUEUED",
        reason: `waiting: overlap policy ${overlap}`,
      });
      expect((await getJob(f.engine, job.jobId))?.bufferedRunId ?? null).toBe(
        buffered?.runId ?? null,
      );

      // The run ahead ends; the crashed run runs at its next look.
      release();
      expect(await secondRunning).toBe("ack");
      expect(
        await f.process(
          recheckingSoon(f.workerDeps("recovers again", handlers)),
          await f.nextDeliveryOfRun(first),
        ),
      ).toBe("ack");
      expect(await getRun(f.engine, first)).toMatchObject({ status: "SUCCEEDED" });
      expect(ran).toBe(2);
    },
  );
});

/**
 * Recovery is not a misfire: a first attempt whose handler a worker started was on time then. Its
 * message comes back a lease after the worker died, past the grace; the run must run again under
 * skip and fire_once, its start written or held unwritten (then its only trace is its job's
 * activeRuns entry).
 *
 * The three cases run side by side, beside the four above, each on tables, queues and a clock of
 * its own (caseFixture, shiftedClock): on one queue each case's receive took and put back the
 * others' messages (three jobs running every second), and on the machine's clock a first delivery
 * that reached its worker late under load was past the grace, skipped, its handler never run. One
 * run in three of them side by side failed that way before.
 */
describe.concurrent("a first attempt of an occurrence whose worker died after its admission, delivered again past the grace", () => {
  const written = { status: "RUNNING", fence: 1 } as const;
  const unwritten = { status: "QUEUED", fence: 0 } as const;
  it.for<[string, MisfirePolicy, number, typeof written | typeof unwritten]>([
    ["its start written (RUNNING, lease lapsed: a takeover)", "skip", 2, written],
    ["its start held unwritten (QUEUED, fence 0)", "skip", 1, unwritten],
    ["its start held unwritten (QUEUED, fence 0)", "fire_once", 1, unwritten],
  ])(
    "%s runs, not SKIPPED as late, under misfire %s",
    { timeout: 30_000 },
    async ([, misfire, receiveCount, crashedAs], { expect, onTestFinished }) => {
      const caseClock = shiftedClock();
      const f = await caseFixture(onTestFinished, { ...SETTINGS, clock: caseClock.clock });
      let ran = 0;
      const handlers: Record<string, JobHandler> = {
        first: async () => {
          ran++;
        },
      };
      // Every second: under fire_once a later occurrence is late too by the redelivery.
      const startAt = new Date(Math.ceil((Date.now() + 1000) / 1000) * 1000);
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "first",
          schedule: { every: "PT1S", startAt: startAt.toISOString() },
          policies: { ...testJob().policies, misfire },
        }),
      );
      const occurrence = { jobId: job.jobId, scheduledFor: startAt.toISOString(), attempt: 1 };

      // The occurrence's handler runs on time, and its worker dies before recording anything more.
      const firstDelivery = await f.nextDeliveryOfRun(occurrence);
      // On time: side by side on a loaded machine the delivery reached its worker past the grace by
      // the machine's clock, which skipped it as late (the handler never ran). The case's clock
      // reads the occurrence's second at it, and runs on from there.
      caseClock.offsetMs = Math.min(0, startAt.getTime() - Date.now());
      void processRun(dyingWorker(f, "dies", handlers), { ...firstDelivery, receiveCount });
      await waitFor("the occurrence's handler", () => ran === 1);
      expect(await getRun(f.engine, occurrence)).toMatchObject(crashedAs);
      expect((await getJob(f.engine, job.jobId))?.activeRuns).toHaveProperty([
        (await getRun(f.engine, occurrence))?.runId ?? "",
      ]);

      // Its message comes back once its lease has lapsed: more than the grace after it was due.
      await sleep(LEASE_MS + 300);
      expect(Date.now() - startAt.getTime()).toBeGreaterThan(GRACE_MS);
      expect(
        await f.process(f.workerDeps("recovers", handlers), { ...firstDelivery, receiveCount: 2 }),
      ).toBe("ack");
      expect(await getRun(f.engine, occurrence)).toMatchObject({
        status: "SUCCEEDED",
        reason: null,
      });
      expect(ran).toBe(2);
    },
  );
});
