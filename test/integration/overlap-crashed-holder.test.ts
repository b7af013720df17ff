import { describe, expect, it } from "vitest";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import { recordAdmission } from "../../shared/storage/admission.js";
import { getJob, getRun } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { createEngineFixture, testJob } from "../support/engine-fixture.js";

/**
 * A listed run whose entry lapsed counts as under way to overlap only while it reads RUNNING
 * under a live lease of its own: one whose worker died (its own lease lapsed too) blocks its job
 * for one lease at most, and the next run under skip runs.
 */
const LEASE_MS = 3000;

describe("a job whose listed run's worker died, its entry and its own lease lapsed", () => {
  it("runs its next run under overlap skip rather than skip it", async ({ onTestFinished }) => {
    const f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
    onTestFinished(() => f.destroy());
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { every: "PT1H", startAt: new Date(Date.now() + 3_600_000).toISOString() },
      }),
    );
    expect(job.policies.overlap).toBe("skip");
    const crashed = await triggerJob(f.engine, job.tenantId, job.jobId);
    const startedAt = new Date(Date.now() - 60_000);
    const start = await startRun(f.engine, crashed, "worker-gone", startedAt);
    if (start.kind !== "started") throw new Error(`not started: ${start.kind}`);
    const read = await getJob(f.engine, job.jobId);
    if (read === null) throw new Error("job gone");
    await recordAdmission(
      f.engine,
      read,
      {
        kind: "start",
        runId: start.run.runId,
        leaseUntil: new Date(startedAt.getTime() + LEASE_MS),
      },
      { dropped: [] },
    );
    const next = await triggerJob(f.engine, job.tenantId, job.jobId);
    const delivery = await f.nextDeliveryOfRun(next);
    expect(await f.process(f.workerDeps("worker-b"), delivery)).toBe("ack");
    expect(await getRun(f.engine, next)).toMatchObject({ status: "SUCCEEDED" });
  }, 30_000);
});
