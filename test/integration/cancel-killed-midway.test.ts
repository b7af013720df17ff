import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { processRun } from "../../shared/execution/worker.js";
import { cancelJob, createJob, deleteJob, pauseJob } from "../../shared/jobs/index.js";
import { getJob, getRunItem, runKeyOf } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";

const TENANT = "tenant-a";
const MINUTE = 60_000;

/** What an API request's Lambda does when it is killed (its timeout, a crash): it stops. */
class Killed extends Error {}

/**
 * An engine like `base` whose DynamoDB client dies (as a Lambda killed at its timeout does) at its
 * first request to the runs table after the job's write that says CANCELLED.
 */
function killedAfterCancelCommit(base: Engine) {
  const clients = createTestClients();
  let committed = false;
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = JSON.stringify(args.input);
      if (committed && input.includes(base.tables.runs))
        throw new Killed(`killed at ${context.commandName ?? "a request"}`);
      const result = await next(args);
      if (input.includes(base.tables.jobs) && input.includes("CANCELLED")) committed = true;
      return result;
    },
    { step: "initialize", name: "killAfterCommit" },
  );
  return { engine: { ...base, doc: clients.doc }, destroy: () => clients.destroy() };
}

/** An engine like `base` whose write of the job CANCELLED fails, sent or not (the cancel refused). */
function refusingCancelCommit(base: Engine) {
  const clients = createTestClients();
  clients.doc.middlewareStack.add(
    (next) => async (args) => {
      const input = JSON.stringify(args.input);
      if (input.includes(base.tables.jobs) && input.includes("CANCELLED"))
        throw new Killed("the cancel's commit refused");
      return next(args);
    },
    { step: "initialize", name: "refuseCancelCommit" },
  );
  return { engine: { ...base, doc: clients.doc }, destroy: () => clients.destroy() };
}

/**
 * docs/architecture.md "Known limits": a paused job's parked runs have no message, no reaper
 * deadline and no TTL, and a cancel (or delete) ends them after its commit. One killed in between
 * (its timeout: a cancel of 2,000 parked runs is 4,000 requests; a crash) left them QUEUED for a
 * repeat; unrepeated, nothing looked at them again, and they stayed in the job's history, QUEUED,
 * for good. The cancel now gives each its reaper deadline back before its commit, as a resume does:
 * the reaper re-sends what a dead cancel left, and the worker ends it CANCELLED for its job's sake.
 */
