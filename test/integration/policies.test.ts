import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { cancelJob, createJob } from "../../shared/jobs/index.js";
import type { MisfirePolicy, OverlapPolicy } from "../../shared/policies.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { seedJobs, setWatermark } from "../support/seed.js";

const MINUTE = 60_000;

describe("misfire after a 20-minute outage of a per-minute job", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("skip records 20 SKIPPED, fire_once runs 1 and skips 19, fire_all runs all 20", async () => {
    const now = new Date();
    // The pending occurrence is the first minute of a 20-minute outage: occurrences
    // first..first+19m are older than the 60 s grace when dispatch resumes now; first+20m is not.
    const first = new Date(Math.floor((now.getTime() - 20 * MINUTE) / MINUTE) * MINUTE);
    const policies: MisfirePolicy[] = ["skip", "fire_once", "fire_all"];
    await seedJobs(
      f,
      policies.map((misfire) => ({
        jobId: `job_${misfire}`,
        misfire,
        schedule: { cron: "* * * * *", timezone: "UTC" },
        dueAt: first,
      })),
      now,
    );
    // The dispatcher last swept the minute before the outage.
    await setWatermark(f, 0, new Date(first.getTime() - MINUTE));
    const pass = await dispatchShard(f.engine, 0, "after-outage");
    expect(pass.outcome).toBe("swept");

    const runs = await f.runs();
    const missed = (r: { scheduledFor: string }) =>
      Date.parse(r.scheduledFor) < first.getTime() + 20 * MINUTE;
    const summary = (jobId: string) => {
      const mine = runs.filter((r) => r.jobId === jobId && missed(r));
      return {
        skipped: mine.filter((r) => r.status === "SKIPPED").length,
        queued: mine.filter((r) => r.status === "QUEUED").map((r) => r.scheduledFor),
        total: new Set(mine.map((r) => r.scheduledFor)).size,
      };
    };
    const skip = summary("job_skip");
    expect(skip).toEqual({ skipped: 20, queued: [], total: 20 });
    const once = summary("job_fire_once");
    expect(once.skipped).toBe(19);
    expect(once.queued).toEqual([new Date(first.getTime() + 19 * MINUTE).toISOString()]);
    const all = summary("job_fire_all");
    expect(all.skipped).toBe(0);
    expect(all.queued).toHaveLength(20);

    // Every policy goes on with the schedule: the first occurrence inside the grace runs on time.
    for (const misfire of policies) {
      const next = runs.find(
        (r) =>
          r.jobId === `job_${misfire}` &&
          r.scheduledFor === new Date(first.getTime() + 20 * MINUTE).toISOString(),
      );
      expect(next?.status).toBe("QUEUED");
    }
    const skippedReason = runs.find(
      (r) => r.jobId === "job_skip" && r.status === "SKIPPED",
    )?.reason;
    expect(skippedReason).toMatch(/^misfire: /);
    // The due entries left are each job's one next occurrence, after the claim window.
    const due = await f.dueEntries();
    expect(due.map((d) => d.jobId).sort()).toEqual(policies.map((p) => `job_${p}`).sort());
  }, 60_000);
});

describe("overlap on a job whose runs take longer than its interval", () => {
  let f: EngineFixture;
  const stop = new AbortController();
  let loop: Promise<void>;
  const concurrency: Record<
    string,
    { active: number; max: number; started: number[]; finished: number[] }
  > = {};

  beforeAll(async () => {
    // A short lookahead keeps the runs claimed ahead of this per-second job to a few hundred.
    f = await createEngineFixture({ settings: { leaseMs: 6000, lookaheadMs: 60_000 } });
    const slow = async (ctx: JobContext) => {
      const policy = (ctx.payload as { policy: string }).policy;
      const c = concurrency[policy] ?? { active: 0, max: 0, started: [], finished: [] };
      concurrency[policy] = c;
      c.active++;
      c.max = Math.max(c.max, c.active);
      c.started.push(Date.now());
      await sleep(3500);
      c.active--;
      c.finished.push(Date.now());
    };
    loop = runWorkerLoop(f.workerDeps("loop", { slow }), { concurrency: 10, signal: stop.signal });
  });
  afterAll(async () => {
    stop.abort();
    await loop;
    await f.destroy();
  });

  it("skip never overlaps, buffer_one runs the waiting one right after, allow never exceeds maxConcurrent", async () => {
    const startAt = new Date(Math.ceil((Date.now() + 2000) / 1000) * 1000).toISOString();
    const make = (overlap: OverlapPolicy, maxConcurrent = 1) =>
      createJob(
        f.engine,
        testJob({
          type: "slow",
          payload: { policy: overlap },
          schedule: { every: "PT1S", startAt },
          policies: { ...testJob().policies, overlap, maxConcurrent },
        }),
      );

    const jobs = await Promise.all([make("skip"), make("buffer_one"), make("allow", 2)]);
    await sleep(12_000);
    for (const { job } of jobs) await cancelJob(f.engine, job.tenantId, job.jobId);
    // The runs under way end within their handler's 3.5 s: wait for them, for 4 s at most (a fixed
    // 4 s before, most of it after the last had ended).
    const settled = Date.now() + 4000;
    while (Object.values(concurrency).some((c) => c.active > 0) && Date.now() < settled)
      await sleep(50);

    expect(concurrency.skip?.max).toBe(1);
    expect(concurrency.buffer_one?.max).toBe(1);
    expect(concurrency.allow?.max).toBe(2);
    const runs = await f.runs();
    const of = (jobId: string) => runs.filter((r) => r.jobId === jobId);
    const [skipJob, bufferJob] = jobs.map((j) => j.job.jobId);
    expect(
      of(skipJob ?? "").some((r) => r.status === "SKIPPED" && /policy skip$/.test(r.reason ?? "")),
    ).toBe(true);
    expect(
      of(bufferJob ?? "").some(
        (r) => r.status === "SKIPPED" && /already buffered/.test(r.reason ?? ""),
      ),
    ).toBe(true);
    // The buffered run starts as soon as the one ahead of it ends, not at its next recheck.
    const buffer = concurrency.buffer_one;
    const gaps = (buffer?.started.slice(1) ?? []).map(
      (start, i) => start - (buffer?.finished[i] ?? 0),
    );
    expect(gaps.length).toBeGreaterThanOrEqual(2);
    for (const gap of gaps) expect(gap).toBeLessThan(1500);
  }, 40_000);
});
