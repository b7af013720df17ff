import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Clock, offsetClock } from "../../shared/clock.js";
import type { JobContext, JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { getJob } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

/**
 * fire_once at a late start runs the most recent missed occurrence. A job whose end condition
 * (maxRuns, endAt) completed it has no occurrences after its last queued one: that one is the
 * most recent, however far its schedule goes on.
 */
describe("fire_once after a worker outage, on a job its end completed", () => {
  let f: EngineFixture;
  let ran: string[];
  const handlers: Record<string, JobHandler> = {
    recorded: async (ctx: JobContext) => void ran.push(ctx.runId),
  };

  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** A clock that reads `ms` (epoch) now and runs on from there. */
  const at = (ms: number): Clock => offsetClock(ms - Date.now());
  /** One delivery of a run's message to a worker whose clock reads `clock`. */
  const deliver = (run: Run, clock: Clock) =>
    processRun(
      { ...f.workerDeps("w", handlers), engine: { ...f.engine, clock } },
      deliveryOfRun(f.engine, run),
    );
  const runsOf = async (jobId: string) =>
    (await f.runs())
      .filter((r) => r.jobId === jobId)
      .sort((a, b) => (a.scheduledFor < b.scheduledFor ? -1 : 1));

  for (const [end, label] of [
    [{ maxRuns: 3 }, "maxRuns"],
    [{ endAt: "+2 min" }, "endAt"],
  ] as const) {
    it(`${label}: of its three queued runs, started ten minutes late, the last runs`, async () => {
      ran = [];
      const startAt = Math.ceil((Date.now() + MINUTE) / 1000) * 1000;
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "recorded",
          schedule: { every: "PT1M", startAt: new Date(startAt).toISOString() },
          ...("maxRuns" in end
            ? { maxRuns: end.maxRuns }
            : { endAt: new Date(startAt + 2 * MINUTE).toISOString() }),
        }),
      );
      // The create's claim queued all three: the end completed the job.
      expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
      const queued = await runsOf(job.jobId);
      expect(queued.map((r) => r.status)).toEqual(["QUEUED", "QUEUED", "QUEUED"]);

      // The workers were down: every run starts ten minutes after the last occurrence.
      const late = at(startAt + 12 * MINUTE);
      for (const run of queued) expect(await deliver(run, late)).toBe("ack");

      const ended = await runsOf(job.jobId);
      expect(ended.map((r) => r.status)).toEqual(["SKIPPED", "SKIPPED", "SUCCEEDED"]);
      expect(ran).toEqual([queued[2]?.runId]);
    });
  }
});

/** fire_once when a claim comes late (a resume, a dispatcher outage) past the job's endAt. */
describe("fire_once resumed past the job's endAt", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("runs the last occurrence up to endAt, records the earlier ones skipped, and completes", async () => {
    const startAt = Math.ceil((Date.now() + 2 * HOUR) / 1000) * 1000;
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { every: "PT1H", startAt: new Date(startAt).toISOString() },
        endAt: new Date(startAt + 2 * HOUR).toISOString(),
      }),
    );
    await pauseJob(f.engine, "tenant-a", job.jobId);
    // Resumed five hours after the first occurrence: its three occurrences (the last at endAt) and
    // two after endAt have passed.
    await resumeJob(engineAt(f.engine, startAt + 5 * HOUR), "tenant-a", job.jobId);

    const runs = (await f.runs())
      .filter((r) => r.jobId === job.jobId)
      .sort((a, b) => (a.scheduledFor < b.scheduledFor ? -1 : 1));
    expect(runs.map((r) => [r.scheduledFor, r.status])).toEqual([
      [new Date(startAt).toISOString(), "SKIPPED"],
      [new Date(startAt + HOUR).toISOString(), "SKIPPED"],
      [new Date(startAt + 2 * HOUR).toISOString(), "QUEUED"],
    ]);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  });
});
