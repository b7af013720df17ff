import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobHandler } from "../../shared/execution/job-contract.js";
import {
  createJob,
  pauseJob,
  replayDeadLetter,
  resumeJob,
  triggerJobWithKey,
} from "../../shared/jobs/index.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  farJob,
  jobWithDeadRun,
  testJob,
} from "../support/engine-fixture.js";
import { withLostAnswers } from "../support/faults.js";
import { yearlyCronHalfAYearAway } from "../support/time-of-day.js";
import { waitFor } from "../support/wait.js";

const TENANT = "tenant-a";

/** Messages in the work queues, visible, delayed or taken. */
async function messagesQueued(f: EngineFixture): Promise<number> {
  const { high, normal, low } = f.engine.queues;
  const depths = await Promise.all([high, normal, low].map((url) => f.queueDepth(url)));
  return depths.reduce((sum, d) => sum + d.visible + d.delayed + d.inFlight, 0);
}

/**
 * A keyed trigger or replay whose write applied and whose request then died before its send is a
 * 5xx; its client sends it again with the key (docs/api.md, "Retrying requests") and is answered
 * the run. The repeat sends that run's message while it is QUEUED and unstarted: otherwise it waits
 * for the reaper, a lease past its due time, though a trigger or replay is one run now.
 */
describe("a keyed request whose write applied, sent again with its key after a 5xx", () => {
  it("a trigger, its answers lost: the repeat sends the run's message", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() } }),
    );
    const lossy = withLostAnswers(f.engine, {
      operation: "TransactWriteItems",
      times: Number.MAX_SAFE_INTEGER,
      match: (input) => JSON.stringify(input).includes("TRIGGER#"),
    });
    onTestFinished(() => lossy.destroy());
    await expect(triggerJobWithKey(lossy.engine, job.tenantId, job.jobId, "k-1")).rejects.toThrow();
    expect(lossy.injected.count).toBeGreaterThan(0);

    const repeat = await triggerJobWithKey(f.engine, job.tenantId, job.jobId, "k-1");
    expect([repeat.created, repeat.run.status]).toEqual([false, "QUEUED"]);
    expect(await messagesQueued(f)).toBe(1);
  }, 60_000);

  it("a replay, its answer lost and its read back throttled: the repeat sends the run's message", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const { dead } = await jobWithDeadRun(f, { schedule: { every: "PT1H" } });
    await f.purge();
    let readsFail = false;
    const lossy = withLostAnswers(f.engine, {
      operation: "TransactWriteItems",
      times: Number.MAX_SAFE_INTEGER,
      match: (input) => JSON.stringify(input).includes("replayedBy"),
      meanwhile: async () => {
        readsFail = true;
      },
    });
    onTestFinished(() => lossy.destroy());
    lossy.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (readsFail && context.commandName === "GetItemCommand")
          throw Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
            name: "ThrottlingException",
            $metadata: { httpStatusCode: 400 },
          });
        return next(args);
      },
      { step: "initialize", name: "failReadsBack" },
    );
    await expect(replayDeadLetter(lossy.engine, TENANT, dead.runId, "k-1")).rejects.toThrow();
    expect(lossy.injected.count).toBeGreaterThan(0);

    const repeat = await replayDeadLetter(f.engine, TENANT, dead.runId, "k-1");
    expect([repeat.earlier, repeat.run.status]).toEqual([true, "QUEUED"]);
    expect(await messagesQueued(f)).toBe(1);
  }, 60_000);
});

/**
 * A run's first delivery holds its start unwritten (takeRun):
 * the run runs while its item still reads QUEUED, fence 0, until its worker's first write (its
 * first heartbeat). A client that repeats its keyed trigger then (a retry after a timeout) has the
 * run taken for unsent and its message sent again, while it runs: one more message and worker
 * delivery, which (holding) does not run it again.
 */
describe("a keyed trigger repeated while its run runs with its start held unwritten", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it.each(["skip", "allow"] as const)("under %s, runs the run once", async (overlap) => {
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered = 0;
    const handlers: Record<string, JobHandler> = {
      holding: async () => {
        entered++;
        await held;
      },
    };
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "holding",
        schedule: { cron: yearlyCronHalfAYearAway(), timezone: "UTC" },
        policies: { ...testJob().policies, overlap, maxConcurrent: 2 },
      }),
    );
    const { run } = await triggerJobWithKey(f.engine, job.tenantId, job.jobId, "k");
    await f.purge();
    const first = f.process(f.workerDeps("w1", handlers), deliveryOfRun(f.engine, run));
    await waitFor("the run under way", () => entered === 1);
    const stored = (await f.runs()).find((r) => r.runId === run.runId);
    // Taken by a worker and running, yet QUEUED with fence 0: sendRunIfUnsent sends it again.
    expect([stored?.status, stored?.fence]).toEqual(["QUEUED", 0]);

    const repeat = await triggerJobWithKey(f.engine, job.tenantId, job.jobId, "k");
    expect(repeat.created).toBe(false);
    const sent = await f.receiveAll(f.engine.queues.normal);
    expect(sent.length).toBe(1);
    const second = Promise.all(sent.map((d) => f.process(f.workerDeps("w2", handlers), d)));
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const enteredWhileHeld = entered;
    release();
    await Promise.all([first, second]);
    // Holds: the second delivery finds the run admitted under way and lets it be.
    expect(enteredWhileHeld).toBe(1);
  });
});

/**
 * A keyed trigger's run parked by its worker while the
 * job is paused (QUEUED, listed in parkedRuns) is not taken for unsent by the key's repeats, which
 * send nothing: a long pause costs nothing still, and the resume sends it once (holding).
 */
describe("a keyed trigger repeated while its run is parked", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("sends no message; the resume sends it once", async () => {
    const { job } = await createJob(f.engine, farJob("tenant-a"));
    const { run } = await triggerJobWithKey(f.engine, job.tenantId, job.jobId, "k");
    await f.purge();
    await pauseJob(f.engine, job.tenantId, job.jobId);
    expect(await f.process(f.workerDeps("w"), deliveryOfRun(f.engine, run))).toBe("ack");
    const parked = (await f.runs()).find((r) => r.runId === run.runId);
    expect(parked?.status).toBe("QUEUED");
    expect(
      Object.keys((await f.jobs()).find((j) => j.jobId === job.jobId)?.parkedRuns ?? {}),
    ).toEqual([run.runId]);

    for (let i = 0; i < 5; i++) {
      const repeat = await triggerJobWithKey(f.engine, job.tenantId, job.jobId, "k");
      expect(repeat.created).toBe(false);
    }
    expect(await f.receiveAll(f.engine.queues.normal)).toEqual([]);

    await resumeJob(f.engine, job.tenantId, job.jobId);
    const sent = await f.receiveAll(f.engine.queues.normal);
    expect(sent.map((d) => d.message.scheduledFor)).toEqual([run.scheduledFor]);
  });
});
