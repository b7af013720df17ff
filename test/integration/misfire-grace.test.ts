import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { createJob } from "../../shared/jobs/index.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import { readDueEntry } from "../../shared/storage/job-edit.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

const MINUTE = 60_000;

/**
 * The misfire grace is "more than misfireGrace late" (isMisfired, late-start): an occurrence
 * exactly the grace old is on time. A claim after a dispatcher outage must judge the
 * occurrences it finds by the same bound as the occurrence it starts from.
 */
describe("the misfire grace's boundary at claim time", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("after a 10-minute outage the occurrence exactly the grace old runs on time under each policy", async () => {
    const grace = f.engine.settings.misfireGraceMs;
    expect(grace).toBe(MINUTE);
    // The claim comes exactly 10 minutes after the outage's first occurrence: first..first+8m
    // are more than the grace late, first+9m exactly the grace late.
    const first = new Date(Math.floor((Date.now() - 10 * MINUTE) / MINUTE) * MINUTE);
    const now = new Date(first.getTime() + 10 * MINUTE);
    const policies: MisfirePolicy[] = ["skip", "fire_once", "fire_all"];
    const jobs = await seedJobs(
      f,
      policies.map((misfire) => ({
        jobId: `job_grace_${misfire}`,
        misfire,
        schedule: { cron: "* * * * *", timezone: "UTC" },
        dueAt: first,
      })),
      now,
    );
    for (const job of jobs) {
      if (job.nextDueKey == null) throw new Error("seeded without a due entry");
      const entry = await readDueEntry(f.engine, job.nextDueKey);
      if (entry === null) throw new Error("seeded entry not found");
      const claimed = await claimDueEntry(f.engine, entry, {
        now,
        horizonEnd: new Date(now.getTime() + MINUTE),
      });
      expect(claimed.outcome).toBe("claimed");
    }
    const runs = await f.runs();
    const atGrace = new Date(first.getTime() + 9 * MINUTE).toISOString();
    const statusAt = (jobId: string, at: string) =>
      runs
        .filter((r) => r.jobId === jobId && r.scheduledFor === at)
        .map((r) => ({ status: r.status, reason: r.reason }));
    const summary = (jobId: string) => {
      const mine = runs.filter(
        (r) => r.jobId === jobId && Date.parse(r.scheduledFor) < first.getTime() + 9 * MINUTE,
      );
      return {
        skipped: mine.filter((r) => r.status === "SKIPPED").length,
        queued: mine.filter((r) => r.status === "QUEUED").length,
      };
    };
    // The occurrence exactly at the grace is on time: queued as a first attempt, whatever the policy.
    for (const misfire of policies) {
      expect(statusAt(`job_grace_${misfire}`, atGrace)).toEqual([
        { status: "QUEUED", reason: null },
      ]);
    }
    // Of the nine more than the grace late: skip records all, fire_once runs the latest of them
    // (first+8m) and skips the rest, fire_all runs each.
    expect(summary("job_grace_skip")).toEqual({ skipped: 9, queued: 0 });
    expect(summary("job_grace_fire_once")).toEqual({ skipped: 8, queued: 1 });
    expect(summary("job_grace_fire_all")).toEqual({ skipped: 0, queued: 9 });
  }, 60_000);

  it("a one-off created with its runAt exactly the grace past runs under skip; a millisecond more is skipped", async () => {
    const now = Date.now();
    // A clock that stands still: one that moves on from `now` makes the on-time one-off a
    // millisecond or more past the grace whenever its create reads it a millisecond later.
    const standingAtNow = { ...f.engine, clock: () => new Date(now) };
    const create = (lateMs: number) =>
      createJob(
        standingAtNow,
        testJob({
          schedule: { runAt: new Date(now - lateMs).toISOString() },
          policies: { ...testJob().policies, misfire: "skip" },
        }),
      );
    const onTime = await create(MINUTE);
    const late = await create(MINUTE + 1);
    const runs = await f.runs();
    const of = (jobId: string) =>
      runs.filter((r) => r.jobId === jobId).map((r) => ({ status: r.status, reason: r.reason }));
    expect(of(onTime.job.jobId)).toEqual([{ status: "QUEUED", reason: null }]);
    expect(of(late.job.jobId)).toEqual([
      { status: "SKIPPED", reason: "misfire: missed by more than the 60 s grace; policy skip" },
    ]);
  });
});
