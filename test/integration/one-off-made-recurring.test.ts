import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CLAIM_REACH_SECONDS } from "../../shared/config.js";
import { JobError } from "../../shared/execution/job-contract.js";
import { cancelJob, createJob, editJob } from "../../shared/jobs/index.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  dailyAwayFrom,
  deliveryOfRun,
  type EngineFixture,
  shiftedClock,
  testJob,
} from "../support/engine-fixture.js";
import { heldHandler, runEndings, runOf } from "../support/held-runs.js";
import { waitFor } from "../support/wait.js";

/**
 * A one-off's runs are not listed in its `activeRuns`; a recurring job's running runs are found
 * there and in the occurrences of one lookahead back. A one-off's run still under way when an edit
 * makes the job recurring, its occurrence more than a lookahead back when the job is then
 * cancelled, paused with running: "cancel" or deleted, is one neither read finds, unless the job
 * reads its one-off era's occurrences too.
 */

/** Past one lookahead (5 minutes) back, where a recurring job's cancel starts its read. */
const PAST_LOOKAHEAD_MS = 6 * 60_000;
/** Long enough that the run's lease stays live across the clock's move (heartbeats would keep it). */
const LEASE_MS = 15 * 60_000;

const time = shiftedClock();
let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture({ clock: time.clock, settings: { leaseMs: LEASE_MS } });
});
afterAll(() => f.destroy());

/** What a case leaves under way: released and awaited at its end, whether or not it passed. */
const holds: { release(): void }[] = [];
const unfinished: Promise<unknown>[] = [];
afterEach(async () => {
  for (const held of holds.splice(0)) held.release();
  await Promise.allSettled(unfinished.splice(0));
  time.offsetMs = 0;
});

/**
 * A one-off due now whose run a worker runs in a held handler (its start written at its first
 * heartbeat, `heartbeatEveryMs` on: held unwritten till then), the clock then moved past a
 * lookahead, and an edit making the job recurring (a daily cron, far from now).
 */
async function oneOffRunningWhenMadeRecurring(heartbeatEveryMs: number, written: boolean) {
  const { job } = await createJob(
    f.engine,
    testJob({ type: "held", schedule: { runAt: f.engine.clock().toISOString() } }),
  );
  const run = await runOf(f, job.jobId);
  const held = heldHandler();
  holds.push(held);
  const deps = f.workerDeps("worker-a", { held: held.handler }, heartbeatEveryMs);
  const delivery = f.process(deps, deliveryOfRun(f.engine, run));
  unfinished.push(delivery);
  await waitFor("the handler to run", () => held.contexts.length > 0);
  if (written)
    await waitFor("the run's start written", async () => {
      const read = await getRun(f.engine, run);
      return read?.status === "RUNNING";
    });
  else expect((await getRun(f.engine, run))?.status).toBe("QUEUED");
  time.offsetMs = PAST_LOOKAHEAD_MS;
  const edited = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
    schedule: dailyAwayFrom(f.engine.clock()).schedule,
  });
  expect("runAt" in edited.schedule).toBe(false);
  /** The run as it ends once its handler is let go. */
  const ending = async () => {
    held.release();
    await delivery;
    return getRun(f.engine, run);
  };
  return { job: edited, run, ending };
}

const ENDINGS = runEndings(() => f.engine);

