import { describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { JobError } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, editJob, triggerJob } from "../../shared/jobs/index.js";
import { createEngineFixture, deliveryOfRun, testJob } from "../support/engine-fixture.js";
import { refusedEditOnto } from "../support/triggered-instant.js";

/**
 * A one-off moved to the instant of a triggered run that succeeded ran there as that run's next
 * attempt: the trigger's attempt was counted against the one-off's own `maxAttempts`, and under
 * `maxAttempts: 2` its first failure was its last ('expected 'DEAD' to be 'FAILED''). The move
 * is refused (400 naming `schedule.runAt`); moved elsewhere, the one-off's first attempt is its
 * attempt 1, and its first retryable failure is retried.
 */
describe("a one-off moved to the instant of a succeeded triggered run, maxAttempts 2", () => {
  it("is refused; its own occurrence retries its first retryable failure", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const base = testJob({ schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() } });
    const { job } = await createJob(f.engine, {
      ...base,
      policies: {
        ...base.policies,
        retry: { maxAttempts: 2, initialDelayMs: 1_000, maxDelayMs: 1_000 },
      },
    });
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    await processRun(f.workerDeps("w1"), deliveryOfRun(f.engine, triggered));
    expect((await f.runs()).find((r) => r.runId === triggered.runId)?.status).toBe("SUCCEEDED");

    await refusedEditOnto(f.engine, job, triggered);

    const off = new Date(Date.parse(triggered.scheduledFor) + 1).toISOString();
    await editJob(f.engine, job.tenantId, job.jobId, job.version, { schedule: { runAt: off } });
    await dispatchShard(f.engine, 0, "pass-after-edit");
    const own = (await f.runs()).find((r) => r.jobId === job.jobId && !r.triggered);
    if (own === undefined) throw new Error("the moved one-off's run is not queued");
    expect(own.attempt).toBe(1);
    const fails = async () => {
      throw new JobError("the receiver is down", { retryable: true });
    };
    await processRun(f.workerDeps("w2", { noop: fails }), deliveryOfRun(f.engine, own));
    // Its first attempt failed: FAILED with a retry queued, not DEAD.
    expect((await f.runs()).find((r) => r.runId === own.runId)?.status).toBe("FAILED");
  }, 60_000);
});
