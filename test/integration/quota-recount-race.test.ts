import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { createJob, deleteJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import { jobKey } from "../../shared/storage/items.js";
import { tenantJobIds } from "../../shared/storage/job-queries.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

/** A put of a job item (a create's write), alone or in a transaction. */
const writesJob = (input: object): boolean => {
  const isJob = (item: unknown) =>
    typeof item === "object" && item !== null && Reflect.get(item, "sk") === jobKey("").sk;
  if ("Item" in input) return isJob(input.Item);
  if (!("TransactItems" in input) || !Array.isArray(input.TransactItems)) return false;
  return input.TransactItems.some(
    (t: unknown) => typeof t === "object" && t !== null && isJob(Reflect.get(t, "Put")?.Item),
  );
};

const far = () => ({ runAt: new Date(Date.now() + 3_600_000).toISOString() });

/**
 * docs/api.md "Quotas", Precision: a recount counts the jobs written when it reads them, so a
 * create still writing is left out of it. Pinned as it stands (the overshoot is the jobs in
 * flight, and the next refusal corrects the usage); a fix would condition a create's write on
 * the recount its reservation was made under.
 */
describe("two creates at the limit at once", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0 } });
  });
  afterAll(() => f.destroy());

  /** Runs `during` once, just before the next job item the engine writes (a create's write). */
  const beforeNextJobWrite = (name: string, during: () => Promise<unknown>) => {
    let ran = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        if (!ran && writesJob(args.input)) {
          ran = true;
          await during();
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    return () => f.engine.doc.middlewareStack.remove(name);
  };

  it("a create whose recount runs while another's reserved job is still being written leaves it out: both pass the limit, and the next refusal's recount corrects the usage", async () => {
    const tenant = "recount-in-flight";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 2 }, new Date());
    await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }));
    const gone = await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }));
    await deleteJob(f.engine, tenant, gone.job.jobId);
    // The usage still counts the deleted job (an upper bound): 2 of 2.
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });

    // The first create recounts (1 job), reserves, and while its job is being written the second
    // recounts (still 1 job: the first's is not written), reserves, and writes.
    let second: unknown;
    const remove = beforeNextJobWrite("second-create", async () => {
      second = await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }));
    });
    try {
      await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }));
    } finally {
      remove();
    }
    expect(second).toMatchObject({ created: true });
    expect(
      (await tenantJobIds(f.engine, tenant, { limit: 100, startKey: undefined })).items,
    ).toHaveLength(3);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });

    const refused = await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() })).catch(
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(QuotaExceededError);
    expect(refused).toMatchObject({ context: { quota: "activeJobs" } });
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 3 });
  });
});
