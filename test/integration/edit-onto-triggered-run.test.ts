import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, pauseJob, triggerJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import {
  createEngineFixture,
  dailyAwayFrom,
  deliveryOfRun,
  type EngineFixture,
  farJob,
  testJob,
} from "../support/engine-fixture.js";
import { refusedEditOnto, upstreamWithDependent } from "../support/triggered-instant.js";

/**
 * An edit that gives a job a `runAt` at the time of a run that is no occurrence's (a triggered
 * run, a dependent's run queued after its upstream), whatever that run's status, is a 400 naming
 * `schedule.runAt` and that run, nothing written: that time is the run's own key (its
 * `webhook-id`), and the one-off's occurrence filed there was delivered as its next attempt, or,
 * the run still under way, taken for it and never run.
 */
describe("an edit whose runAt is the time of a run that is no occurrence's", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  const runsAt = async (run: Run) =>
    (await f.runs())
      .filter((r) => r.jobId === run.jobId && r.scheduledFor === run.scheduledFor)
      .map((r) => [r.attempt, r.status]);

  /** The edit to `run`'s time, refused naming schedule.runAt and `run`; the job as it was. */
  async function expectRefused(job: Job, run: Run, says: string): Promise<void> {
    const issue = await refusedEditOnto(f.engine, job, run);
    expect(issue.message).toContain(says);
    expect(issue.message).toContain("give another runAt");
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([after.version, after.status, after.schedule, after.nextRunAt]).toEqual([
      job.version,
      job.status,
      job.schedule,
      job.nextRunAt,
    ]);
  }

  it("a triggered run still queued: refused, and the triggered run runs as itself", async () => {
    const { job } = await createJob(f.engine, farJob("tenant-a"));
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);

    await expectRefused(job, triggered, `a triggered run (${triggered.runId}, queued)`);
    expect(await runsAt(triggered)).toEqual([[1, "QUEUED"]]);
    await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, triggered));
    expect(await runsAt(triggered)).toEqual([[1, "SUCCEEDED"]]);
  });

  it("a paused one-off, the triggered run succeeded: refused while paused too", async () => {
    const { job: created } = await createJob(f.engine, farJob("tenant-a"));
    const triggered = await triggerJob(f.engine, created.tenantId, created.jobId);
    await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, triggered));
    const paused = await pauseJob(f.engine, created.tenantId, created.jobId);
    expect(paused.status).toBe("PAUSED");

    await expectRefused(paused, triggered, `a triggered run (${triggered.runId}, succeeded)`);
    expect(await runsAt(triggered)).toEqual([[1, "SUCCEEDED"]]);
  });

  it("a recurring job made a one-off at its triggered run's time: refused", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: dailyAwayFrom(Date.now()).schedule }),
    );
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, triggered));

    await expectRefused(job, triggered, `a triggered run (${triggered.runId}, succeeded)`);
    expect(await runsAt(triggered)).toEqual([[1, "SUCCEEDED"]]);
  });

  it("a dependent made a one-off at the time of its run after its upstream: refused", async () => {
    const { upstream, dependent } = await upstreamWithDependent(f.engine);
    await dispatchShard(f.engine, 0, "pass-upstream");
    const upstreamRun = (await f.runs()).find((r) => r.jobId === upstream.jobId);
    if (upstreamRun === undefined) throw new Error("the upstream's run is not queued");
    await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, upstreamRun));
    const depRun = (await f.runs()).find((r) => r.jobId === dependent.jobId);
    if (depRun === undefined) throw new Error("the dependent's run is not queued");
    expect(depRun.trigger?.runId).toBe(upstreamRun.runId);

    const current = await getTenantJob(f.engine, dependent.tenantId, dependent.jobId);
    await expectRefused(
      current,
      depRun,
      `the run queued after ${upstreamRun.runId} (${depRun.runId}, queued)`,
    );
    expect(await runsAt(depRun)).toEqual([[1, "QUEUED"]]);
  });
});
