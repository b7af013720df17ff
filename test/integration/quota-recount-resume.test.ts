import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { ConcurrentUpdateError } from "../../shared/errors.js";
import { cancelJob, createJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import {
  readQuotaUsage,
  writeQuotaOverride,
  writeRecountedUsage,
} from "../../shared/storage/tenant-quotas.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { seedJobs } from "../support/seed.js";

/** What an API request's Lambda does when it reaches its timeout: it stops, wherever it is. */
class KilledAtTimeout extends Error {}

/**
 * An engine like `base` whose DynamoDB client dies (as a Lambda killed at its timeout does) at the
 * `reads`+1-th BatchGetItem of each request; `nextRequest` starts the count again.
 */
function killedAfterReads(base: Engine, reads: number) {
  const clients = createTestClients();
  let sent = 0;
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === "BatchGetItemCommand" && ++sent > reads)
        throw new KilledAtTimeout(`killed at BatchGetItem ${sent}`);
      return next(args);
    },
    { step: "initialize", name: "killAtTimeout" },
  );
  return {
    engine: { ...base, doc: clients.doc },
    nextRequest: () => {
      sent = 0;
    },
    destroy: () => clients.destroy(),
  };
}

/**
 * docs/api.md "Quotas": a recount reads every job of the tenant (its index, 100 at a time, and
 * each job), ended ones within their retention included. One request used to read them all: past
 * what one API invocation reads in 29 s (on AWS about 2 requests per 100 jobs, one after another)
 * each create of a tenant whose usage needs a recount (its first, or the first after an override
 * is set) died at the timeout, the next started again from the first job, and the tenant could
 * create nothing, for good. A recount now reads at most `quotaRecountPages` pages per request,
 * keeps where it stopped, and answers 503 (busy, Retry-After): a repeat continues it.
 */
describe("a recount longer than one request", () => {
  const pages = 4;
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { quotaCacheMs: 0, quotaRecountPages: pages },
    });
  });
  afterAll(() => f.destroy());

  /** `count` hourly jobs of `tenant`, written straight into the table. */
  async function seedTenant(tenant: string, count: number) {
    const now = new Date();
    return seedJobs(
      f,
      Array.from({ length: count }, (_, i) => ({
        jobId: `job-${tenant}-${i}`,
        tenantId: tenant,
        schedule: { cron: "0 * * * *", timezone: "UTC" },
        dueAt: new Date(now.getTime() + 3_600_000),
      })),
      now,
    );
  }

  /** A create's outcome, by name. */
  const outcomeOf = (engine: Engine, tenant: string) =>
    createJob(engine, testJob({ tenantId: tenant })).then(
      () => "created",
      (error: unknown) =>
        error instanceof KilledAtTimeout
          ? "killed"
          : error instanceof ConcurrentUpdateError
            ? "busy"
            : error instanceof QuotaExceededError
              ? "refused"
              : String(error),
    );

  it("is continued by the repeats of a create that each die at the timeout, and the create then passes", async () => {
    const tenant = "big-tenant";
    const jobs = 1_000;
    const now = new Date();
    await seedTenant(tenant, jobs);
    // An override set: the tenant's usage is counted afresh before its next create.
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 5_000 }, now);
    // Each request is killed at its seventh BatchGetItem: 10 pages of 100 jobs never fit in one.
    const killing = killedAfterReads(f.engine, pages + 2);
    const outcomes: string[] = [];
    try {
      for (let attempt = 0; attempt < 5 && !outcomes.includes("created"); attempt++) {
        killing.nextRequest();
        outcomes.push(await outcomeOf(killing.engine, tenant));
      }
    } finally {
      killing.destroy();
    }
    expect(outcomes).toContain("created");
    // Each request stopped at its bound before the kill, answered busy, and kept its progress.
    expect(outcomes).toEqual(["busy", "busy", "created"]);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: jobs + 1 });
  }, 120_000);

  it("goes on one part per recount interval, refused from the stored usage in between, and starts afresh once the usage it would replace has changed", async () => {
    const tenant = "big-tenant-counted";
    const jobs = 1_000;
    const seeded = await seedTenant(tenant, jobs);
    const start = Date.now();
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 2_000 }, new Date(start));
    // Counted over the limit (say jobs ended by their runs since): a create recounts.
    await writeRecountedUsage(
      f.engine,
      tenant,
      { activeJobs: 3_000, runsPerMinute: 3_000 },
      null,
      new Date(start),
    );
    const interval = f.engine.settings.quotaRecountMs;
    const at = (n: number) => engineAt(f.engine, start + n * (interval + 1_000));
    const outcomes = [await outcomeOf(at(1), tenant)];
    // Within the interval of that part: refused from the stored usage, nothing read of the jobs.
    outcomes.push(await outcomeOf(engineAt(f.engine, start + interval + 2_000), tenant));
    outcomes.push(await outcomeOf(at(2), tenant));
    // A job's cancel gives its share back: the usage the recount would replace is not the one its
    // parts started from, and the next part starts afresh.
    const [first] = seeded;
    if (first === undefined) throw new Error("no job seeded");
    await cancelJob(at(2), tenant, first.jobId);
    for (let n = 3; n < 8 && !outcomes.includes("created"); n++)
      outcomes.push(await outcomeOf(at(n), tenant));
    expect(outcomes).toEqual(["busy", "refused", "busy", "busy", "busy", "created"]);
    // The jobs less the cancelled one, and the new job: each hourly job counts 1 run a minute.
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({
      activeJobs: jobs,
      runsPerMinute: jobs,
    });
  }, 120_000);
});
