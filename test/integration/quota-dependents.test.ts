import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { createJobs } from "../../shared/jobs/create-batch.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { getJob } from "../../shared/storage/run-reads.js";
import {
  forgetQuotaUsage,
  readQuotaUsage,
  writeQuotaOverride,
} from "../../shared/storage/tenant-quotas.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";

/** Starts an hour from now, so no create or edit claims runs at once: the peaks are what counts. */
const later = () => new Date(Date.now() + 3_600_000).toISOString();
const everySecond = (): ScheduleSpec => ({ every: "PT1S", startAt: later() });
const everyTwoSeconds = (): ScheduleSpec => ({ every: "PT2S", startAt: later() });
const hourly: ScheduleSpec = { cron: "0 * * * *", timezone: "UTC" };
const runsAfter = (...jobs: string[]): ScheduleSpec => ({ after: { jobs, on: "completion" } });
const far = (): ScheduleSpec => ({ runAt: later() });

describe("runsPerMinute counts what a dependent runs: its upstreams' runs", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    // Overrides are written here and must apply at once: no cached override.
    f = await createEngineFixture({ settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0 } });
  });
  afterAll(() => f.destroy());

  const create = async (tenantId: string, schedule: ScheduleSpec) =>
    (await createJob(f.engine, testJob({ tenantId, schedule }))).job;
  const refusal = (attempt: Promise<unknown>) =>
    attempt.then(
      () => {
        throw new Error("accepted past runsPerMinute");
      },
      (e: unknown) => {
        expect(e).toBeInstanceOf(QuotaExceededError);
        return (e as QuotaExceededError).context;
      },
    );
  const tenantJobs = async (tenantId: string) =>
    (await f.jobs()).filter((j) => j.tenantId === tenantId);
  /** The usage a recount of the tenant's jobs writes: dropped, then recounted by a create that counts 0. */
  const recounted = async (tenantId: string) => {
    await forgetQuotaUsage(f.engine, tenantId);
    await create(tenantId, far());
    const usage = await readQuotaUsage(f.engine, tenantId);
    return usage && { ...usage, activeJobs: usage.activeJobs - 1 };
  };

  it("refuses a dependent of a per-second job once the per-second job takes the whole quota, and writes nothing", async () => {
    const tenant = "fan-out";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 60 }, new Date());
    const upstream = await create(tenant, everySecond());
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 60 });

    // Each of the upstream's 60 runs a minute would run it once more.
    for (let i = 0; i < 3; i++) {
      expect(await refusal(create(tenant, runsAfter(upstream.jobId)))).toEqual({
        quota: "runsPerMinute",
        limit: 60,
        field: "schedule.after.jobs",
      });
    }
    expect((await getJob(f.engine, upstream.jobId))?.dependents).toEqual([]);
    expect(await tenantJobs(tenant)).toHaveLength(1);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 60 });
  });

  it("counts a chain's peak at every level and sums a fan-in, as a recount does; a one-off's dependents count 0", async () => {
    const tenant = "chains";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 200 }, new Date());
    const a = await create(tenant, everyTwoSeconds());
    const b = await create(tenant, runsAfter(a.jobId));
    const c = await create(tenant, runsAfter(b.jobId));
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 3, runsPerMinute: 90 });
    // After both A and B: once per A run and once per B run.
    const fanIn = await create(tenant, runsAfter(a.jobId, b.jobId));
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 4, runsPerMinute: 150 });
    const oneOff = await create(tenant, far());
    await create(tenant, runsAfter(oneOff.jobId));
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 6, runsPerMinute: 150 });

    // After C (30) and the fan-in (60): 90 more, past 200.
    expect(await refusal(create(tenant, runsAfter(c.jobId, fanIn.jobId)))).toMatchObject({
      quota: "runsPerMinute",
      field: "schedule.after.jobs",
    });
    expect(await recounted(tenant)).toEqual({ activeJobs: 6, runsPerMinute: 150 });
  });

  it("counts a lattice once per path, not once per job: each layer after both jobs of the one above", async () => {
    const tenant = "lattice";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 10_000 }, new Date());
    let above = [await create(tenant, everyTwoSeconds())];
    for (let layer = 0; layer < 3; layer++) {
      const jobs = above.map((j) => j.jobId);
      above = [await create(tenant, runsAfter(...jobs)), await create(tenant, runsAfter(...jobs))];
    }
    // 30 for the root, then two jobs a layer at 30, 60, 120 each (once per job it would be 210).
    const paths = { activeJobs: 7, runsPerMinute: 30 + 2 * (30 + 60 + 120) };
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(paths);
    expect(await recounted(tenant)).toEqual(paths);
  });

  it("checks an upstream's schedule edit for what it adds through every job below it, and counts again once a link goes", async () => {
    const tenant = "upstream-edit";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 100 }, new Date());
    const a = await create(tenant, hourly);
    const b = await create(tenant, runsAfter(a.jobId));
    await create(tenant, runsAfter(b.jobId));
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 3, runsPerMinute: 3 });

    // Hourly to every two seconds: 29 more at A, B and C each.
    const a2 = await editJob(f.engine, tenant, a.jobId, a.version, {
      schedule: everyTwoSeconds(),
    });
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 3, runsPerMinute: 90 });
    // Every second: 30 more at each, 180 in all.
    expect(
      await refusal(editJob(f.engine, tenant, a.jobId, a2.version, { schedule: everySecond() })),
    ).toMatchObject({ quota: "runsPerMinute", limit: 100, field: "schedule" });
    expect((await getJob(f.engine, a.jobId))?.version).toBe(a2.version);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 3, runsPerMinute: 90 });

    // B on a schedule of its own: A's runs reach no job below it, so A's edit adds 30 only, once
    // a recount (quotaRecountMs after the refusal's) takes off what B's edit lowered.
    await editJob(f.engine, tenant, b.jobId, b.version, { schedule: hourly });
    const later = engineAt(f.engine, Date.now() + f.engine.settings.quotaRecountMs);
    const a3 = await editJob(later, tenant, a.jobId, a2.version, { schedule: everySecond() });
    expect(a3.version).toBe(a2.version + 1);
    expect(await recounted(tenant)).toEqual({ activeJobs: 3, runsPerMinute: 62 });
  });

  it("checks a dependent's edit to other upstreams for what it adds through the jobs below it", async () => {
    const tenant = "dependent-edit";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 100 }, new Date());
    const slow = await create(tenant, hourly);
    const fast = await create(tenant, everyTwoSeconds());
    const d = await create(tenant, runsAfter(slow.jobId));
    await create(tenant, runsAfter(d.jobId));
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 4, runsPerMinute: 33 });
    // After both: 30 more at D and the job below it.
    const d2 = await editJob(f.engine, tenant, d.jobId, d.version, {
      schedule: runsAfter(slow.jobId, fast.jobId),
    });
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 4, runsPerMinute: 93 });
    // On a clock of its own, every second: 29 more than its upstreams' 31, at D and below it.
    expect(
      await refusal(editJob(f.engine, tenant, d.jobId, d2.version, { schedule: everySecond() })),
    ).toMatchObject({ quota: "runsPerMinute", field: "schedule" });
    expect(await recounted(tenant)).toEqual({ activeJobs: 4, runsPerMinute: 93 });
  });

  /** Runs `during` once, just before the next transaction the engine sends. */
  const beforeNextTransaction = (name: string, during: () => Promise<unknown>) => {
    let ran = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        if (!ran && "TransactItems" in (args.input as object)) {
          ran = true;
          await during();
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    return {
      ran: () => ran,
      remove: () => f.engine.doc.middlewareStack.remove(name),
    };
  };

  it("a dependent's create overtaken by its upstream's edit counts again with the upstream as edited", async () => {
    const tenant = "create-overtaken";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 100 }, new Date());
    const upstream = await create(tenant, everyTwoSeconds());
    // Between the dependent's reservation (30, its upstream's peak as read) and its write.
    const speedUp = beforeNextTransaction("speedUpBeforeLink", () =>
      editJob(f.engine, tenant, upstream.jobId, upstream.version, { schedule: everySecond() }),
    );
    try {
      expect(await refusal(create(tenant, runsAfter(upstream.jobId)))).toMatchObject({
        quota: "runsPerMinute",
        field: "schedule.after.jobs",
      });
    } finally {
      speedUp.remove();
    }
    expect(speedUp.ran()).toBe(true);
    expect((await getJob(f.engine, upstream.jobId))?.dependents).toEqual([]);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 60 });
    expect(await recounted(tenant)).toEqual({ activeJobs: 1, runsPerMinute: 60 });
  });

  it("an upstream's edit overtaken by a dependent's create counts again with the dependent below it", async () => {
    const tenant = "edit-overtaken";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 100 }, new Date());
    const upstream = await create(tenant, hourly);
    // Between the edit's reservation (59, with nothing below the upstream) and its write.
    const link = beforeNextTransaction("linkBeforeEdit", () =>
      create(tenant, runsAfter(upstream.jobId)),
    );
    try {
      expect(
        await refusal(
          editJob(f.engine, tenant, upstream.jobId, upstream.version, {
            schedule: everySecond(),
          }),
        ),
      ).toMatchObject({ quota: "runsPerMinute", field: "schedule" });
    } finally {
      link.remove();
    }
    expect(link.ran()).toBe(true);
    const standing = await getJob(f.engine, upstream.jobId);
    expect([standing?.version, standing?.dependents.length]).toEqual([upstream.version, 1]);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 2, runsPerMinute: 2 });
    expect(await recounted(tenant)).toEqual({ activeJobs: 2, runsPerMinute: 2 });
  });

  it("edits of an upstream at once with creates below it, at any depth: never past the limit, the usage covering what is there", async () => {
    // The creates start later each round: the edit commits before some, after others.
    for (const [round, delayMs] of [0, 150, 400].entries()) {
      const tenant = `edit-race-${round}`;
      const head = await create(tenant, hourly);
      const middles = [
        await create(tenant, runsAfter(head.jobId)),
        await create(tenant, runsAfter(head.jobId)),
      ];
      for (const m of middles) await create(tenant, runsAfter(m.jobId));
      // 5 jobs each counting the head's 1; every second, each would count 60: room for 2 more then.
      const limit = 7 * 60;
      await writeQuotaOverride(f.engine, tenant, { runsPerMinute: limit }, new Date());
      const outcomes = await Promise.all([
        // The first edit at the limit reads the jobs below; the others share or reuse its read.
        ...Array.from({ length: 3 }, () =>
          editJob(f.engine, tenant, head.jobId, head.version, { schedule: everySecond() }).then(
            () => "edited",
            (e: unknown) => (e instanceof Error ? e.name : String(e)),
          ),
        ),
        ...[head, ...middles, ...middles].map(async (above) => {
          await new Promise((resolve) => setTimeout(resolve, delayMs));
          return create(tenant, runsAfter(above.jobId)).then(
            () => "created",
            (e: unknown) => (e instanceof Error ? e.name : String(e)),
          );
        }),
      ]);
      const where = `round ${round}: ${outcomes.join(", ")}`;
      expect(outcomes.filter((o) => o === "edited").length, where).toBeLessThanOrEqual(1);
      for (const o of outcomes)
        expect(
          ["edited", "created", "QuotaExceededError", "VersionMismatchError"],
          where,
        ).toContain(o);
      const stored = await readQuotaUsage(f.engine, tenant);
      const actual = await recounted(tenant);
      expect(actual?.runsPerMinute, where).toBeLessThanOrEqual(limit);
      expect(stored?.runsPerMinute, where).toBeGreaterThanOrEqual(actual?.runsPerMinute ?? 0);
    }
  }, 60_000);

  it("counts a batch's dependents the same way, letting them in in order while they fit", async () => {
    const tenant = "batch";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 60 }, new Date());
    const upstream = await create(tenant, everyTwoSeconds());
    const outcomes = await createJobs(
      f.engine,
      tenant,
      [runsAfter(upstream.jobId), runsAfter(upstream.jobId), far()].map((schedule) => ({
        input: testJob({ tenantId: tenant, schedule }),
      })),
    );
    expect(outcomes.map((o) => ("job" in o ? "created" : "refused"))).toEqual([
      "created",
      "refused",
      "created",
    ]);
    const refused = outcomes[1];
    expect(refused && "error" in refused && refused.error).toBeInstanceOf(QuotaExceededError);
    expect((refused as { error: QuotaExceededError }).error.context).toMatchObject({
      quota: "runsPerMinute",
      field: "schedule.after.jobs",
    });
    expect((await getJob(f.engine, upstream.jobId))?.dependents).toHaveLength(1);
    expect(await recounted(tenant)).toEqual({ activeJobs: 3, runsPerMinute: 60 });
  });
});
