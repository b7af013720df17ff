import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { deleteJob } from "../../shared/jobs/index.js";
import {
  keepCompletedJobForDeadLetter,
  keepCompletedJobForWaitingRun,
} from "../../shared/storage/job-status.js";
import { getJob } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  type EngineFixture,
  jobWithDeadRun,
} from "../support/engine-fixture.js";
import { storedJobExpiresAt } from "../support/outwaiting.js";

/**
 * The two pushes of a COMPLETED job's expiry (a waiting run's, a dead letter's) never pull it in,
 * and never write an item for a job deleted since it was read.
 */
const DAY_MS = 24 * 3_600_000;
const withRetention = (engine: Engine, days: number): Engine => ({
  ...engine,
  settings: { ...engine.settings, retentionDays: days, deadLetterRetentionDays: days },
});

let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture();
});
afterAll(() => f.destroy());

describe("pushing a completed job's expiry", () => {
  it("never pulls it in: a deploy that lowered the retentions to 1 day", async () => {
    const { job, dead } = await jobWithDeadRun(f);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
    const before = await storedJobExpiresAt(f.engine, job.jobId);
    const lowered = withRetention(f.engine, 1);
    await keepCompletedJobForDeadLetter(lowered, job, dead, new Date());
    const late = new Date(Date.now() + 2 * DAY_MS);
    await keepCompletedJobForWaitingRun(lowered, dead, late);
    expect(await storedJobExpiresAt(f.engine, job.jobId)).toBe(before);
  });

  it("writes no item for a job deleted after the ending read it", async () => {
    const { job, dead } = await jobWithDeadRun(f);
    await deleteJob(f.engine, job.tenantId, job.jobId);
    expect(await storedJobExpiresAt(f.engine, job.jobId)).toBeUndefined();
    await keepCompletedJobForDeadLetter(f.engine, job, dead, new Date());
    await keepCompletedJobForWaitingRun(f.engine, dead, new Date(Date.now() + 2 * DAY_MS));
    expect((await f.jobs()).filter((j) => j.jobId === job.jobId)).toEqual([]);
  });
});
