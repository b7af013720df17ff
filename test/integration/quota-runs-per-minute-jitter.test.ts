import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import { mostInAMinute } from "../../shared/quotas/limits.js";
import { plannedTime } from "../../shared/schedule/index.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { mulberry32 } from "../support/mulberry32.js";

/**
 * docs/api.md "Quotas": `runsPerMinute` measures a schedule of times by its occurrences in the 60 s
 * from its next one, and a jitter `window` (up to the period) moves each run to occurrence +
 * offset, so a job starts at most its measure plus one run in any minute, and a tenant whose jobs
 * have windows at most twice its `runsPerMinute`. These cases pin that bound where it is reached:
 * a job `every: PT1M` with `window: PT1M` counts 1 yet two of its runs are planned less than 60 s
 * apart whenever an offset is followed by a smaller one; and since the offsets are a public
 * function of the job id and the occurrence (SHA-256), a tenant can pick each job's `startAt` (an
 * edit that adds nothing to the quota) to put two runs of every job in the same minute
 * (adversarial review h77, whose cases expected the measure itself and failed at 2 and 20).
 */

const MINUTE = 60_000;
const T = Date.UTC(2031, 0, 1);

/** The most of `times` (ms) inside any half-open 60 s span, as the measure counts a schedule's. */
const peakInAMinute = (times: readonly number[]) => mostInAMinute([...times].sort((a, b) => a - b));

describe("runsPerMinute against jitter windows", () => {
  let f: EngineFixture;
  let nowMs = T - 60 * MINUTE;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0, shardCount: 1, maxShardCount: 1 },
      clock: () => new Date(nowMs),
      random: mulberry32(77),
    });
  });
  afterAll(() => f.destroy());

  const plannedOf = async (tenantId: string) =>
    (await f.runs())
      .filter((run) => run.tenantId === tenantId && run.status === "QUEUED")
      .map((run) => Date.parse(run.plannedFor ?? run.scheduledFor));

  it("a job counted 1 against runsPerMinute: 1 starts at most two runs within a minute, its measure plus one", async () => {
    const tenant = "h77-jitter-one";
    nowMs = T - 60 * MINUTE;
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 1 }, new Date(nowMs));
    await createJob(
      f.engine,
      testJob({
        tenantId: tenant,
        schedule: { every: "PT1M", startAt: new Date(T).toISOString() },
        window: "PT1M",
      }),
    );
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ runsPerMinute: 1 });
    // The dispatcher claims 30 minutes of its runs, a pass every 5 minutes.
    for (nowMs = T; nowMs <= T + 30 * MINUTE; nowMs += 5 * MINUTE) {
      await dispatchShard(f.engine, 0, "d");
    }
    const planned = await plannedOf(tenant);
    expect(planned.length).toBeGreaterThanOrEqual(30);
    expect(peakInAMinute(planned)).toBeLessThanOrEqual(1 + 1);
  }, 120_000);

  it("ten jobs counted 10 against runsPerMinute: 10, their startAt edited to the tenant's choice, start 20 runs in one minute: twice the quota, and no more", async () => {
    const tenant = "h77-jitter-aligned";
    const jobs = 10;
    nowMs = T + 120 * MINUTE;
    // The minute the tenant aims at, an hour on.
    const W = T + 180 * MINUTE;
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: jobs }, new Date(nowMs));
    for (let i = 0; i < jobs; i++) {
      const { job } = await createJob(
        f.engine,
        testJob({
          tenantId: tenant,
          schedule: { every: "PT1M", startAt: new Date(W + 30 * MINUTE).toISOString() },
          window: "PT1M",
        }),
      );
      // What the tenant computes offline from its job id (SHA-256): a startAt whose first
      // occurrence is planned at W or later and whose second is planned before W + 60 s.
      let chosen: number | undefined;
      for (let s = 1_000; s < MINUTE && chosen === undefined; s += 1_000) {
        const first = W - MINUTE + s;
        const schedule = { every: "PT1M", startAt: new Date(first).toISOString() };
        const a = plannedTime(job.jobId, new Date(first), MINUTE, schedule).getTime();
        const b = plannedTime(job.jobId, new Date(first + MINUTE), MINUTE, schedule).getTime();
        if (a >= W && b < W + MINUTE) chosen = first;
      }
      if (chosen === undefined) throw new Error(`no startAt found for ${job.jobId}`);
      // Same period: the edit adds nothing to runsPerMinute and is accepted at the limit.
      await editJob(f.engine, tenant, job.jobId, job.version, {
        schedule: { every: "PT1M", startAt: new Date(chosen).toISOString() },
      });
    }
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ runsPerMinute: jobs });
    nowMs = W - MINUTE;
    await dispatchShard(f.engine, 0, "d");
    const inW = (await plannedOf(tenant)).filter((t) => t >= W && t < W + MINUTE);
    // Two runs a job: its measure (1) plus one, the bound docs/api.md states, reached.
    expect(inW.length).toBe(2 * jobs);
  }, 120_000);
});
