import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { tickOnce } from "../../shared/dispatch/tick.js";
import type { Engine } from "../../shared/engine.js";
import { createJob } from "../../shared/jobs/index.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

/**
 * Adversarial review (h78): the shard count changed up, down and back while per-minute jobs are
 * due across each change, with two deploys' ticks (old count, new count) at once during a rolling
 * deploy. Every occurrence must be claimed exactly once: none lost, none twice.
 *
 * The runs claimed are most of the file's time: a claim queues 14 minutes ahead whatever the
 * lookahead (CLAIM_REACH_SECONDS), so a 20 s job has 42 runs queued from its first claim on. Each
 * deploy creates a job in each phase's first minute (15 jobs with the first four, about 900 runs),
 * so every count's deploy still creates and claims; one each minute (50 jobs, 2,700 runs)
 * took 212 s of a loaded run. The phases stay four minutes: an entry lost in one minute shows only
 * once the runs claimed before it have run out, 14 minutes on.
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
    let minute = 0;
    for (const counts of phases) {
      for (let m = 0; m < minutesPerPhase; m++) {
        minute += 1;
        const offset = minute * MINUTE;
        // Each deploy's API creates a job in the phase's first minute.
        if (m === 0) for (const count of counts) await created(count, offset);
        const ticks = await Promise.all(
          counts.map((count) =>
            tickOnce(deployedWith(f.engine, count, offset), `tick-${count}-${minute}`),
          ),
        );
        for (const tick of ticks) {
          for (const pass of tick.passes) expect(pass.outcome).not.toBe("failed");
        }
      }
    }
    // Then the rolling deploy has ended: its new count ticks alone while a claim's reach (14
    // minutes) passes, so that an entry the counts' changes stranded, in a shard no tick reads (the
    // high-water mark passed over), shows as a job whose claims stop.
    const last = phases[phases.length - 1]?.at(-1) ?? 2;
    for (let m = 0; m < 15; m++) {
      minute += 1;
      const tick = await tickOnce(deployedWith(f.engine, last, minute * MINUTE), `tail-${minute}`);
      for (const pass of tick.passes) expect(pass.outcome).not.toBe("failed");
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
