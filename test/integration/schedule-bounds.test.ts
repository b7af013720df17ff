import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

/**
 * Entries written before schedules were bounded (an every whose next occurrence lies past year
 * 9999, created with a later startAt) made every dispatcher pass of their shard throw, so other
 * jobs on the shard were claimed late. Their claims now end the schedule at its last storable
 * occurrence like any other.
 */
let f: EngineFixture;
let now = new Date();
beforeAll(async () => {
  f = await createEngineFixture({
    clock: () => now,
    settings: { shardCount: 1, maxShardCount: 1 },
  });
});
afterAll(() => f.destroy());

describe("a pass over an entry whose next occurrence lies past year 9999", () => {
  it("claims it and its neighbours, and the poisoned job ends after its one storable run", async () => {
    now = new Date(Math.floor(Date.now() / 1000) * 1000);
    const due = new Date(now.getTime() - 10_000);
    const [poisoned, neighbour] = await seedJobs(
      f,
      [
        {
          jobId: "poisoned",
          schedule: { every: "P600000W", startAt: due.toISOString() },
          dueAt: due,
        },
        { jobId: "neighbour", schedule: { every: "PT1H", startAt: due.toISOString() }, dueAt: due },
      ],
      now,
    );
    expect(poisoned && neighbour).toBeTruthy();

    const pass = await dispatchShard(f.engine, 0, "dispatcher");
    expect(pass).toMatchObject({ outcome: "swept", runs: 2 });

    const runs = await f.runs();
    expect(runs.map((r) => `${r.jobId} ${r.scheduledFor} ${r.status}`).sort()).toEqual([
      `neighbour ${due.toISOString()} QUEUED`,
      `poisoned ${due.toISOString()} QUEUED`,
    ]);
    const jobs = new Map((await f.jobs()).map((j) => [j.jobId, j]));
    expect(jobs.get("poisoned")).toMatchObject({
      status: "ACTIVE",
      nextRunAt: null,
      nextDueKey: null,
    });
    expect(jobs.get("neighbour")?.nextRunAt).toBe(
      new Date(due.getTime() + 3_600_000).toISOString(),
    );
    expect((await f.dueEntries()).map((e) => e.jobId)).toEqual(["neighbour"]);
  });
});
