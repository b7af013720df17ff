import { GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import type { Engine } from "../../shared/engine.js";
import { ConcurrentUpdateError } from "../../shared/errors.js";
import { cancelJob, createJob } from "../../shared/jobs/index.js";
import { newJobId } from "../../shared/keys.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import { setQuotaOverride } from "../../shared/quotas/overrides.js";
import { isCounted } from "../../shared/quotas/run-measure.js";
import { getJobs, tenantJobIds } from "../../shared/storage/job-queries.js";
import { giveBackUsage } from "../../shared/storage/quota-give-back.js";
import { decodeSeenUsage } from "../../shared/storage/seen-usage.js";
import {
  readQuotaUsage,
  reserveUsage,
  writeQuotaOverride,
  writeRecountedUsage,
} from "../../shared/storage/tenant-quotas.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

const HOURLY = { cron: "0 * * * *", timezone: "UTC" } as const;

/**
 * docs/architecture.md "Recount in parts": a recount's next part goes on from the cursor only
 * while the usage it would replace is unchanged since its first part. The tenant index is read
 * newest first, so a job created between parts sits on pages already read, and one cancelled
 * between parts on pages not yet read is not counted either: a create and a cancel that leave
 * the counters as they were must still start the recount afresh, or its count is under the
 * tenant's jobs and the tenant passes its quota.
 */
describe("a recount in parts raced by the tenant between its parts", () => {
  // Parts of 2 pages (200 jobs) over JOBS: each recount takes three parts, the last one short; the
  // parts are what the cases race, so the tenant need be no larger.
  const pages = 2;
  const JOBS = 500;
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0, quotaRecountPages: pages },
    });
  });
  afterAll(() => f.destroy());

  /** `count` hourly jobs created (ids by creation time) over the last `count` seconds. */
  async function seedTenant(tenant: string, count: number, now: Date) {
    return seedJobs(
      f,
      Array.from({ length: count }, (_, i) => ({
        jobId: newJobId(new Date(now.getTime() - (count - i) * 1_000)),
        tenantId: tenant,
        schedule: HOURLY,
        dueAt: new Date(now.getTime() + 3_600_000),
      })),
      now,
    );
  }

  const outcomeOf = (engine: Engine, tenant: string) =>
    createJob(engine, testJob({ tenantId: tenant, schedule: HOURLY })).then(
      () => "created",
      (error: unknown) =>
        error instanceof ConcurrentUpdateError
          ? "busy"
          : error instanceof QuotaExceededError
            ? "refused"
            : String(error),
    );

  /** The tenant's jobs not ended, read through the table's own items (every page). */
  async function activeJobsOf(tenant: string): Promise<number> {
    let active = 0;
    let cursor: Record<string, unknown> | undefined;
    do {
      const page = await tenantJobIds(f.engine, tenant, { limit: 100, startKey: cursor });
      active += (await getJobs(f.engine, page.items, { consistent: true })).filter(
        isCounted,
      ).length;
      cursor = page.lastKey;
    } while (cursor !== undefined);
    return active;
  }

  it("never counts under the tenant's jobs when a create and a cancel between parts leave the counters as they were", async () => {
    const tenant = "tenant-recount-aba";
    const jobs = JOBS;
    const start = Date.now();
    const seeded = await seedTenant(tenant, jobs, new Date(start));
    await writeQuotaOverride(f.engine, tenant, { activeJobs: jobs }, new Date(start));
    await writeRecountedUsage(
      f.engine,
      tenant,
      { activeJobs: jobs, runsPerMinute: jobs },
      null,
      new Date(start),
    );
    const interval = f.engine.settings.quotaRecountMs;
    const at = (n: number) => engineAt(f.engine, start + n * (interval + 1_000));
    // At its quota: a create recounts, its first part reads the newest 200 jobs.
    const outcomes = [await outcomeOf(at(1), tenant)];
    // Between parts: the oldest job (not yet read) cancelled, its share given back, and a new
    // hourly job (newest: on the pages already read) takes the room.
    const [oldest] = seeded;
    if (oldest === undefined) throw new Error("no job seeded");
    await cancelJob(at(1), tenant, oldest.jobId);
    outcomes.push(await outcomeOf(at(1), tenant));
    for (let n = 2; n < 8; n++) outcomes.push(await outcomeOf(at(n), tenant));
    const usage = await readQuotaUsage(f.engine, tenant);
    const active = await activeJobsOf(tenant);
    expect(outcomes.slice(0, 2)).toEqual(["busy", "created"]);
    // The quota is an upper bound: never under the jobs there are, and never passed.
    expect(usage?.activeJobs).toBeGreaterThanOrEqual(active);
    expect(active).toBeLessThanOrEqual(jobs);
  }, 120_000);

  it("starts afresh after an override is set between parts: the jobs created while the tenant had no limit are counted", async () => {
    const tenant = "tenant-recount-override";
    const jobs = JOBS;
    const limit = jobs + 3;
    const start = Date.now();
    await seedTenant(tenant, jobs, new Date(start));
    // Its first limit: no usage yet, so the first create recounts; its first part is busy.
    await setQuotaOverride(engineAt(f.engine, start), tenant, { activeJobs: limit });
    const interval = f.engine.settings.quotaRecountMs;
    const at = (n: number) => engineAt(f.engine, start + n * (interval + 1_000));
    const outcomes = [await outcomeOf(at(1), tenant)];
    // The operator lifts the limit: five creates reserve nothing (newest: pages already read).
    await setQuotaOverride(at(1), tenant, {});
    for (let i = 0; i < 5; i++) outcomes.push(await outcomeOf(at(1), tenant));
    // And sets it again: the usage is dropped once more, as it was when the parts started.
    await setQuotaOverride(at(1), tenant, { activeJobs: limit });
    for (let n = 2; n < 9; n++) outcomes.push(await outcomeOf(at(n), tenant));
    const usage = await readQuotaUsage(f.engine, tenant);
    const active = await activeJobsOf(tenant);
    expect(outcomes.slice(0, 6)).toEqual(["busy", ...Array(5).fill("created")]);
    // Over its limit once the JOBS + 5 jobs are counted: nothing more is created.
    expect(active).toBe(jobs + 5);
    expect(usage?.activeJobs).toBeGreaterThanOrEqual(active);
  }, 120_000);

  it.each([
    // Left by a version that names its fields otherwise: a step, and nothing this one reads.
    ["another version's", "tenant-recount-foreign-item", { step: 7, position: {} }],
    // Its part number named otherwise: the item is there, with no numeric `step` to condition on.
    ["with no step this version reads", "tenant-recount-foreign-step", { part: 7, position: {} }],
  ] as const)(
    "goes on past a RECOUNT item this version cannot read (%s), replacing it",
    async (_what, tenant, fields) => {
      const jobs = JOBS;
      const start = Date.now();
      await seedTenant(tenant, jobs, new Date(start));
      await setQuotaOverride(engineAt(f.engine, start), tenant, { activeJobs: 2 * jobs });
      await f.engine.doc.send(
        new PutCommand({
          TableName: f.engine.tables.jobs,
          Item: { pk: `QUOTA#${tenant}`, sk: "RECOUNT", tenantId: tenant, ...fields },
        }),
      );
      const interval = f.engine.settings.quotaRecountMs;
      const at = (n: number) => engineAt(f.engine, start + n * (interval + 1_000));
      const outcomes: string[] = [];
      for (let n = 1; n < 8 && !outcomes.includes("created"); n++)
        outcomes.push(await outcomeOf(at(n), tenant));
      // 500 jobs at 200 a part: two parts busy, the third counts them all and creates.
      expect(outcomes).toEqual(["busy", "busy", "created"]);
      expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: jobs + 1 });
    },
    120_000,
  );

  it("a recount's write is refused after a reservation and a give-back of the same share, its counters as they were", async () => {
    const tenant = "tenant-recount-write-aba";
    const usage = { activeJobs: 5, runsPerMinute: 5 };
    expect(await writeRecountedUsage(f.engine, tenant, usage, null, new Date())).toBe(true);
    const read = async () => {
      const { Item: item } = await f.engine.doc.send(
        new GetCommand({
          TableName: f.engine.tables.jobs,
          Key: { pk: `QUOTA#${tenant}`, sk: "USAGE" },
          ConsistentRead: true,
        }),
      );
      if (item === undefined) throw new Error("no usage item");
      return decodeSeenUsage(item);
    };
    const seen = await read();
    // While the recount reads: a create reserves (its job on pages already read) and a cancel of
    // another job (on pages not yet read) gives the same share back.
    const reserved = await reserveUsage(
      f.engine,
      tenant,
      { activeJobs: 1, runsPerMinute: 1 },
      {
        activeJobs: 10,
        runsPerMinute: 10,
      },
    );
    if (reserved === null) throw new Error("the reservation was refused");
    expect(await giveBackUsage(f.engine, reserved)).toBe(true);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(usage);
    expect(
      await writeRecountedUsage(
        f.engine,
        tenant,
        { activeJobs: 4, runsPerMinute: 4 },
        seen,
        new Date(),
      ),
    ).toBe(false);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(usage);
  });
});
