import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import type { JobHandler } from "../../shared/execution/job-contract.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { cancelJob, createJob, editJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import { writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { waitFor } from "../support/wait.js";

/** A handler that counts how many of its runs are in progress at once, per tenant. */
function concurrencyProbe(holdMs: number) {
  const running = new Map<string, number>();
  const peak = new Map<string, number>();
  const handler: JobHandler = async (ctx) => {
    const now = (running.get(ctx.tenantId) ?? 0) + 1;
    running.set(ctx.tenantId, now);
    peak.set(ctx.tenantId, Math.max(peak.get(ctx.tenantId) ?? 0, now));
    try {
      await sleep(holdMs);
    } finally {
      running.set(ctx.tenantId, (running.get(ctx.tenantId) ?? 1) - 1);
    }
  };
  return { handler, peak: (tenant: string) => peak.get(tenant) ?? 0, reset: () => peak.clear() };
}

const GRACE_MS = 2_000;

describe("the concurrent-runs quota at the worker", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      // A two-second grace: a run whose wait for the quota counted as lateness would be SKIPPED.
      settings: {
        quotas: { ...DEFAULT_QUOTAS, concurrentRuns: 2 },
        // Overrides are written here and must apply at the next start: no cached override.
        quotaCacheMs: 0,
        misfireGraceMs: GRACE_MS,
      },
    });
  });
  afterAll(() => f.destroy());

  const createBatch = async (tenantId: string, count: number) => {
    // Due once every create has been written, so that no first start is late.
    const due = new Date(Date.now() + 3_000).toISOString();
    const jobs = await Promise.all(
      Array.from({ length: count }, () =>
        createJob(
          f.engine,
          testJob({
            tenantId,
            type: "probe",
            schedule: { runAt: due },
            policies: { ...testJob().policies, misfire: "skip" },
          }),
        ),
      ),
    );
    return jobs.map((j) => j.job.jobId);
  };

  const allSucceeded = (jobIds: readonly string[]) =>
    waitFor(
      `${jobIds.length} runs to succeed`,
      async () => {
        const runs = (await f.runs()).filter((r) => jobIds.includes(r.jobId));
        return runs.length === jobIds.length && runs.every((r) => r.status === "SUCCEEDED")
          ? runs
          : undefined;
      },
      60_000,
      200,
    );

  it("makes runs over the cap wait, runs them all, never more than the cap at once, and applies an override at the next start", async () => {
    const probe = concurrencyProbe(700);
    const stop = new AbortController();
    const loop = runWorkerLoop(f.workerDeps("capped", { probe: probe.handler }), {
      concurrency: 8,
      signal: stop.signal,
    });
    try {
      const capped = await createBatch("capped", 7);
      const other = await createBatch("other", 2);
      const runs = await allSucceeded([...capped, ...other]);
      // Each occurrence ran once, none was skipped as a misfire while it waited.
      expect(runs).toHaveLength(9);
      expect(probe.peak("capped")).toBe(2);
      expect(probe.peak("other")).toBe(2);
      // The loop held the runs over the cap at their tenant's gate: none went back through the
      // table to wait (a start that found the quota full would have left fence 2).
      expect(runs.map((r) => r.fence)).toEqual(runs.map(() => 1));
      // Some waited past the grace, and ran.
      const lateBy = (r: (typeof runs)[number]) =>
        Date.parse(r.startedAt ?? "") - Date.parse(r.scheduledFor);
      expect(Math.max(...runs.map(lateBy))).toBeGreaterThan(GRACE_MS);

      // Lowered without a restart: the next starts read it.
      await writeQuotaOverride(f.engine, "capped", { concurrentRuns: 1 }, new Date());
      probe.reset();
      const next = await createBatch("capped", 3);
      await allSucceeded(next);
      expect(probe.peak("capped")).toBe(1);
    } finally {
      stop.abort();
      await loop;
    }
  }, 120_000);

  it("sends a run over the cap back to wait, through the table, when each delivery is handled alone (the Lambda worker)", async () => {
    await writeQuotaOverride(f.engine, "lambda-capped", { concurrentRuns: 1 }, new Date());
    let release: () => void = () => {};
    const holding = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered = 0;
    const deps = f.workerDeps("lambda", {
      probe: () => {
        entered++;
        return holding;
      },
    });
    const [first, second] = await createBatch("lambda-capped", 2);
    if (first === undefined || second === undefined) throw new Error("two jobs expected");
    const firstDelivery = await f.nextDelivery(f.engine.queues.normal, first);
    const running = f.process(deps, firstDelivery);
    // Its handler runs in the tenant's one slot (its start is written by its first heartbeat).
    await waitFor("the first run's handler", () => entered === 1);
    const secondDelivery = await f.nextDelivery(f.engine.queues.normal, second);
    expect(await f.process(deps, secondDelivery)).toBe("ack");
    const waiting = (await f.runs()).find((r) => r.jobId === second);
    expect(waiting).toMatchObject({ status: "QUEUED", fence: 1 });
    expect(waiting?.reason).toMatch(/concurrentRuns quota \(1\)/);
    release();
    expect(await running).toBe("ack");
    // Its new message comes a second or so later, and the run goes ahead: it is not a misfire.
    const again = await f.nextDelivery(f.engine.queues.normal, second);
    expect(await f.process(deps, again)).toBe("ack");
    const ended = (await f.runs()).find((r) => r.jobId === second);
    expect(ended).toMatchObject({ status: "SUCCEEDED", fence: 2 });
  }, 60_000);
});

