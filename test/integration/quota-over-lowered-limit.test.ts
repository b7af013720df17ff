import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

const later = () => new Date(Date.now() + 3_600_000).toISOString();
const hourly: ScheduleSpec = { cron: "0 * * * *", timezone: "UTC" };
const everyTwoSeconds = (): ScheduleSpec => ({ every: "PT2S", startAt: later() });
const far = (): ScheduleSpec => ({ runAt: later() });

/**
 * A tenant whose limit is lowered below what it uses keeps what it has; a request that adds
 * nothing to that quota is not refused for it (only the quota it adds to is checked).
 */
describe("a quota lowered below the tenant's usage refuses only what adds to it", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0 } });
  });
  afterAll(() => f.destroy());

  const create = async (tenantId: string, schedule: ScheduleSpec) =>
    (await createJob(f.engine, testJob({ tenantId, schedule }))).job;

  it("lets an edit of the schedule through while activeJobs is over its lowered limit (an edit adds no job)", async () => {
    const tenant = "active-jobs-lowered";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 5, runsPerMinute: 100 }, new Date());
    const job = await create(tenant, hourly);
    await create(tenant, hourly);
    await create(tenant, hourly);
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 2, runsPerMinute: 100 }, new Date());

    const edited = await editJob(f.engine, tenant, job.jobId, job.version, {
      schedule: everyTwoSeconds(),
    });
    expect(edited.version).toBe(job.version + 1);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({
      activeJobs: 3,
      runsPerMinute: 32,
    });
  });

  it("lets a one-off's create through while runsPerMinute is over its lowered limit (a one-off counts 0)", async () => {
    const tenant = "runs-per-minute-lowered";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 10, runsPerMinute: 100 }, new Date());
    await create(tenant, everyTwoSeconds());
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 10, runsPerMinute: 10 }, new Date());

    await create(tenant, far());
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({
      activeJobs: 2,
      runsPerMinute: 30,
    });
  });
});
