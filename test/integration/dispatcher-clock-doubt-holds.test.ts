import { describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { shardOf } from "../../shared/keys.js";
import { createEngineFixture, jobWithRetryDue } from "../support/engine-fixture.js";
import { oneShardJob, skewed } from "../support/one-shard-job.js";

/**
 * A pass in doubt of its clock (clockInDoubt) still claims a retry entry late by its clock, and the
 * first pass after a 3-hour outage leaves a fire_all job's occurrences to the next, which runs each
 * missed occurrence once, none twice, none skipped.
 */
const MINUTE = 60_000;

describe.concurrent("a pass whose clock is in doubt", () => {
  it("claims a retry entry late by its clock", async ({ onTestFinished }) => {
    const f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
    onTestFinished(() => f.destroy());
    const { job, retry } = await jobWithRetryDue(f);
    const shard = shardOf(job.jobId, 1);
    await dispatchShard(f.engine, shard, "right");
    const lateBy = Date.parse(retry.dueAt) - Date.now() + 10 * MINUTE;
    const pass = await dispatchShard(skewed(f.engine, lateBy), shard, "in-doubt");
    expect(pass).toMatchObject({ outcome: "swept", lateLeft: 0 });
    const attempts = (await f.runs()).filter((r) => r.jobId === job.jobId).map((r) => r.attempt);
    expect(attempts.sort()).toEqual([1, 2]);
  }, 60_000);

  it("leaves a fire_all job's 3 hours of missed occurrences to the next pass, which runs each once", async ({
    onTestFinished,
  }) => {
    const { f, job, shard } = await oneShardJob(onTestFinished, { every: "PT1M" }, "fire_all");
    await dispatchShard(f.engine, shard, "before-outage");
    const first = await dispatchShard(skewed(f.engine, 180 * MINUTE), shard, "after-outage");
    expect(first).toMatchObject({ outcome: "swept", lateLeft: 1, skipped: 0 });
    await dispatchShard(skewed(f.engine, 181 * MINUTE), shard, "next");
    await dispatchShard(skewed(f.engine, 182 * MINUTE), shard, "after");
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    const times = runs.map((r) => Date.parse(r.scheduledFor)).sort((a, b) => a - b);
    expect(runs.filter((r) => r.status === "SKIPPED")).toEqual([]);
    expect(new Set(times).size).toBe(times.length);
    const first0 = times[0] ?? 0;
    const gaps = times.slice(1).filter((t, i) => t - (times[i] ?? 0) !== MINUTE);
    expect(gaps).toEqual([]);
    // Every minute from the first to 3 hours on, the pass's now (less the grace) at the least.
    expect((times.at(-1) ?? 0) - first0).toBeGreaterThanOrEqual(179 * MINUTE);
  }, 120_000);
});
