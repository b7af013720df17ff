import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { readTickShards, shardsOf } from "../../shared/dispatch/tick-shards.js";
import type { Engine } from "../../shared/engine.js";
import { createJob } from "../../shared/jobs/index.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

/**
 * Adversarial review (h78): the shard count changed up, down and back while per-minute jobs are
 * due across each change, with two deploys' ticks (old count, new count) at once during a rolling
 * deploy. Every occurrence must be claimed exactly once: none lost, none twice.
 *
 * The file's requests are the runs claimed and the passes' reads of their buckets. A claim queues
 * 14 minutes ahead whatever the lookahead (CLAIM_REACH_SECONDS), so a 20 s job has 42 runs queued
 * from its first claim on. Each deploy creates a job in each phase's first minute (15 jobs with
 * the first four, about 900 runs), so every count's deploy still creates and claims; one each
 * minute (50 jobs, 2,700 runs) took 212 s of a loaded run. The phases stay four minutes: an entry
 * lost in one minute shows only once the runs claimed before it have run out, 14 minutes on. Each
 * tick passes over every shard up to the mark (5 from the second phase on), so ticks come only as
 * often as the lookaheads need for every entry to be claimed before it is due.
 */
const MINUTE = 60_000;

function deployedWith(engine: Engine, shards: number, offsetMs: number): Engine {
  // Each count's deploy has its own lookahead too (120 to 600 s), as a deploy may change both.
  const lookaheadMs = [120_000, 300_000, 600_000][shards % 3] ?? 300_000;
  return {
    ...engine,
    settings: { ...engine.settings, shardCount: shards, maxShardCount: shards, lookaheadMs },
    clock: offsetClock(offsetMs),
  };
}

/**
 * A tick's dispatcher passes (tickOnce without the reaper after them): every shard up to the
 * stage's high-water mark, read as tickOnce reads it; a pass that fails throws here. No worker
 * takes the queued runs, so from a lease past each run's due time the reaper re-sent it and moved
 * its deadline on, again at each doubled interval (about 4,900 of the file's 9,500 DynamoDB
 * requests and 490 of its 670 SQS ones), writing no field this file reads: which occurrences have
 * runs is the passes' and the creates' writes alone. shard-count.test.ts has the reaper's reading
 * of the shards above a lowered count.
 */
async function dispatchTick(engine: Engine, owner: string) {
  const shards = shardsOf(await readTickShards(engine, engine.clock()));
  return Promise.all(shards.map((shard) => dispatchShard(engine, shard, owner)));
}

let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture({ settings: { shardCount: 2, maxShardCount: 2 } });
});
afterAll(() => f.destroy());

describe("shard count changed up, down and back under two deploys' ticks at once", () => {
  it("claims every occurrence (per minute, per 20 s) exactly once, lookaheads differing too", async () => {
    // Phases, each some minutes of ticks: [counts ticking at once].
    const phases: number[][] = [[2], [2, 5], [5], [5, 1], [1], [1, 3], [3, 2]];
    const minutesPerPhase = 4;
    const jobs: string[] = [];
    const created = async (count: number, offset: number) => {
      const { job } = await createJob(
        deployedWith(f.engine, count, offset),
        testJob({ schedule: { every: jobs.length % 2 === 0 ? "PT1M" : "PT20S" } }),
      );
      jobs.push(job.jobId);
    };
    for (let i = 0; i < 4; i++) await created(2, 0);
    // The phase's deploys tick at its first and third minutes. The shortest lookahead (120 s) has
    // a pass's horizon reach the end of the minute 2 minutes on, so an entry a tick did not reach
    // lies past the next one, which claims it before it is due, as a tick a minute on would; the
    // claims, and where each files the job's next entry, are the same deploys' in each phase.
    let minute = 0;
    for (const counts of phases) {
      for (let m = 0; m < minutesPerPhase; m += 2) {
        const offset = (minute + m + 1) * MINUTE;
        // Each deploy's API creates a job in the phase's first minute.
        if (m === 0) for (const count of counts) await created(count, offset);
        await Promise.all(
          counts.map((count) =>
            dispatchTick(deployedWith(f.engine, count, offset), `tick-${count}-${minute + m + 1}`),
          ),
        );
      }
      minute += minutesPerPhase;
    }
    // Then the rolling deploy has ended: its new count ticks alone while a claim's reach (14
    // minutes) passes, so that an entry the counts' changes stranded, in a shard no tick reads (the
    // high-water mark passed over), shows as a job whose claims stop. Its ticks come 5 minutes
    // apart, not 1: the count's lookahead is 600 s, and a claim files the job's next entry 14
    // minutes on, so an entry a tick's horizon did not reach is more than 10 minutes off and the
    // next tick claims it before it is due, as one a minute on would; and at the end each job's
    // unclaimed entry lies past the last tick's horizon, its claimed runs reaching there.
    const last = phases[phases.length - 1]?.at(-1) ?? 2;
    for (let m = 0; m < 3; m++) {
      minute += 5;
      await dispatchTick(deployedWith(f.engine, last, minute * MINUTE), `tail-${minute}`);
    }
    const endMs = Date.now() + minute * MINUTE;
    const runs = (await f.runs()).filter((run) => run.attempt === 1);
    const problems: string[] = [];
    for (const jobId of jobs) {
      const times = runs
        .filter((run) => run.jobId === jobId)
        .map((run) => Date.parse(run.scheduledFor))
        .sort((a, b) => a - b);
      if (times.length < 5) problems.push(`${jobId}: only ${times.length} occurrences claimed`);
      const distinct = new Set(times);
      if (distinct.size !== times.length) problems.push(`${jobId}: duplicate occurrences`);
      for (let i = 1; i < times.length; i++) {
        const gap = (times[i] ?? 0) - (times[i - 1] ?? 0);
        const every = jobs.indexOf(jobId) % 2 === 0 ? MINUTE : 20_000;
        if (gap > every)
          problems.push(
            `${jobId}: gap of ${gap / MINUTE} min before ${new Date(times[i] ?? 0).toISOString()}`,
          );
      }
      const last = times[times.length - 1] ?? 0;
      // Claims reach a lookahead ahead: the latest claimed occurrence lies at or past the last tick.
      if (last < endMs - MINUTE)
        problems.push(
          `${jobId}: last claimed ${new Date(last).toISOString()}, ticks reached ${new Date(endMs).toISOString()}`,
        );
    }
    expect(problems).toEqual([]);
  }, 300_000);
});
