import type { TestContext } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import type { Engine } from "../../shared/engine.js";
import { createJob, type NewJob } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import { createEngineFixture, testJob } from "./engine-fixture.js";

/** The engine on a host whose clock reads `skewMs` ahead of the real one. */
export const skewed = (engine: Engine, skewMs: number): Engine => ({
  ...engine,
  clock: offsetClock(skewMs),
});

/** A fixture of the case's own on one shard, and a job of the schedule and misfire policy on it. */
export async function oneShardJob(
  onTestFinished: TestContext["onTestFinished"],
  schedule: NewJob["schedule"],
  misfire: MisfirePolicy,
) {
  const f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  onTestFinished(() => f.destroy());
  const base = testJob({ schedule });
  const { job } = await createJob(f.engine, { ...base, policies: { ...base.policies, misfire } });
  return { f, job, shard: shardOf(job.jobId, 1) };
}