describe("a one-off's run under way when an edit makes the job recurring", () => {
  it.each(ENDINGS)(
    "running, its occurrence past a lookahead: %s reaches it",
    async (_, end) => {
      const { job, run, ending } = await oneOffRunningWhenMadeRecurring(100, true);
      await end(job);
      // Under its worker's live lease: asked to cancel, which the worker carries out.
      expect((await getRun(f.engine, run))?.cancelRequestedAt ?? null).not.toBeNull();
      expect((await ending())?.status).toBe("CANCELLED");
    },
    30_000,
  );

  it.each(ENDINGS.slice(0, 2))(
    "its start held unwritten, its occurrence past a lookahead: %s ends it",
    async (_, end) => {
      // No heartbeat while the case lasts (a minute on, well within the run's reaper deadline):
      // the run reads QUEUED, its handler running.
      const { job, ending } = await oneOffRunningWhenMadeRecurring(60_000, false);
      await end(job);
      expect((await ending())?.status).toBe("CANCELLED");
    },
    30_000,
  );

  it.each(ENDINGS)(
    "running, made a one-off again (its floor set anew), its occurrence past a lookahead: %s reaches it",
    async (_, end) => {
      const { job, run, ending } = await oneOffRunningWhenMadeRecurring(100, true);
      const runAt = new Date(f.engine.clock().getTime() + 3_600_000).toISOString();
      const again = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
        schedule: { runAt },
      });
      expect(again.oneOffFrom !== undefined && again.oneOffFrom > run.scheduledFor).toBe(true);
      await end(again);
      expect((await getRun(f.engine, run))?.cancelRequestedAt ?? null).not.toBeNull();
      expect((await ending())?.status).toBe("CANCELLED");
    },
    30_000,
  );

  it.each([
    ["recurring", false],
    ["recurring and a one-off again", true],
  ] as const)(
    "a failure's retry started after the edit (made %s), its occurrence past a lookahead: a job cancel reaches it",
    async (_, oneOffAgain) => {
      const { job, retry } = await retryingOneOff();
      const edited = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
        schedule: dailyAwayFrom(f.engine.clock()).schedule,
      });
      const runAt = new Date(f.engine.clock().getTime() + 3_600_000).toISOString();
      const current = oneOffAgain
        ? await editJob(f.engine, job.tenantId, job.jobId, edited.version, { schedule: { runAt } })
        : edited;
      time.offsetMs = PAST_LOOKAHEAD_MS;
      const held = heldHandler();
      holds.push(held);
      const deps = f.workerDeps("worker-b", { held: held.handler }, 100);
      const delivery = f.process(deps, deliveryOfRun(f.engine, retry));
      unfinished.push(delivery);
      await waitFor("the retry's start written", async () => {
        const read = await getRun(f.engine, retry);
        return read?.status === "RUNNING";
      });
      // Its worker decided under the job as it is: recurring, it admitted the run (listed).
      const listed = Object.keys((await getJob(f.engine, job.jobId))?.activeRuns ?? {});
      expect(listed.includes(retry.runId)).toBe(!oneOffAgain);
      await cancelJob(f.engine, current.tenantId, current.jobId);
      expect((await getRun(f.engine, retry))?.cancelRequestedAt ?? null).not.toBeNull();
      held.release();
      await delivery;
      expect((await getRun(f.engine, retry))?.status).toBe("CANCELLED");
    },
    30_000,
  );
});

describe("the era of a one-off due far ahead, made recurring", () => {
  it("ends at the claim reach: no run of it lies beyond, and the recurring history there is not its", async () => {
    const weekAhead = new Date(f.engine.clock().getTime() + 7 * 24 * 3_600_000);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: weekAhead.toISOString() } }),
    );
    const edited = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
      schedule: dailyAwayFrom(f.engine.clock()).schedule,
    });
    const until = Date.parse(edited.oneOffEra?.until ?? "");
    expect(until).toBeGreaterThanOrEqual(Date.parse(edited.updatedAt));
    expect(until).toBeLessThanOrEqual(Date.parse(edited.updatedAt) + CLAIM_REACH_SECONDS * 1000);
  });
});

/** A one-off due now whose first run failed retryably: attempt 2 QUEUED, a second after it. */
async function retryingOneOff() {
  const { job } = await createJob(
    f.engine,
    testJob({
      type: "held",
      schedule: { runAt: f.engine.clock().toISOString() },
      policies: {
        ...testJob().policies,
        retry: { maxAttempts: 3, initialDelayMs: 1000, maxDelayMs: 1000 },
      },
    }),
  );
  const first = await runOf(f, job.jobId);
  const failing = async () => {
    throw new JobError("flaky", { retryable: true });
  };
  await f.process(f.workerDeps("worker-a", { held: failing }), deliveryOfRun(f.engine, first));
  const retry = (await f.runs()).find((r) => r.jobId === job.jobId && r.attempt === 2);
  if (!retry) throw new Error("no retry queued");
  return { job, retry };
}
