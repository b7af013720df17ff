import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import { jobKey } from "../../shared/storage/items.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import {
  createQuotaFixture,
  type EngineFixture,
  engineAt,
  farJob,
  testJob,
} from "../support/engine-fixture.js";

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

/**
 * docs/api.md "Quotas", Precision: a recount counts the jobs written when it reads them, so a
 * create still writing is left out of it. Pinned as it stands (the overshoot is the jobs in
 * flight, and the next refusal's recount corrects the usage; each create here comes
 * quotaRecountMs after the one before, so each may recount); a fix would condition a create's
 * write on the recount its reservation was made under.
 */
describe("two creates at the limit at once", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createQuotaFixture();
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
    await createJob(f.engine, farJob(tenant));
    const oneOff = await createJob(
      f.engine,
      testJob({ tenantId: tenant, schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, oneOff.job.jobId);
    expect(await f.process(f.workerDeps("w"), received)).toBe("ack");
    // The usage still counts the completed one-off (an upper bound): 2 of 2.
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });

    // Each create a recount interval after the one before, so each refusal may recount.
    const interval = f.engine.settings.quotaRecountMs;
    const at = (n: number) => engineAt(f.engine, Date.now() + n * interval);
    // The first create recounts (1 job), reserves, and while its job is being written the second
    // recounts (still 1 job: the first's is not written), reserves, and writes.
    let second: unknown;
    const remove = beforeNextJobWrite("second-create", async () => {
      second = await createJob(at(2), farJob(tenant));
    });
    try {
      await createJob(at(1), farJob(tenant));
    } finally {
      remove();
    }
    expect(second).toMatchObject({ created: true });
    const active = (await f.jobs()).filter((j) => j.tenantId === tenant && j.status === "ACTIVE");
    expect(active).toHaveLength(3);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });

    const refused = await createJob(at(3), farJob(tenant)).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(QuotaExceededError);
    expect(refused).toMatchObject({ context: { quota: "activeJobs" } });
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 3 });
  });
});
