import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJob, pauseJob, resumeJob, triggerJobWithKey } from "../../shared/jobs/index.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  farJob,
} from "../support/engine-fixture.js";

/**
 * Adversarial review h94 of sendRunIfUnsent: a keyed trigger's run parked by its worker while the
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
