import { describe, expect, it } from "vitest";
import { JobError } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, replayDeadLetter, triggerJob } from "../../shared/jobs/index.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, deliveryOfRun, testJob } from "../support/engine-fixture.js";

/**
 * One deploy: a one-off's triggered run starts while the job is ACTIVE; the one-off's own run
 * completes the job meanwhile (kept 30 days from then); the triggered run dies 10 minutes later
 * (its timeout 15 minutes), listed 30 days from its death. Its death pushes the job's expiry to
 * its dead letter's, though the run's start read the job ACTIVE, so its replay works while listed.
 */
const DAY_MS = 24 * 3_600_000;
const MINUTE = 60_000;

describe("a one-off's triggered run that dies after the one-off's own run completed the job", () => {
  it("leaves its dead letter replayable while it is listed", async ({ onTestFinished }) => {
    const state = { offsetMs: 0 };
    const clock = () => new Date(Date.now() + state.offsetMs);
    const f = await createEngineFixture({ clock });
    onTestFinished(() => f.destroy());
    const base = testJob({
      schedule: { runAt: new Date(clock().getTime() + 2 * MINUTE).toISOString() },
      timeoutSeconds: 900,
    });
    const { job } = await createJob(f.engine, {
      ...base,
      policies: { ...base.policies, retry: { ...base.policies.retry, maxAttempts: 1 } },
    });
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    const own = (await f.runs()).find((r) => r.jobId === job.jobId && r.runId !== triggered.runId);
    if (own === undefined) throw new Error("the one-off's own run is not queued");

    let inner = false;
    const handler = async () => {
      if (inner) return { ok: true };
      inner = true;
      // Meanwhile the one-off's own run, due now, runs and completes the job.
      state.offsetMs += 2 * MINUTE;
      await processRun(f.workerDeps("w-own"), deliveryOfRun(f.engine, own));
      expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
      state.offsetMs += 10 * MINUTE;
      throw new JobError("fails for good", { retryable: false });
    };
    await processRun(f.workerDeps("w", { noop: handler }), deliveryOfRun(f.engine, triggered));
    const dead = (await f.runs()).find((r) => r.runId === triggered.runId);
    expect(dead?.status).toBe("DEAD");

    // 30 days less 5 minutes after its death: still listed, and its replay queues a run.
    state.offsetMs += 30 * DAY_MS - 5 * MINUTE;
    await sweepExpired(f.engine, clock());
    expect((await f.runs()).find((r) => r.runId === triggered.runId)?.status).toBe("DEAD");
    const replayed = await replayDeadLetter(f.engine, job.tenantId, triggered.runId);
    expect(replayed.run.status).toBe("QUEUED");
  }, 120_000);
});
