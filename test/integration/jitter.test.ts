import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import { bucketKey } from "../../shared/keys.js";
import { METRICS } from "../../shared/observability.js";
import { plannedTime } from "../../shared/schedule/index.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const WINDOW_MS = 30 * MINUTE;
// The first occurrence; the job id (from the fixed clock and random source) plans it 10+ minutes in.
const T = Date.UTC(2031, 0, 1);

describe("a job with a jitter window (every PT1H, window PT30M, misfire skip)", () => {
  let f: EngineFixture;
  let nowMs = T - 2 * HOUR;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { shardCount: 1, maxShardCount: 1 },
      clock: () => new Date(nowMs),
      random: () => 0.5,
    });
  });
  afterAll(() => f.destroy());

  it("files, claims, starts and measures each occurrence at its planned time; edits refile the pending one", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { every: "PT1H", startAt: new Date(T).toISOString() },
        window: "PT30M",
        policies: { ...testJob().policies, misfire: "skip" },
      }),
    );
    const occurrence = new Date(T);
    const planned = plannedTime(job.jobId, occurrence, WINDOW_MS, job.schedule);
    const offset = planned.getTime() - T;
    // The premise: the offset is past the lookahead and the grace, so planned time and occurrence
    // lead to different claims and different misfire decisions.
    expect(offset).toBeGreaterThan(10 * MINUTE);
    expect(offset).toBeLessThan(WINDOW_MS);
    expect(job.window).toBe("PT30M");
    expect(job.nextRunAt).toBe(occurrence.toISOString());

    // The due entry is filed at the planned time, in the planned time's bucket.
    const [entry] = await f.dueEntries();
    expect(entry).toMatchObject({
      scheduledFor: occurrence.toISOString(),
      dueAt: planned.toISOString(),
      window: "PT30M",
      key: { pk: bucketKey(planned, 0) },
    });

    // A minute before the occurrence, its planned time is still past the horizon: nothing is claimed.
    nowMs = T - MINUTE;
    expect((await dispatchShard(f.engine, 0, "d")).outcome).toBe("swept");
    expect(await f.runs()).toEqual([]);

    // At the planned time it is claimed, due then, and runs: not a misfire although the
    // occurrence is more than the grace ago, and its lag counts from the planned time.
    nowMs = planned.getTime();
    expect((await dispatchShard(f.engine, 0, "d")).outcome).toBe("swept");
    const [queued] = await f.runs();
    expect(queued).toMatchObject({
      status: "QUEUED",
      scheduledFor: occurrence.toISOString(),
      dueAt: planned.toISOString(),
      plannedFor: planned.toISOString(),
    });
    const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(delivery.message.dueAt).toBe(planned.toISOString());
    nowMs = planned.getTime() + 1_000;
    await f.process(f.workerDeps("w1"), delivery);
    const [ran] = await f.runs();
    expect(ran).toMatchObject({ status: "SUCCEEDED", plannedFor: planned.toISOString() });
    expect(f.metrics.sum(METRICS.schedulingLagMs)).toBe(1_000);

    // The next occurrence's entry waits at its own planned time.
    const second = new Date(T + HOUR);
    const [next] = await f.dueEntries();
    expect(next).toMatchObject({
      scheduledFor: second.toISOString(),
      dueAt: plannedTime(job.jobId, second, WINDOW_MS, job.schedule).toISOString(),
    });

    // An edit of the window refiles the pending occurrence under the new one; null removes it.
    const edited = await editJob(f.engine, "tenant-a", job.jobId, job.version, {
      window: "PT10M",
    });
    expect(edited.window).toBe("PT10M");
    const [refiled] = await f.dueEntries();
    expect(refiled).toMatchObject({
      scheduledFor: second.toISOString(),
      dueAt: plannedTime(job.jobId, second, 10 * MINUTE, job.schedule).toISOString(),
      window: "PT10M",
    });
    const cleared = await editJob(f.engine, "tenant-a", job.jobId, edited.version, {
      window: null,
    });
    expect(cleared.window).toBeNull();
    const dueEntries = await f.dueEntries();
    expect(dueEntries).toHaveLength(1);
    expect(dueEntries[0]).toMatchObject({
      scheduledFor: second.toISOString(),
      dueAt: second.toISOString(),
    });
  }, 60_000);
});