describe("the job quotas at create and edit", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: {
        quotas: { ...DEFAULT_QUOTAS, activeJobs: 2, runsPerMinute: 100 },
        quotaCacheMs: 0,
      },
    });
  });
  afterAll(() => f.destroy());

  const far = () => ({ runAt: new Date(Date.now() + 3_600_000).toISOString() });

  it("refuses a job past activeJobs, and counts again once one ended", async () => {
    const first = await createJob(f.engine, testJob({ tenantId: "jobs", schedule: far() }));
    await createJob(f.engine, testJob({ tenantId: "jobs", schedule: far() }));
    const refused = await createJob(f.engine, testJob({ tenantId: "jobs", schedule: far() })).catch(
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(QuotaExceededError);
    expect((refused as QuotaExceededError).context.quota).toBe("activeJobs");
    await cancelJob(f.engine, "jobs", first.job.jobId);
    // The byTenant index is eventually consistent: the recount sees the cancel at once here.
    const third = await createJob(f.engine, testJob({ tenantId: "jobs", schedule: far() }));
    expect(third.created).toBe(true);
  });

  it("refuses a schedule, at create or edit, whose peak runs per minute go past runsPerMinute", async () => {
    // The schedules start in an hour: a schedule's peak counts from its first occurrence, wherever
    // that is, and a per-second one starting now had each create and edit that took it claim the
    // next 14 minutes of its runs (840, 1,250 requests, the rest of the file's twice over), which
    // no quota here reads.
    const startAt = new Date(Date.now() + 3_600_000).toISOString();
    const everySecond = { every: "PT1S", startAt };
    const a = await createJob(f.engine, testJob({ tenantId: "rate", schedule: everySecond }));
    const refused = await createJob(
      f.engine,
      testJob({ tenantId: "rate", schedule: everySecond }),
    ).catch((e: unknown) => e);
    expect((refused as QuotaExceededError).context).toMatchObject({
      quota: "runsPerMinute",
      field: "schedule",
    });
    // Every two seconds: 30 a minute, 90 with the first, within 100.
    const b = await createJob(
      f.engine,
      testJob({ tenantId: "rate", schedule: { every: "PT2S", startAt } }),
    );
    const edit = await editJob(f.engine, "rate", b.job.jobId, b.job.version, {
      schedule: everySecond,
    }).catch((e: unknown) => e);
    expect((edit as QuotaExceededError).context.quota).toBe("runsPerMinute");
    // Lowering the first makes room for the edit, at the next recount: one a refusal makes once
    // quotaRecountMs has passed since the last (the refused edit's).
    await editJob(f.engine, "rate", a.job.jobId, a.job.version, {
      schedule: { cron: "* * * * *", timezone: "UTC" },
    });
    const early = await editJob(f.engine, "rate", b.job.jobId, b.job.version, {
      schedule: everySecond,
    }).catch((e: unknown) => e);
    expect((early as QuotaExceededError).context.quota).toBe("runsPerMinute");
    const later = engineAt(f.engine, Date.now() + f.engine.settings.quotaRecountMs);
    const edited = await editJob(later, "rate", b.job.jobId, b.job.version, {
      schedule: everySecond,
    });
    expect(edited.version).toBe(2);
  });

  it("refuses a priority above maxPriority at create and edit", async () => {
    await writeQuotaOverride(f.engine, "prio", { maxPriority: "normal" }, new Date());
    const refused = await createJob(
      f.engine,
      testJob({ tenantId: "prio", schedule: far(), priority: "high" }),
    ).catch((e: unknown) => e);
    expect((refused as QuotaExceededError).context).toMatchObject({
      quota: "maxPriority",
      field: "priority",
    });
    const ok = await createJob(f.engine, testJob({ tenantId: "prio", schedule: far() }));
    const edit = await editJob(f.engine, "prio", ok.job.jobId, ok.job.version, {
      priority: "high",
    }).catch((e: unknown) => e);
    expect((edit as QuotaExceededError).context.quota).toBe("maxPriority");
  });
});
