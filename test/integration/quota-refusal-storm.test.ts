import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJobs } from "../../shared/jobs/create-batch.js";
import { cancelJob, createJob, editJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import {
  createQuotaFixture,
  type EngineFixture,
  engineAt,
  farJob,
  testJob,
} from "../support/engine-fixture.js";
import { byCommand, countingEngine } from "../support/request-count.js";

/**
 * docs/api.md "Quotas", Precision: a tenant at its limit that keeps sending creates makes each
 * refusal cost a few requests, not a recount of its jobs (the tenant index and every job item);
 * one that keeps sending an edit of a job with jobs after it, not a read of those jobs.
 */
describe("a storm of creates and edits refused at the limit", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createQuotaFixture();
  });
  afterAll(() => f.destroy());

  /** An hourly job of `tenant` and `count` jobs after it, created 25 at a time. */
  async function hourlyJobWithDependents(tenant: string, count: number) {
    const head = (
      await createJob(
        f.engine,
        testJob({ tenantId: tenant, schedule: { cron: "0 * * * *", timezone: "UTC" } }),
      )
    ).job;
    const below: string[] = [];
    for (let made = 0; made < count; made += 25) {
      const outcomes = await createJobs(
        f.engine,
        tenant,
        Array.from({ length: 25 }, () => ({
          input: testJob({
            tenantId: tenant,
            schedule: { after: { jobs: [head.jobId], on: "completion" } },
          }),
        })),
      );
      expect(outcomes.filter((o) => "error" in o)).toEqual([]);
      for (const o of outcomes) if ("job" in o) below.push(o.job.jobId);
    }
    return { head, below };
  }

  it("refuses edits of a job with many jobs after it without reading them each time", async () => {
    const tenant = "edit-storm";
    const dependents = 100;
    // The job and its dependents, each counting the job's hourly peak: 1 + 100 runs a minute.
    const limit = dependents + 1;
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: limit }, new Date());
    const { head } = await hourlyJobWithDependents(tenant, dependents);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ runsPerMinute: limit });
    const { version } = head;

    // Every 30 s: 2 at its peak, one more for the job and for each job after it.
    const edit = { schedule: { every: "PT30S" } };
    const counting = countingEngine(engineAt(f.engine, Date.now() + 60_000));
    try {
      const edits = 20;
      const refused = await Promise.all(
        Array.from({ length: edits }, () =>
          editJob(counting.engine, tenant, head.jobId, version, edit).catch(
            (error: unknown) => error,
          ),
        ),
      );
      for (const outcome of refused) {
        expect(outcome).toBeInstanceOf(QuotaExceededError);
        expect(outcome).toMatchObject({
          context: { quota: "runsPerMinute", limit, field: "schedule" },
          // What it adds to its own measure: the jobs after it were not read.
          message: `this edit adds at least 1 runs per minute at its peak, before those of the jobs after it, to the ${limit} of this tenant's jobs; its runsPerMinute quota is ${limit}`,
        });
      }
      const itemsRead = counting.sent.reduce((sum, s) => sum + s.itemsAsked, 0);
      console.info(
        `${edits} edits refused over a job with ${dependents} after it: ${counting.sent.length} DynamoDB requests ${JSON.stringify(byCommand(counting.sent))}, ${itemsRead} job items read`,
      );
      // At most one recount (the tenant's jobs, each once); none reads the jobs below the edited one.
      expect(itemsRead).toBeLessThanOrEqual(dependents + 1);
      expect(counting.sent.length).toBeLessThanOrEqual(Math.ceil(limit / 100) * 2 + 2 + 6 * edits);
    } finally {
      counting.destroy();
    }

    // Room for it: the edit is accepted and reserves what it adds, the runs below it included.
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 2 * limit }, new Date());
    await editJob(f.engine, tenant, head.jobId, version, edit);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ runsPerMinute: 2 * limit });
  }, 120_000);

  it("reads the jobs below an edited job once for a storm of edits its own change fits, and at once after a give-back", async () => {
    const tenant = "edit-storm-room";
    const dependents = 100;
    // Room for the edit's own change (1), none for what it adds through the jobs after it (101).
    const limit = dependents + 1 + 90;
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: limit }, new Date());
    const { head, below } = await hourlyJobWithDependents(tenant, dependents);
    const { version } = head;
    const edit = { schedule: { every: "PT30S" } };
    const refusal = {
      context: { quota: "runsPerMinute", limit, field: "schedule" },
      message: `this edit adds ${dependents + 1} runs per minute at its peak to the ${dependents + 1} of this tenant's jobs; its runsPerMinute quota is ${limit}`,
    };
    const counting = countingEngine(engineAt(f.engine, Date.now() + 60_000));
    const itemsRead = () => counting.sent.reduce((sum, s) => sum + s.itemsAsked, 0);
    try {
      const refused = await Promise.all(
        Array.from({ length: 20 }, () =>
          editJob(counting.engine, tenant, head.jobId, version, edit).catch(
            (error: unknown) => error,
          ),
        ),
      );
      for (const outcome of refused) {
        expect(outcome).toBeInstanceOf(QuotaExceededError);
        expect(outcome).toMatchObject(refusal);
      }
      console.info(`20 edits at once refused: ${itemsRead()} job items read`);
      // The jobs below read once, shared, and one recount.
      expect(itemsRead()).toBeLessThanOrEqual(2 * (dependents + 1));
      counting.sent.splice(0);
      for (let i = 0; i < 10; i++) {
        const outcome = await editJob(counting.engine, tenant, head.jobId, version, edit).catch(
          (error: unknown) => error,
        );
        expect(outcome).toMatchObject(refusal);
      }
      // Refused from what this process read of them moments ago.
      expect(itemsRead()).toBe(0);

      // Jobs below cancelled, each giving its share back: the edit fits (2 x 91 of 191, where 2 x 96
      // would not) and is accepted at once.
      const cancelled = 10;
      for (const id of below.slice(0, cancelled)) await cancelJob(f.engine, tenant, id);
      const left = dependents - cancelled;
      expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ runsPerMinute: left + 1 });
      counting.sent.splice(0);
      await editJob(counting.engine, tenant, head.jobId, version, edit);
      // What it adds, the jobs below read again: the job's and each one's left.
      expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({
        runsPerMinute: 2 * (left + 1),
      });
      expect(itemsRead()).toBeGreaterThanOrEqual(left);
    } finally {
      counting.destroy();
    }
  }, 120_000);

  it("recounts the tenant's jobs once, however many creates and batches it refuses", async () => {
    const tenant = "storm";
    // More than one page of the tenant index (100 a page), so a recount is the index page by page
    // and the job items: a storm that recounted at each refusal would read 44 x 150 of them.
    const jobs = 150;
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
      // One recount: the index page by page (2 pages of 100) and each job once.
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
