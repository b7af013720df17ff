import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdempotencyConflictError } from "../../shared/errors.js";
import { cancelJob, createJob, deleteJob, editJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import { JOBS_BY_TENANT_INDEX } from "../../shared/storage/tables.js";
import { quotaPk, readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import {
  createQuotaFixture,
  type EngineFixture,
  engineAt,
  farJob,
  testJob,
} from "../support/engine-fixture.js";

/**
 * docs/api.md "Quotas", Precision: a tenant at its limit gets its room back when its jobs end,
 * though a refusal recounts at most once per `quotaRecountMs`: at once for a cancel or a delete
 * (they give the job's share back), by the next recount for a job its runs ended.
 */
describe("room back at the limit", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createQuotaFixture();
  });
  afterAll(() => f.destroy());

  const create = (tenant: string, engine = f.engine) =>
    createJob(engine, farJob(tenant)).catch((error: unknown) => error);

  /** A tenant at `activeJobs: 2` with two jobs, whose third create was just refused. */
  const atTheLimit = async (tenant: string) => {
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 2 }, new Date());
    const first = await createJob(f.engine, farJob(tenant));
    await createJob(f.engine, farJob(tenant));
    expect(await create(tenant)).toBeInstanceOf(QuotaExceededError);
    return first.job.jobId;
  };

  it.each([
    ["delete", deleteJob],
    ["cancel", cancelJob],
  ] as const)(
    "a %s then a create at once: created, and the usage counts the jobs",
    async (action, end) => {
      const tenant = `room-after-${action}`;
      const jobId = await atTheLimit(tenant);
      await end(f.engine, tenant, jobId);
      expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 1 });
      expect(await create(tenant)).toMatchObject({ created: true });
      expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });
      expect(await create(tenant)).toBeInstanceOf(QuotaExceededError);
    },
  );

  it("a delete of a dependent gives back its runs per minute: a create of as many at once", async () => {
    const tenant = "room-after-dependent-delete";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 2 }, new Date());
    const hourly = { cron: "0 * * * *", timezone: "UTC" };
    const upstream = await createJob(f.engine, testJob({ tenantId: tenant, schedule: hourly }));
    const after = { after: { jobs: [upstream.job.jobId], on: "completion" as const } };
    const dependent = await createJob(f.engine, testJob({ tenantId: tenant, schedule: after }));
    const refused = createJob(f.engine, testJob({ tenantId: tenant, schedule: hourly }));
    await expect(refused).rejects.toMatchObject({ context: { quota: "runsPerMinute" } });
    await deleteJob(f.engine, tenant, dependent.job.jobId);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 1 });
    const created = await createJob(f.engine, testJob({ tenantId: tenant, schedule: hourly }));
    expect(created.created).toBe(true);
  });

  it("40 cancels and deletes at once, of jobs after one job, each give their share back: the usage lowered by all 40, and 40 creates accepted at once", async () => {
    const tenant = "room-after-many-at-once";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 41, runsPerMinute: 41 }, new Date());
    const hourly = { cron: "0 * * * *", timezone: "UTC" };
    const upstream = await createJob(f.engine, testJob({ tenantId: tenant, schedule: hourly }));
    const after = { after: { jobs: [upstream.job.jobId], on: "completion" as const } };
    const dependents: string[] = [];
    for (let i = 0; i < 40; i++) {
      const { job } = await createJob(f.engine, testJob({ tenantId: tenant, schedule: after }));
      dependents.push(job.jobId);
    }
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 41, runsPerMinute: 41 });
    // Refused: the recount (now) counts the 41, and for 5 s a request over is refused from it.
    expect(await create(tenant)).toMatchObject({ context: { quota: "activeJobs" } });
    const refusedAt = Date.now();

    await Promise.all(
      dependents.map((jobId, i) => (i % 2 === 0 ? cancelJob : deleteJob)(f.engine, tenant, jobId)),
    );
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 1 });
    // Within the 5 s of that recount: the room is the cancels' and deletes' give-backs alone.
    const withinTheWindow = engineAt(f.engine, refusedAt);
    const created = await Promise.all(dependents.map(() => create(tenant, withinTheWindow)));
    expect(created.filter((c) => c instanceof QuotaExceededError)).toEqual([]);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 41, runsPerMinute: 1 });
    expect(await create(tenant, withinTheWindow)).toMatchObject({
      context: { quota: "activeJobs" },
    });
  }, 30_000);

  it("30 creates refused at once (a key taken with another body) each give their reservation back", async () => {
    const tenant = "room-after-refused-creates";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 41 }, new Date());
    const idempotency = { key: "taken", requestHash: "first" };
    await createJob(f.engine, farJob(tenant), { idempotency });
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 0 });
    const refused = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        createJob(f.engine, farJob(tenant), {
          idempotency: { key: "taken", requestHash: `other-${i}` },
        }).catch((error: unknown) => error),
      ),
    );
    expect(refused.filter((r) => !(r instanceof IdempotencyConflictError))).toEqual([]);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 0 });
  }, 30_000);

  it("a delete of a job cancelled already gives nothing back again", async () => {
    const tenant = "room-after-cancel-and-delete";
    const jobId = await atTheLimit(tenant);
    await cancelJob(f.engine, tenant, jobId);
    await cancelJob(f.engine, tenant, jobId);
    expect(await create(tenant)).toMatchObject({ created: true });
    await deleteJob(f.engine, tenant, jobId);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });
    expect(await create(tenant)).toMatchObject({ context: { quota: "activeJobs" } });
  });

  it("a job its run completed: refused until quotaRecountMs after the last recount, then created", async () => {
    const tenant = "room-after-completion";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 1 }, new Date());
    const oneOff = await createJob(
      f.engine,
      testJob({ tenantId: tenant, schedule: { runAt: new Date().toISOString() } }),
    );
    expect(await create(tenant)).toBeInstanceOf(QuotaExceededError);
    const received = await f.nextDelivery(f.engine.queues.normal, oneOff.job.jobId);
    expect(await f.process(f.workerDeps("w"), received)).toBe("ack");
    expect((await f.jobs()).find((j) => j.jobId === oneOff.job.jobId)?.status).toBe("COMPLETED");

    // Refused from the stored usage, which still counts the completed one-off.
    expect(await create(tenant)).toMatchObject({ context: { quota: "activeJobs" } });
    const later = engineAt(f.engine, Date.now() + f.engine.settings.quotaRecountMs);
    expect(await create(tenant, later)).toMatchObject({ created: true });
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 1 });
  }, 30_000);

  it("a recount that finds room but whose write loses to an edit's reservation recounts again: created, not refused from the stale usage", async () => {
    const tenant = "recount-write-lost";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 2, runsPerMinute: 100 }, new Date());
    const hourly = { cron: "0 * * * *", timezone: "UTC" };
    const recurring = await createJob(f.engine, testJob({ tenantId: tenant, schedule: hourly }));
    const oneOff = await createJob(
      f.engine,
      testJob({ tenantId: tenant, schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, oneOff.job.jobId);
    expect(await f.process(f.workerDeps("w"), received)).toBe("ack");
    // The usage still counts the completed one-off: 2 of 2, and the tenant has 1.
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 2, runsPerMinute: 1 });

    // While the create's recount reads the tenant index, an edit raises the recurring job's
    // runs per minute: its reservation changes the usage the recount's write is conditioned on.
    let edited = false;
    const name = "editDuringRecount";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input: unknown = args.input;
        const onIndex =
          context.commandName === "QueryCommand" &&
          typeof input === "object" &&
          input !== null &&
          Reflect.get(input, "IndexName") === JOBS_BY_TENANT_INDEX &&
          JSON.stringify(input).includes(tenant);
        if (onIndex && !edited) {
          edited = true;
          await editJob(f.engine, tenant, recurring.job.jobId, recurring.job.version, {
            schedule: { every: "PT10S" },
          });
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    const later = engineAt(f.engine, Date.now() + f.engine.settings.quotaRecountMs);
    let outcome: unknown;
    try {
      outcome = await create(tenant, later);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(edited).toBe(true);
    expect(outcome).toMatchObject({ created: true });
    const counted = (await f.jobs()).filter((j) => j.tenantId === tenant && j.status === "ACTIVE");
    expect(counted).toHaveLength(2);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });
  }, 30_000);

  it("a cancel whose job a recount saw ended before its give-back takes nothing off: the usage never below the jobs", async () => {
    const tenant = "recount-before-give-back";
    await atTheLimit(tenant);
    const [kept, ended] = (await f.jobs()).filter((j) => j.tenantId === tenant);
    if (kept === undefined || ended === undefined) throw new Error("two jobs expected");
    // A recount lands just after the job's write, before the cancel's give-back (its write on the usage).
    let jobWritten = false;
    let recounted = false;
    const name = "recountAfterCancelWrite";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = JSON.stringify(args.input);
        const onUsage = input.includes(quotaPk(tenant)) && input.includes("USAGE");
        const writes = ["UpdateItemCommand", "TransactWriteItemsCommand"];
        if (writes.includes(context.commandName ?? "") && input.includes(ended.jobId))
          jobWritten = true;
        if (context.commandName === "UpdateItemCommand" && onUsage && jobWritten && !recounted) {
          recounted = true;
          const later = engineAt(f.engine, Date.now() + f.engine.settings.quotaRecountMs);
          expect(await create(tenant, later)).toMatchObject({ created: true });
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      await cancelJob(f.engine, tenant, ended.jobId);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(recounted).toBe(true);
    // The recount counted the kept job and the new one; the cancel's share was not taken off again.
    const counted = (await f.jobs()).filter(
      (j) => j.tenantId === tenant && (j.status === "ACTIVE" || j.status === "PAUSED"),
    );
    expect(counted).toHaveLength(2);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });
  });
});
