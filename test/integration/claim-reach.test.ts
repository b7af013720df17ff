import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tickOnce } from "../../shared/dispatch/tick.js";
import type { Engine } from "../../shared/engine.js";
import { cancelJob, createJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";

const TENANT = "tenant-a";
const MINUTE = 60_000;

/**
 * A claim queues every occurrence of its job planned in the next 14 minutes (docs/architecture.md,
 * "Claim reach"), so a per-minute job's claim transaction is shared by a dozen occurrences and
 * the passes in between claim nothing of it.
 */
describe("a claim's reach", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    // One shard: a tick's pass reads each shard's backlog bucket by bucket (here from a scan, and
    // up to 90 minutes of it), and the default's 8 read 8 times what the job's one shard does;
    // which shard the job is on changes nothing of a claim's reach.
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  const at = (instant: number): Engine => engineAt(f.engine, instant);
  const runsOf = async (jobId: string): Promise<Run[]> =>
    (await f.runs())
      .filter((r) => r.jobId === jobId)
      .sort((a, b) => a.scheduledFor.localeCompare(b.scheduledFor));
  const minutesFrom = (start: number, from: number, count: number) =>
    Array.from({ length: count }, (_, i) => new Date(start + (from + i) * MINUTE).toISOString());

  it("queues a per-minute job's occurrences of the next 14 minutes at once; passes claim nothing more until their horizon reaches the next entry", async () => {
    const start = Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE;
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1M", startAt: new Date(start).toISOString() } }),
    );

    // Half a second before start - 1 min: the claim reaches start + 12:59.5, so 13 occurrences.
    await tickOnce(at(start - MINUTE - 500), "reach-1");
    expect((await runsOf(job.jobId)).map((r) => r.scheduledFor)).toEqual(minutesFrom(start, 0, 13));
    const claimed = await getTenantJob(f.engine, TENANT, job.jobId);
    expect(claimed.nextRunAt).toBe(new Date(start + 13 * MINUTE).toISOString());
    const entries = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
    expect(entries.map((d) => d.scheduledFor)).toEqual(minutesFrom(start, 13, 1));

    // A pass whose horizon (now + 5 min, to the end of that minute) stops short of the entry.
    await tickOnce(at(start + 7 * MINUTE + 500), "reach-2");
    expect(await runsOf(job.jobId)).toHaveLength(13);

    // The first pass whose horizon passes the entry claims the next 14 minutes' worth from it.
    await tickOnce(at(start + 8 * MINUTE + 500), "reach-3");
    expect((await runsOf(job.jobId)).map((r) => r.scheduledFor)).toEqual(minutesFrom(start, 0, 23));
    expect((await runsOf(job.jobId)).every((r) => r.status === "QUEUED")).toBe(true);
  });

  it("a job cancel cancels every run its claims queued, the one 13 minutes ahead included", async () => {
    const start = Math.ceil((Date.now() + 90 * MINUTE) / MINUTE) * MINUTE;
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1M", startAt: new Date(start).toISOString() } }),
    );
    const now = start - MINUTE - 500;
    await tickOnce(at(now), "reach-cancel");
    expect(await runsOf(job.jobId)).toHaveLength(13);

    await cancelJob(at(now + 1_000), TENANT, job.jobId);
    const runs = await runsOf(job.jobId);
    expect(runs.filter((r) => r.status !== "CANCELLED").map((r) => r.scheduledFor)).toEqual([]);
    expect(runs).toHaveLength(13);
  });
});
