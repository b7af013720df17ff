import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJobs } from "../../shared/jobs/create-batch.js";
import { createJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import { writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import {
  createQuotaFixture,
  type EngineFixture,
  engineAt,
  farJob,
} from "../support/engine-fixture.js";
import { byCommand, countingEngine } from "../support/request-count.js";

/**
 * docs/api.md "Quotas", Precision: a tenant at its limit that keeps sending creates makes each
 * refusal cost a few requests, not a recount of its jobs (the tenant index and every job item).
 */
describe("a storm of creates refused at the limit", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createQuotaFixture();
  });
  afterAll(() => f.destroy());

  it("recounts the tenant's jobs once, however many creates and batches it refuses", async () => {
    const tenant = "storm";
    const jobs = 300;
    await writeQuotaOverride(f.engine, tenant, { activeJobs: jobs }, new Date());
    for (let made = 0; made < jobs; made += 25) {
      const outcomes = await createJobs(
        f.engine,
        tenant,
        Array.from({ length: 25 }, () => ({
          input: farJob(tenant),
        })),
      );
      expect(outcomes.filter((o) => "error" in o)).toEqual([]);
    }

    // Past the window of the recount the setup's first create made: the storm's first refusal may recount.
    const counting = countingEngine(engineAt(f.engine, Date.now() + 60_000));
    try {
      const creates = 40;
      const batches = 4;
      const refused = await Promise.all([
        ...Array.from({ length: creates }, () =>
          createJob(counting.engine, farJob(tenant)).catch((error: unknown) => error),
        ),
        ...Array.from({ length: batches }, async () =>
          (
            await createJobs(
              counting.engine,
              tenant,
              Array.from({ length: 25 }, () => ({
                input: farJob(tenant),
              })),
            )
          ).map((o) => ("error" in o ? o.error : o)),
        ),
      ]);
      for (const outcome of refused.flat()) {
        expect(outcome).toBeInstanceOf(QuotaExceededError);
        expect(outcome).toMatchObject({ context: { quota: "activeJobs" } });
      }
      const itemsRead = counting.sent.reduce((sum, s) => sum + s.itemsAsked, 0);
      const indexQueries = counting.sent.filter(
        (s) => s.command === "QueryCommand" && !s.touchesQuota,
      ).length;
      console.info(
        `${creates} creates and ${batches} batches of 25 refused at ${jobs} jobs: ${counting.sent.length} DynamoDB requests ${JSON.stringify(byCommand(counting.sent))}, ${itemsRead} job items read, ${indexQueries} index queries`,
      );
      // One recount: the index page by page (3 pages of 100) and each job once.
      expect(itemsRead).toBeLessThanOrEqual(jobs);
      expect(indexQueries).toBeLessThanOrEqual(Math.ceil(jobs / 100) + 1);
      // And a few requests each beside it.
      expect(counting.sent.length).toBeLessThanOrEqual(
        Math.ceil(jobs / 100) * 2 + 2 + 5 * (creates + batches),
      );
      // Past the window again: the next refusal recounts once more.
      counting.sent.splice(0);
      const later = engineAt(counting.engine, Date.now() + 70_000);
      expect(
        await createJob(later, farJob(tenant)).catch((error: unknown) => error),
      ).toBeInstanceOf(QuotaExceededError);
      expect(counting.sent.reduce((sum, s) => sum + s.itemsAsked, 0)).toBe(jobs);
    } finally {
      counting.destroy();
    }
  }, 120_000);
});