describe("a cancel killed between its commit and its parked runs' endings", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const runsOf = async (jobId: string) => (await f.runs()).filter((r) => r.jobId === jobId);

  /** A one-off due in a minute whose job is paused and whose run its worker parked: no message left, no reaper deadline. */
  async function parkedOneOff() {
    const runAt = new Date(Date.now() + MINUTE);
    const { job } = await createJob(
      f.engine,
      testJob({ tenantId: TENANT, schedule: { runAt: runAt.toISOString() } }),
    );
    const [claimed] = await runsOf(job.jobId);
    if (!claimed) throw new Error("not claimed at create");
    await pauseJob(f.engine, TENANT, job.jobId);
    await processRun(
      { ...f.workerDeps("w"), engine: { ...f.engine, clock: offsetClock(MINUTE) } },
      deliveryOfRun(f.engine, claimed),
    );
    return { job, runAt };
  }

  for (const action of ["cancel", "delete"] as const)
    it(`${action}: the reaper re-sends the parked run it left QUEUED, and its worker ends it CANCELLED`, async () => {
      const { job, runAt } = await parkedOneOff();
      expect((await runsOf(job.jobId))[0]?.reason).toBe("waiting: job paused");

      const cancelAt = runAt.getTime() + 60 * MINUTE;
      const killing = killedAfterCancelCommit(engineAt(f.engine, cancelAt));
      try {
        const request =
          action === "cancel"
            ? cancelJob(killing.engine, TENANT, job.jobId)
            : deleteJob(killing.engine, TENANT, job.jobId);
        await expect(request).rejects.toBeInstanceOf(Killed);
      } finally {
        killing.destroy();
      }
      expect((await getJob(f.engine, job.jobId))?.status).toBe("CANCELLED");
      expect((await runsOf(job.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);

      // Nobody repeats it. The reaper, past the run's deadline, re-sends it.
      const reapAt = cancelAt + f.engine.settings.leaseMs + MINUTE;
      const { resent } = await reap(engineAt(f.engine, reapAt));
      expect(resent).toBe(1);
      const [left] = await runsOf(job.jobId);
      if (!left) throw new Error("run gone");
      await processRun(
        { ...f.workerDeps("w"), engine: engineAt(f.engine, reapAt) },
        deliveryOfRun(f.engine, left),
      );
      expect((await runsOf(job.jobId)).map((r) => r.status)).toEqual(["CANCELLED"]);
    }, 30_000);

  it("cancel of an after job: the upstream's next fan-out takes out the dependent it left listed", async () => {
    const { job: upstream } = await createJob(
      f.engine,
      testJob({ tenantId: TENANT, schedule: { runAt: new Date().toISOString() } }),
    );
    const { job: dependent } = await createJob(
      f.engine,
      testJob({
        tenantId: TENANT,
        schedule: { after: { jobs: [upstream.jobId], on: "completion" } },
      }),
    );
    const killing = killedAfterCancelCommit(f.engine);
    try {
      await expect(cancelJob(killing.engine, TENANT, dependent.jobId)).rejects.toBeInstanceOf(
        Killed,
      );
    } finally {
      killing.destroy();
    }
    expect((await getJob(f.engine, dependent.jobId))?.status).toBe("CANCELLED");
    // Killed before its unlink: the upstream still lists it (its fan-out passes over it, and it
    // takes one of the upstream's 1,000 places) until a repeat of the cancel.
    expect((await getJob(f.engine, upstream.jobId))?.dependents).toContain(dependent.jobId);

    // Nobody repeats it. The upstream's run ends, and its fan-out meets the cancelled dependent.
    const received = await f.nextDelivery(f.engine.queues.normal, upstream.jobId);
    expect(await f.process(f.workerDeps("w"), received)).toBe("ack");
    expect((await getJob(f.engine, upstream.jobId))?.dependents).not.toContain(dependent.jobId);
    expect(await runsOf(dependent.jobId)).toEqual([]);
  }, 30_000);

  it("a cancel refused after it gave the parked run its deadline back: the reaper's re-send is parked again while the job is paused, and runs nothing", async () => {
    const { job, runAt } = await parkedOneOff();
    const cancelAt = runAt.getTime() + 60 * MINUTE;
    const refusing = refusingCancelCommit(engineAt(f.engine, cancelAt));
    try {
      await expect(cancelJob(refusing.engine, TENANT, job.jobId)).rejects.toBeInstanceOf(Killed);
    } finally {
      refusing.destroy();
    }
    expect((await getJob(f.engine, job.jobId))?.status).toBe("PAUSED");
    const [rearmed] = await runsOf(job.jobId);
    if (!rearmed) throw new Error("run gone");
    expect((await getRunItem(f.engine, runKeyOf(rearmed)))?.inflightSk).toBeDefined();

    const reapAt = cancelAt + f.engine.settings.leaseMs + MINUTE;
    expect((await reap(engineAt(f.engine, reapAt))).resent).toBe(1);
    await processRun(
      { ...f.workerDeps("w"), engine: engineAt(f.engine, reapAt) },
      deliveryOfRun(f.engine, rearmed),
    );
    const [parked] = await runsOf(job.jobId);
    expect(parked).toMatchObject({ status: "QUEUED", reason: "waiting: job paused" });
    expect((await getJob(f.engine, job.jobId))?.parkedRuns).toHaveProperty(rearmed.runId);
    // Listed again: no deadline, so no re-send a lease later either.
    expect((await getRunItem(f.engine, runKeyOf(rearmed)))?.inflightSk).toBeUndefined();
    expect((await reap(engineAt(f.engine, reapAt + 2 * f.engine.settings.leaseMs))).resent).toBe(0);
  }, 30_000);
});
