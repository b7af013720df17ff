import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Clock, offsetClock } from "../../shared/clock.js";
import type { Engine } from "../../shared/engine.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getJob } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";

const TENANT = "tenant-a";
const MINUTE = 60_000;

/**
 * A known limit (docs/architecture.md, "Known limits"; docs/api.md, "End conditions and
 * retention"): a claim counts every occurrence it plans toward `maxRuns`, a QUEUED run it replaces
 * too, so occurrences the old schedule queued that a new schedule has again are counted twice and
 * the job completes early, never late. Taking them off at the edit instead let a late claim, whose
 * misfire policy recorded them missed and uncounted, run past `maxRuns` (30 for 20).
 */
describe("maxRuns across a schedule edit whose new schedule has the queued occurrences", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());
  const withClock = (clock: Clock): Engine => ({ ...f.engine, clock });
  /** every PT1M from the whole minute t0 with maxRuns 20, created at t0: 14 occurrences queued. */
  const everyMinuteFrom = async (t0: number) =>
    (
      await createJob(
        withClock(() => new Date(t0)),
        testJob({
          type: "noop",
          schedule: { every: "PT1M", startAt: new Date(t0).toISOString() },
          maxRuns: 20,
        }),
      )
    ).job;

  it("counts them again: the job completes early, every run it queued runs, none beyond maxRuns", async () => {
    const t0 = Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE;
    const job = await everyMinuteFrom(t0);
    const created = await getJob(f.engine, job.jobId);
    // The same minutes, written as a cron: a new schedule to the edit, the same occurrences.
    await editJob(
      withClock(() => new Date(t0 + 10_000)),
      TENANT,
      job.jobId,
      1,
      {
        schedule: { cron: "* * * * *", timezone: "UTC" },
      },
    );
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    const occurrences = new Set(runs.map((r) => r.scheduledFor));
    const edited = await getJob(f.engine, job.jobId);
    expect(created?.occurrencesQueued).toBe(14);
    // Each queued run runs at its time (the cron has every one of these minutes).
    for (const run of runs.toSorted((a, b) => a.scheduledFor.localeCompare(b.scheduledFor))) {
      const at = offsetClock(Date.parse(run.scheduledFor) + 1000 - Date.now());
      await processRun(
        { ...f.workerDeps("w"), engine: withClock(at) },
        deliveryOfRun(f.engine, run),
      );
    }
    const ran = (await f.runs()).filter((r) => r.jobId === job.jobId && r.status === "SUCCEEDED");
    const after = await getJob(f.engine, job.jobId);
    const summary = {
      queuedCount: edited?.occurrencesQueued,
      distinctQueued: occurrences.size,
      statusAfterEdit: edited?.status,
      succeeded: ran.length,
      statusAfterRuns: after?.status,
    };
    // The create's 14 minutes, counted by its claim and again by the edit's, which replaces their
    // QUEUED runs and reaches 6 of them before the count is 20: 14 occurrences run, of 20.
    expect(summary).toEqual({
      queuedCount: 20,
      distinctQueued: 14,
      statusAfterEdit: "COMPLETED",
      succeeded: 14,
      statusAfterRuns: "COMPLETED",
    });
  });

  it("counts them again across a pause, an edit while paused and a resume", async () => {
    const t0 = Math.ceil((Date.now() + 60 * MINUTE) / MINUTE) * MINUTE;
    const job = await everyMinuteFrom(t0);
    await pauseJob(
      withClock(() => new Date(t0 + 5_000)),
      TENANT,
      job.jobId,
    );
    await editJob(
      withClock(() => new Date(t0 + 10_000)),
      TENANT,
      job.jobId,
      1,
      {
        schedule: { cron: "* * * * *", timezone: "UTC" },
      },
    );
    await resumeJob(
      withClock(() => new Date(t0 + 15_000)),
      TENANT,
      job.jobId,
    );
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    const resumed = await getJob(f.engine, job.jobId);
    expect({
      queuedCount: resumed?.occurrencesQueued,
      distinctQueued: new Set(runs.map((r) => r.scheduledFor)).size,
      status: resumed?.status,
    }).toEqual({ queuedCount: 20, distinctQueued: 14, status: "COMPLETED" });
  });
});
