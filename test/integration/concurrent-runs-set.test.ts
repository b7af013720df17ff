import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { createJob } from "../../shared/jobs/index.js";
import { takeTenantSlot } from "../../shared/quotas/concurrency.js";
import { setQuotaOverride } from "../../shared/quotas/overrides.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { waitFor } from "../support/wait.js";

/**
 * docs/api.md "Quotas", concurrent runs: a run started while its tenant had no limit takes no
 * slot, so a limit set afterwards counts only the runs started under it.
 */
describe("a concurrentRuns limit set on a tenant whose runs run without one", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0 } });
  });
  afterAll(() => f.destroy());

  it("counts only the runs started under it: they start beside those already running, up to the limit", async () => {
    const tenant = "limit-set-while-running";
    const now = new Date();
    const jobIds = await Promise.all(
      Array.from({ length: 3 }, async () => {
        const schedule = { runAt: now.toISOString() };
        return (await createJob(f.engine, testJob({ tenantId: tenant, schedule }))).job.jobId;
      }),
    );
    const runs = await waitFor("the three runs", async () => {
      const found = (await f.runs()).filter((r) => jobIds.includes(r.jobId));
      return found.length === 3 ? found : undefined;
    });
    const [first, second, third] = runs;
    if (!first || !second || !third) throw new Error("three runs expected");

    expect(await takeTenantSlot(f.engine, first, now)).toEqual({ kind: "unlimited" });
    await setQuotaOverride(f.engine, tenant, { concurrentRuns: 1 });
    // The first still runs, in no slot: the second starts beside it, and only the third waits.
    expect(await takeTenantSlot(f.engine, second, now)).toMatchObject({ kind: "taken" });
    expect(await takeTenantSlot(f.engine, third, now)).toEqual({ kind: "full", limit: 1 });
  });
});
