import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { jobKey } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

const SECOND = 1000;
/** Missed occurrences of the job below: far fewer than the cap of 1,000. */
const MISSED = 120;

/**
 * During a deploy a dispatcher of the previous version claims beside today's. Today's claim keeps
 * a fire_all catch-up's count on the job (for an edit or a resume to carry); the previous version
 * knows nothing of it, and a catch-up it ends leaves the count on the job. That count belongs to
 * an entry long claimed: a later resume must not charge it to the next catch-up.
 */
describe("a catch-up count an earlier version's claim left on the job", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("a resume after missed occurrences runs them all, not the cap less the stale count", async () => {
    const now = new Date();
    const first = new Date(Math.floor((now.getTime() - MISSED * SECOND) / SECOND) * SECOND);
    const jobId = "job_stale_count";
    await seedJobs(
      f,
      [
        {
          jobId,
          misfire: "fire_all",
          schedule: { every: "PT1S", startAt: first.toISOString() },
          dueAt: first,
        },
      ],
      now,
    );
    // What today's claim wrote mid-catch-up (990 run so far, for the entry an hour back), and an
    // earlier version's claims then went on from: they ended that catch-up and moved the job on
    // to the entry seeded here, leaving the count.
    const claimedEntry = new Date(first.getTime() - 3600 * SECOND).toISOString();
    await f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(jobId),
        UpdateExpression: "SET catchUpCount = :count, catchUpOf = :of",
        ExpressionAttributeValues: { ":count": 990, ":of": claimedEntry },
      }),
    );
    await pauseJob(f.engine, "tenant-a", jobId);
    // The resume files the pending occurrence again, and its fast path claims the catch-up.
    await resumeJob(f.engine, "tenant-a", jobId);
    const runs = (await f.runs()).filter((r) => r.jobId === jobId);
    const missedRun = runs.filter(
      (r) =>
        r.status === "QUEUED" && Date.parse(r.scheduledFor) < first.getTime() + MISSED * SECOND,
    );
    expect(runs.filter((r) => /ran its cap/.test(r.reason ?? ""))).toEqual([]);
    expect(missedRun.length).toBeGreaterThanOrEqual(MISSED - 5);
  }, 120_000);
});
