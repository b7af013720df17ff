import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import type { Engine } from "../../shared/engine.js";
import { createJob } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

/**
 * A dispatcher pass on a host whose clock jumped ahead reads the shard from the line the last pass
 * recorded and meets entries that lie in the real future as overdue by its clock. Judged by it,
 * their misfire policy would record them SKIPPED (under `skip`; all but one under `fire_once`),
 * and the passes after it would go on from the entry its claim filed: those occurrences would never
 * run. A pass whose clock reads more than a tick and the misfire grace past the last pass's
 * leaves what it judges late to the next pass (`clockInDoubt`, shared/dispatch/pass-clock.ts).
 */
const MINUTE = 60_000;
const skewed = (engine: Engine, skewMs: number): Engine => ({
  ...engine,
  clock: offsetClock(skewMs),
});

let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
});
afterAll(() => f.destroy());

describe("one dispatcher pass on a clock 25 minutes ahead", () => {
  it.each([["skip"], ["fire_once"]] as const)(
    "leaves every occurrence of a per-minute job (%s) that is still in the future to run",
    async (misfire) => {
      const base = testJob({ schedule: { every: "PT1M" } });
      const { job } = await createJob(f.engine, {
        ...base,
        policies: { ...base.policies, misfire },
      });
      const shard = shardOf(job.jobId, 1);
      // A pass on the right clock (records the shard's line), then one on the host that jumped.
      await dispatchShard(f.engine, shard, `right-${misfire}`);
      const ahead = await dispatchShard(skewed(f.engine, 25 * MINUTE), shard, `ahead-${misfire}`);
      expect(ahead.outcome).toBe("swept");
      // The passes after it, on the right clock.
      await dispatchShard(f.engine, shard, `right-after-${misfire}`);

      const now = Date.now();
      const future = (await f.runs()).filter(
        (run) => run.jobId === job.jobId && Date.parse(run.scheduledFor) > now + MINUTE,
      );
      const skipped = future
        .filter((run) => run.status === "SKIPPED")
        .map(
          (run) =>
            `${run.scheduledFor} (${Math.round((Date.parse(run.scheduledFor) - now) / MINUTE)} min from now)`,
        );
      expect(skipped).toEqual([]);
      // It left the entry it found late by its clock (and any another case left) to the next pass.
      expect(ahead).toMatchObject({ skipped: 0 });
      expect("lateLeft" in ahead && ahead.lateLeft).toBeGreaterThan(0);
    },
    60_000,
  );
});

describe("one dispatcher pass on a clock 10 minutes ahead (misfire skip)", () => {
  it("leaves an hourly job's occurrence due in 8.5 minutes to the passes on the right clock, which queue it on time", async () => {
    // Past the create's fast path (the lookahead and 2 minutes: 7 minutes), so its entry waits for
    // the passes; a pass on the right clock does not reach it yet (its horizon is 5 minutes on).
    const startAt = new Date(Math.ceil((Date.now() + 8.5 * MINUTE) / 1000) * 1000);
    const base = testJob({ schedule: { every: "PT1H", startAt: startAt.toISOString() } });
    const { job } = await createJob(f.engine, {
      ...base,
      policies: { ...base.policies, misfire: "skip" },
    });
    const shard = shardOf(job.jobId, 1);
    const runsOfJob = async () => (await f.runs()).filter((run) => run.jobId === job.jobId);
    await dispatchShard(f.engine, shard, "right-hourly");
    expect(await runsOfJob()).toEqual([]);
    const ahead = await dispatchShard(skewed(f.engine, 10 * MINUTE), shard, "ahead-10");
    expect(await runsOfJob()).toEqual([]);
    expect(ahead).toMatchObject({ outcome: "swept", lateLeft: 1 });
    // The passes on the right clock: the one 4 minutes on (real time then) reaches it.
    await dispatchShard(skewed(f.engine, 4 * MINUTE), shard, "right-4");
    const [run] = await runsOfJob();
    expect({ scheduledFor: run?.scheduledFor, status: run?.status }).toEqual({
      scheduledFor: startAt.toISOString(),
      status: "QUEUED",
    });
  }, 60_000);
});

// After the cases above: its passes' clock goes 36 minutes on, past what they filed.
describe("the first pass after an outage of the passes", () => {
  it("leaves what fell due meanwhile to the next pass, which records it SKIPPED however long after it comes", async () => {
    const base = testJob({ schedule: { every: "PT1M" } });
    const { job } = await createJob(f.engine, {
      ...base,
      policies: { ...base.policies, misfire: "skip" },
    });
    const shard = shardOf(job.jobId, 1);
    const skippedOfJob = async () =>
      (await f.runs()).filter((run) => run.jobId === job.jobId && run.status === "SKIPPED");
    await dispatchShard(f.engine, shard, "before-outage");
    // 30 minutes without a pass: the first after it cannot tell its clock from one ahead.
    const first = await dispatchShard(skewed(f.engine, 30 * MINUTE), shard, "after-outage");
    expect(await skippedOfJob()).toEqual([]);
    // This job's entry and what the cases above left for later.
    expect(first).toMatchObject({ outcome: "swept", skipped: 0 });
    expect("lateLeft" in first && first.lateLeft).toBeGreaterThan(0);
    // The next comes 6 minutes on (ticks further apart than a tick and the grace): the last pass
    // left it the entry, so it judges by its own clock.
    const next = await dispatchShard(skewed(f.engine, 36 * MINUTE), shard, "next");
    expect(next).toMatchObject({ outcome: "swept", lateLeft: 0 });
    expect((await skippedOfJob()).length).toBeGreaterThan(15);
  }, 60_000);
});
