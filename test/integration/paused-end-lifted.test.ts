import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Clock } from "../../shared/clock.js";
import type { Engine } from "../../shared/engine.js";
import {
  createJob,
  editJob,
  type JobChanges,
  pauseJob,
  resumeJob,
} from "../../shared/jobs/index.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

const TENANT = "tenant-a";
const MINUTE = 60_000;

/**
 * An hourly job (maxRuns 5, one occurrence queued by its create) paused; while paused, one edit
 * brings its end to what was queued and a second lifts it again; then it is resumed. Expected: it
 * goes on at its next occurrence, as it would had neither edit been made.
 */
describe("an end reached by an edit while paused, then lifted by another edit while paused", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());
  const withClock = (clock: Clock): Engine => ({ ...f.engine, clock });

  /** The job as resumed after `lower` then `lift`, and its due entries; with its nextRunAt just before the resume. */
  const resumedAfter = async (lower: (t0: number) => JobChanges, lift: JobChanges) => {
    const t0 = Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE;
    const at = (minutes: number) => withClock(() => new Date(t0 + minutes * MINUTE));
    const { job } = await createJob(
      withClock(() => new Date(t0)),
      testJob({ type: "noop", schedule: { every: "PT1H" }, maxRuns: 5 }),
    );
    await pauseJob(at(1), TENANT, job.jobId);
    await editJob(at(2), TENANT, job.jobId, 1, lower(t0));
    await editJob(at(3), TENANT, job.jobId, 2, lift);
    const paused = await getJob(f.engine, job.jobId);
    await resumeJob(at(4), TENANT, job.jobId);
    const resumed = await getJob(f.engine, job.jobId);
    const entries = (await f.dueEntries()).filter((e) => e.jobId === job.jobId);
    return {
      pausedNextRunAt: paused?.nextRunAt ?? null,
      status: resumed?.status,
      nextRunAt: resumed?.nextRunAt ?? null,
      entries: entries.length,
      expected: {
        pausedNextRunAt: new Date(t0 + 60 * MINUTE).toISOString(),
        status: "ACTIVE",
        nextRunAt: new Date(t0 + 60 * MINUTE).toISOString(),
        entries: 1,
      },
    };
  };

  it("maxRuns lowered to what was queued, then removed: ACTIVE with its next occurrence pending, or it never runs again", async () => {
    const { expected, ...got } = await resumedAfter(() => ({ maxRuns: 1 }), { maxRuns: null });
    expect(got).toEqual(expected);
  });

  it.each([
    [
      "maxRuns lowered to what was queued, then raised to 10",
      () => ({ maxRuns: 1 }),
      { maxRuns: 10 },
    ],
    [
      "endAt moved before the next occurrence, then removed",
      (t0: number) => ({ endAt: new Date(t0 + 30 * MINUTE).toISOString() }),
      { endAt: null },
    ],
  ] as const)("%s: the resumed job goes on", async (_name, lower, lift) => {
    const { expected, ...got } = await resumedAfter(lower, lift);
    expect(got).toEqual(expected);
  });
});
