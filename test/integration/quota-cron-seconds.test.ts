import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { createJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";

/** Every second of minute 0 of each hour: 60 runs in that minute, every hour. */
const everySecondOfMinuteZero: ScheduleSpec = { cron: "* 0 * * * *", timezone: "UTC" };

describe("runsPerMinute counts a cron's seconds whatever the time of the create", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0 } });
  });
  afterAll(() => f.destroy());

  it("counts 60 for a job created in the last seconds of its minute, and refuses a second one past a quota of 60", async () => {
    const tenant = "cron-seconds-late";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 60 }, new Date());
    // Two seconds before the end of a matching minute: only 58 and 59 are left in it.
    const late = engineAt(f.engine, Date.parse("2031-03-04T05:00:58.500Z"));
    const create = () =>
      createJob(late, testJob({ tenantId: tenant, schedule: everySecondOfMinuteZero }));
    await create();
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 60 });
    // The recount this refusal rests on measures at the same moment, and must count 60 too.
    await expect(create()).rejects.toBeInstanceOf(QuotaExceededError);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 60 });
  });
});
