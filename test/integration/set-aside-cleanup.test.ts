import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deleteJob, editJob, pauseJob } from "../../shared/jobs/index.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { readDueEntry } from "../../shared/storage/job-edit.js";
import { listSetAsideEntries, setEntryAside } from "../../shared/storage/set-aside.js";
import {
  createEngineFixture,
  type EngineFixture,
  jobWithRetryDue,
} from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/**
 * A due entry no claim could process is set aside (`ASIDE#<shard>`) while its job names it. It
 * goes when the job stops naming it: deleted or cancelled, paused, or edited (a fresh entry, or
 * the entry rewritten in place). Before, a deleted job's set-aside entry stayed forever.
 */
describe("a set-aside due entry goes with its job's entry", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  /** A job whose pending entry a claim set aside: the job still names it. */
  async function jobSetAside(jobId: string) {
    const now = new Date();
    const dueAt = new Date(Math.ceil((now.getTime() + HOUR) / 1000) * 1000);
    const [job] = await seedJobs(
      f,
      [{ jobId, schedule: { every: "PT1H", startAt: dueAt.toISOString() }, dueAt }],
      now,
    );
    if (job?.nextDueKey == null) throw new Error("seeded without a due entry");
    const entry = await readDueEntry(f.engine, job.nextDueKey);
    if (entry === null) throw new Error("seeded entry not found");
    expect((await setEntryAside(f.engine, entry, new Error("refused for good"), now)).outcome).toBe(
      "set-aside",
    );
    expect(await asideOf(jobId)).toHaveLength(1);
    return job;
  }
  const asideOf = async (jobId: string) =>
    (await listSetAsideEntries(f.engine, 0)).filter((a) => a.entry.jobId === jobId);

  it("a deleted job leaves no set-aside entry behind", async () => {
    const job = await jobSetAside("deleted-job");
    await deleteJob(f.engine, job.tenantId, job.jobId);
    expect(await asideOf(job.jobId)).toEqual([]);
  });

  it("a pause takes it away with the job's entry", async () => {
    const job = await jobSetAside("paused-job");
    await pauseJob(f.engine, job.tenantId, job.jobId);
    expect(await asideOf(job.jobId)).toEqual([]);
  });

  it("an edit that rewrites the entry in place, or files a fresh one, takes it away", async () => {
    const kept = await jobSetAside("edited-in-place");
    await editJob(f.engine, kept.tenantId, kept.jobId, kept.version, { name: "fixed" });
    expect(await asideOf(kept.jobId)).toEqual([]);
    const moved = await jobSetAside("edited-schedule");
    await editJob(f.engine, moved.tenantId, moved.jobId, moved.version, {
      schedule: { every: "PT2H" },
    });
    expect(await asideOf(moved.jobId)).toEqual([]);
  });

  it("a set-aside retry entry, which its job does not name, expires a retention after it was set aside", async () => {
    const { job, retry } = await jobWithRetryDue(f);
    expect(retry).toMatchObject({ kind: "retry", attempt: 2 });
    const setAsideAt = new Date();
    expect(
      (await setEntryAside(f.engine, retry, new Error("refused for good"), setAsideAt)).outcome,
    ).toBe("set-aside");

    // The delete deletes the job's pending entry's record; a retry entry is not that entry.
    await deleteJob(f.engine, job.tenantId, job.jobId);
    const retention = f.engine.settings.retentionDays * DAY;
    await sweepExpired(f.engine, new Date(setAsideAt.getTime() + retention - HOUR));
    expect(await asideOf(job.jobId)).toHaveLength(1);
    const pastRetention = new Date(setAsideAt.getTime() + retention + 1_000);
    // Expired but not yet deleted (TTL deletes later): the list no longer shows it.
    const later = { ...f.engine, clock: () => pastRetention };
    const listedLater = await listSetAsideEntries(later, 0);
    expect(listedLater.filter((a) => a.entry.jobId === job.jobId)).toEqual([]);
    await sweepExpired(f.engine, pastRetention);
    expect(await asideOf(job.jobId)).toEqual([]);
  }, 30_000);
});
