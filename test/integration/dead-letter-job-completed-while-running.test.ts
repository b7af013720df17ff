import { describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import type { Engine } from "../../shared/engine.js";
import { JobError } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, replayDeadLetter } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { getJob } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  deliveryOfRun,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { storedJobExpiresAt } from "../support/outwaiting.js";

/**
 * A run's death pushes its COMPLETED job's expiry out to its dead letter's
 * (keepCompletedJobForDeadLetter), decided by the write's condition, not by the job the worker
 * read at the run's start (`recordResult`'s `job`). A run that started while its job was ACTIVE,
 * whose job its end then completed (the dispatcher's claim of the last occurrence, under a 1-day
 * deploy), and that dies under a deploy that raised deadLetterRetentionDays to 30, is listed 30
 * days; its job is kept as long, so the replay docs/deploy.md promises while listed works.
 */
const DAY_MS = 24 * 3_600_000;
const HOUR_MS = 3_600_000;

const deadLettersRaised = (engine: Engine): Engine => ({
  ...engine,
  settings: { ...engine.settings, deadLetterRetentionDays: 30 },
});

describe("a run that starts before its job's end completes it and dies after a deploy raised deadLetterRetentionDays", () => {
  it("leaves its dead letter replayable while it is listed", async ({ onTestFinished }) => {
    const state = { offsetMs: 0 };
    const clock = () => new Date(Date.now() + state.offsetMs);
    const f = await createEngineFixture({
      settings: { retentionDays: 1, deadLetterRetentionDays: 1, shardCount: 1, maxShardCount: 1 },
      clock,
    });
    onTestFinished(() => f.destroy());
    const startAt = new Date(Math.ceil((clock().getTime() + 1000) / 1000) * 1000);
    const base = testJob({
      schedule: { every: "PT1H", startAt: startAt.toISOString() },
      endAt: new Date(startAt.getTime() + 1.5 * HOUR_MS).toISOString(),
    });
    const { job } = await createJob(f.engine, {
      ...base,
      policies: { ...base.policies, retry: { ...base.policies.retry, maxAttempts: 1 } },
    });
    state.offsetMs += 1000;
    const shard = shardOf(job.jobId, 1);
    await dispatchShard(f.engine, shard, "first-pass");
    expect((await getJob(f.engine, job.jobId))?.status).toBe("ACTIVE");
    const [first] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    if (first === undefined) throw new Error("no run queued");

    const next = deadLettersRaised(f.engine);
    // The raised deploy's worker runs it; while it runs, the 1-day deploy's pass an hour on claims
    // the last occurrence before endAt and completes the job; then the run fails for good.
    const handler = async () => {
      await dispatchShard(engineAt(f.engine, startAt.getTime() + HOUR_MS), shard, "completing");
      expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
      throw new JobError("fails for good", { retryable: false });
    };
    await processRun(
      { ...f.workerDeps("w", { noop: handler }), engine: next },
      deliveryOfRun(next, first),
    );
    const dead = (await f.runs()).find((r) => r.runId === first.runId);
    expect(dead?.status).toBe("DEAD");
    // The 1-day claim that completed it kept it about a day; its death pushed it out to its dead
    // letter's 30, though the run's start had read the job ACTIVE.
    const jobExpiry = Number(await storedJobExpiresAt(f.engine, job.jobId));
    expect(jobExpiry * 1000 - clock().getTime()).toBeGreaterThan(29 * DAY_MS);

    // Three days on, well inside the dead letter's 30: listed, and its replay queues a run.
    state.offsetMs += 3 * DAY_MS;
    await sweepExpired(next, clock());
    expect((await f.runs()).find((r) => r.runId === first.runId)?.status).toBe("DEAD");
    const replayed = await replayDeadLetter(next, job.tenantId, first.runId);
    expect(replayed.run.status).toBe("QUEUED");
  }, 120_000);
});
