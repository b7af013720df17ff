import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { JobNotFoundError } from "../../shared/errors.js";
import { cancelJob, createJob, triggerJob } from "../../shared/jobs/index.js";
import { getTenantJob, listJobs } from "../../shared/jobs/queries.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

const TENANT = "tenant-expired";
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/**
 * A job past its retention has expired: DynamoDB's TTL deletes its item some time later (within
 * days), and until then the item is still there to read. Every reader takes it as gone, as it
 * will be: what a request gets must not depend on when TTL comes round.
 */
describe("a job past its retention that TTL has not deleted yet", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** The engine as it is `ms` from now. */
  const engineAt = (ms: number) => ({ ...f.engine, clock: offsetClock(ms) });

  /** A one-off whose only occurrence was past its grace under `skip`: completed as it is created. */
  async function completedJob() {
    const { job } = await createJob(
      f.engine,
      testJob({
        tenantId: TENANT,
        schedule: { runAt: new Date(Date.now() - HOUR).toISOString() },
        policies: { ...testJob().policies, misfire: "skip" },
      }),
    );
    expect(job.status).toBe("COMPLETED");
    return job;
  }

  it("is not found, and a trigger does not bring it back", async () => {
    const job = await completedJob();
    const retention =
      Math.max(f.engine.settings.retentionDays, f.engine.settings.deadLetterRetentionDays) * DAY;
    // Inside its retention it is there to read.
    expect((await getTenantJob(engineAt(retention - HOUR), TENANT, job.jobId)).status).toBe(
      "COMPLETED",
    );

    const expired = engineAt(retention + HOUR);
    await expect(getTenantJob(expired, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    await expect(triggerJob(expired, TENANT, job.jobId)).rejects.toBeInstanceOf(JobNotFoundError);
    const runs = (await f.runs()).filter((run) => run.jobId === job.jobId);
    // Its one run: the occurrence recorded SKIPPED at the create; no triggered one.
    expect(runs.map((run) => run.status)).toEqual(["SKIPPED"]);
  });

  it("is not listed among its tenant's jobs", async () => {
    const { job } = await createJob(f.engine, testJob({ tenantId: TENANT, name: "to cancel" }));
    await cancelJob(f.engine, TENANT, job.jobId);
    const listed = async (engine: ReturnType<typeof engineAt>) =>
      (await listJobs(engine, TENANT, { limit: 50 })).items.map((j) => j.jobId);
    expect(await listed(engineAt(f.engine.settings.retentionDays * DAY - HOUR))).toContain(
      job.jobId,
    );
    expect(await listed(engineAt(f.engine.settings.retentionDays * DAY + HOUR))).not.toContain(
      job.jobId,
    );
  });
});
