import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import type { Engine } from "../../shared/engine.js";
import { editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { silentObservability } from "../../shared/observability.js";
import { MAX_MISFIRE_CATCH_UP } from "../../shared/policies.js";
import { jobKey } from "../../shared/storage/items.js";
import { readDueEntry } from "../../shared/storage/job-edit.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

const SECOND = 1000;
/** The runs one claim puts (dispatch/claim.ts): the first chunk of a catch-up. */
const CHUNK = 50;
/** Missed occurrences of the job a stale count meets: far fewer than the cap of 1,000. */
const STALE_MISSED = 120;

/**
 * fire_all runs at most MAX_MISFIRE_CATCH_UP missed occurrences in one catch-up, counted on the
 * due entry from chunk to chunk. An edit that keeps the schedule, or a pause and resume, writes
 * the pending entry again in the middle of the catch-up: the count goes with it, so the cap holds.
 */
describe("the fire_all catch-up cap across an edit or a resume", () => {
  let f: EngineFixture;
  const warnings: { message: string; fields: Record<string, unknown> }[] = [];

  beforeAll(async () => {
    f = await createEngineFixture({
      // The shortest lookahead: after the cap, a fast path queues a per-second job's runs up to
      // its horizon (a run a second), which no case here counts.
      settings: { shardCount: 1, maxShardCount: 1, lookaheadMs: 60_000 },
      obs: {
        ...silentObservability,
        log: {
          ...silentObservability.log,
          warn: (message, fields = {}) => void warnings.push({ message, fields }),
        },
      },
    });
  });
  afterAll(() => f.destroy());

  /**
   * A per-second fire_all job whose dispatcher was down for 2,000 s (far more missed occurrences
   * than the cap), of which one claim has run the first chunk: the catch-up is under way.
   */
  async function caughtUpOneChunk(jobId: string): Promise<{ first: Date }> {
    const now = new Date();
    const first = new Date(Math.floor((now.getTime() - 2000 * SECOND) / SECOND) * SECOND);
    const [job] = await seedJobs(
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
    if (job?.nextDueKey == null) throw new Error("seeded without a due entry");
    const entry = await readDueEntry(f.engine, job.nextDueKey);
    if (entry === null) throw new Error("seeded entry not found");
    const claimed = await claimDueEntry(f.engine, entry, { now, horizonEnd: now });
    expect(claimed.outcome).toBe("claimed");
    expect(claimed.outcome === "claimed" && claimed.next?.catchUpCount).toBe(CHUNK);
    return { first };
  }

  /** The job's catch-up as its runs record it: the occurrences run, and where the cap cut it. */
  async function catchUpOf(jobId: string, first: Date) {
    const runs = (await f.runs()).filter((r) => r.jobId === jobId);
    const capRecords = runs.filter(
      (r) => r.status === "SKIPPED" && /ran its cap/.test(r.reason ?? ""),
    );
    expect(capRecords).toHaveLength(1);
    const cutAt = Date.parse(capRecords[0]?.scheduledFor ?? "");
    const ran = runs.filter((r) => r.status === "QUEUED" && Date.parse(r.scheduledFor) < cutAt);
    return { ran: ran.length, cutAfterSeconds: (cutAt - first.getTime()) / SECOND };
  }

  it("an edit that keeps the schedule continues the catch-up's count", async () => {
    const { first } = await caughtUpOneChunk("job_edit");
    // The edit rewrites the pending entry, and its fast path claims the rest of the catch-up.
    await editJob(f.engine, "tenant-a", "job_edit", 1, { name: "renamed mid-catch-up" });
    expect(await catchUpOf("job_edit", first)).toEqual({
      ran: MAX_MISFIRE_CATCH_UP,
      cutAfterSeconds: MAX_MISFIRE_CATCH_UP,
    });
    // The operator's line says whose occurrences were not run: the tenant is the one to tell.
    const capped = warnings.filter(
      (w) => w.message.includes("ran its cap") && w.fields.jobId === "job_edit",
    );
    expect(capped).toHaveLength(1);
    expect(capped[0]?.fields).toMatchObject({ tenantId: "tenant-a" });
  }, 120_000);

  it("a pause and resume continue the catch-up's count", async () => {
    const { first } = await caughtUpOneChunk("job_resume");
    const engine: Engine = f.engine;
    await pauseJob(engine, "tenant-a", "job_resume");
    // The resume files the pending occurrence again, and its fast path claims the rest.
    await resumeJob(engine, "tenant-a", "job_resume");
    expect(await catchUpOf("job_resume", first)).toEqual({
      ran: MAX_MISFIRE_CATCH_UP,
      cutAfterSeconds: MAX_MISFIRE_CATCH_UP,
    });
    // The catch-up is over: the job goes on with a fresh count.
    const job = await getJob(engine, "job_resume");
    expect(job?.catchUpCount ?? 0).toBe(0);
  }, 120_000);

  it("an edit that changes the schedule ends the catch-up: the new schedule starts with no count", async () => {
    await caughtUpOneChunk("job_reschedule");
    await pauseJob(f.engine, "tenant-a", "job_reschedule");
    expect((await getJob(f.engine, "job_reschedule"))?.catchUpCount).toBe(CHUNK);
    // Paused, so nothing is claimed before the edit: the old schedule's count must not carry over.
    const startAt = new Date(Math.ceil((Date.now() + 3600 * SECOND) / SECOND) * SECOND);
    await editJob(f.engine, "tenant-a", "job_reschedule", 1, {
      schedule: { every: "PT1M", startAt: startAt.toISOString() },
    });
    expect((await getJob(f.engine, "job_reschedule"))?.catchUpCount ?? 0).toBe(0);
    await resumeJob(f.engine, "tenant-a", "job_reschedule");
    const job = await getJob(f.engine, "job_reschedule");
    if (job?.nextDueKey == null) throw new Error("the resumed job has no due entry");
    const entry = await readDueEntry(f.engine, job.nextDueKey);
    expect(entry?.scheduledFor).toBe(startAt.toISOString());
    expect(entry?.catchUpCount ?? 0).toBe(0);
  }, 120_000);

  /**
   * During a deploy a dispatcher of the previous version claims beside today's. Today's claim keeps
   * a fire_all catch-up's count on the job (for an edit or a resume to carry); the previous version
   * knows nothing of it, and a catch-up it ends leaves the count on the job. That count belongs to
   * an entry long claimed: a later resume must not charge it to the next catch-up.
   */
  it("a count an earlier version's claim left on the job: a resume after missed occurrences runs them all, not the cap less the stale count", async () => {
    const now = new Date();
    const first = new Date(Math.floor((now.getTime() - STALE_MISSED * SECOND) / SECOND) * SECOND);
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
        r.status === "QUEUED" &&
        Date.parse(r.scheduledFor) < first.getTime() + STALE_MISSED * SECOND,
    );
    expect(runs.filter((r) => /ran its cap/.test(r.reason ?? ""))).toEqual([]);
    expect(missedRun.length).toBeGreaterThanOrEqual(STALE_MISSED - 5);
  }, 120_000);
});
