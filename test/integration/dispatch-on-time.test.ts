import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { createJob } from "../../shared/jobs/index.js";
import { receiveRuns } from "../../shared/queue/work-queue.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

/**
 * A file of its own because it bounds a wall-clock lag: vitest.config.ts runs it in the `timed`
 * project, beside one other such file at most, while dispatch.test.ts's races run beside others.
 */
const SECOND = 1000;

describe("runs become visible on their second", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  async function visibleAt(
    queueUrl: string,
    deadline: number,
  ): Promise<{ at: number; dueAt: string }[]> {
    const seen: { at: number; dueAt: string }[] = [];
    while (Date.now() < deadline) {
      const batch = await receiveRuns(f.engine.sqs, queueUrl, { max: 10, waitSeconds: 1 });
      for (const r of batch) seen.push({ at: Date.now(), dueAt: r.message.dueAt });
    }
    return seen;
  }

  it("a job created inside the lookahead (fast path) and one swept by the dispatcher both appear within a second of due", async () => {
    const now = Date.now();
    const fastDue = new Date(now + 4 * SECOND);
    await createJob(
      f.engine,
      testJob({ schedule: { runAt: fastDue.toISOString() }, priority: "high" }),
    );
    // A due entry written straight into a bucket the dispatcher has not swept, then one pass.
    const sweptAt = new Date(now + 7 * SECOND);
    const [seeded] = await seedJobs(
      f,
      [
        {
          jobId: "swept",
          schedule: { every: "PT1H", startAt: sweptAt.toISOString() },
          dueAt: sweptAt,
        },
      ],
      new Date(now),
    );
    const sweptDue = seeded?.nextRunAt;
    const pass = await dispatchShard(f.engine, 0, "dispatcher");
    expect(pass.outcome).toBe("swept");

    const seenHigh = visibleAt(f.engine.queues.high, now + 7 * SECOND);
    const seenNormal = visibleAt(f.engine.queues.normal, now + 10 * SECOND);
    const [high, normal] = await Promise.all([seenHigh, seenNormal]);
    expect(high).toHaveLength(1);
    expect(normal).toHaveLength(1);
    expect(Math.abs((high[0]?.at ?? 0) - fastDue.getTime())).toBeLessThanOrEqual(1000 + 250);
    expect(normal[0]?.dueAt).toBe(sweptDue);
    expect(Math.abs((normal[0]?.at ?? 0) - Date.parse(sweptDue ?? ""))).toBeLessThanOrEqual(
      1000 + 250,
    );
  }, 30_000);
});
