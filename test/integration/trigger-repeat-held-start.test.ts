import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobHandler } from "../../shared/execution/job-contract.js";
import { createJob, triggerJobWithKey } from "../../shared/jobs/index.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import { yearlyCronHalfAYearAway } from "../support/time-of-day.js";
import { waitFor } from "../support/wait.js";

/**
 * Adversarial review h94 of sendRunIfUnsent (a keyed trigger's repeat sends the run's message
 * while it is QUEUED with fence 0). A run's first delivery holds its start unwritten (takeRun):
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
