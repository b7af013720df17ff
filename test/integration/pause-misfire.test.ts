import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Clock, offsetClock } from "../../shared/clock.js";
import type { JobContext, JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";

const MINUTE = 60_000;

/**
 * A per-minute job paused for 20 minutes: its first 13 or so occurrences were queued before the pause
 * (a claim's reach) and are parked as they come up; the rest are claimed by the resume. Each
 * misfire policy gives exactly its documented runs, whichever path an occurrence took.
 */
describe("a pause spanning 20 occurrences of a per-minute job, then a resume", () => {
  let f: EngineFixture;
  let ran: Record<string, string[]>;
  const handlers: Record<string, JobHandler> = {
    recorded: async (ctx: JobContext) => {
      const list = ran[ctx.jobId] ?? [];
      ran[ctx.jobId] = list;
      list.push(ctx.scheduledFor);
    },
  };
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const at = (ms: number): Clock => offsetClock(ms - Date.now());
  const deliver = (run: Run, clock: Clock) =>
    processRun(
      { ...f.workerDeps("w", handlers), engine: { ...f.engine, clock } },
      deliveryOfRun(f.engine, run),
    );
  const runsOf = async (jobId: string) =>
    (await f.runs())
      .filter((r) => r.jobId === jobId)
      .sort((a, b) => (a.scheduledFor < b.scheduledFor ? -1 : 1));

  for (const misfire of ["skip", "fire_once", "fire_all"] as MisfirePolicy[]) {
    it(`${misfire}: the runs the pause held back and those the resume claims`, async () => {
      ran = {};
      const startAt = Math.ceil((Date.now() + MINUTE) / MINUTE) * MINUTE;
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "recorded",
          schedule: { every: "PT1M", startAt: new Date(startAt).toISOString() },
          policies: { ...testJob().policies, misfire, overlap: "allow", maxConcurrent: 100 },
        }),
      );
      const claimed = (await runsOf(job.jobId)).filter((r) => r.status === "QUEUED");
      expect(claimed.length).toBeGreaterThanOrEqual(10);
      await pauseJob(f.engine, job.tenantId, job.jobId);
      // The queued runs come up while the job is paused: each is parked.
      for (const run of claimed) {
        const when = at(Date.parse(run.scheduledFor) + 1000);
        expect(await deliver(run, when)).toBe("ack");
      }
      expect((await runsOf(job.jobId)).filter((r) => r.status !== "QUEUED")).toEqual([]);
      // Resumed 20 minutes and 30 s after the first occurrence: startAt .. startAt+19m are past
      // the grace, startAt+20m is 30 s late (on time).
      const resumeAt = startAt + 20 * MINUTE + 30_000;
      await resumeJob({ ...f.engine, clock: at(resumeAt) }, job.tenantId, job.jobId);
      const due = (await runsOf(job.jobId)).filter(
        (r) => r.status === "QUEUED" && Date.parse(r.scheduledFor) <= resumeAt,
      );
      for (const run of due) expect(await deliver(run, at(resumeAt + 1000))).toBe("ack");

      const ended = (await runsOf(job.jobId)).filter(
        (r) => Date.parse(r.scheduledFor) <= startAt + 20 * MINUTE,
      );
      // Each occurrence once.
      expect(new Set(ended.map((r) => r.scheduledFor)).size).toBe(21);
      expect(ended).toHaveLength(21);
      const minute = (n: number) => new Date(startAt + n * MINUTE).toISOString();
      const expected =
        misfire === "skip"
          ? [minute(20)]
          : misfire === "fire_once"
            ? [minute(19), minute(20)]
            : Array.from({ length: 21 }, (_, n) => minute(n));
      expect([...(ran[job.jobId] ?? [])].sort()).toEqual(expected);
      expect(ended.filter((r) => r.status === "SUCCEEDED").map((r) => r.scheduledFor)).toEqual(
        expected,
      );
      expect(ended.filter((r) => r.status === "SKIPPED")).toHaveLength(21 - expected.length);
      for (const r of ended.filter((r) => r.status === "SKIPPED"))
        expect(r.reason).toMatch(/^misfire: /);
    }, 60_000);
  }
});

/**
 * The same job with its workers down for ten minutes (the dispatcher up: every occurrence was
 * queued on time): the workers judge each late start by the misfire policy.
 */
describe("a per-minute job whose workers were down for ten minutes", () => {
  let f: EngineFixture;
  let ran: string[];
  const handlers: Record<string, JobHandler> = {
    recorded: async (ctx: JobContext) => void ran.push(ctx.scheduledFor),
  };
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const at = (ms: number): Clock => offsetClock(ms - Date.now());

  for (const misfire of ["skip", "fire_once", "fire_all"] as MisfirePolicy[]) {
    it(`${misfire}: the runs started late`, async () => {
      ran = [];
      const startAt = Math.ceil((Date.now() + MINUTE) / MINUTE) * MINUTE;
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "recorded",
          schedule: { every: "PT1M", startAt: new Date(startAt).toISOString() },
          policies: { ...testJob().policies, misfire, overlap: "allow", maxConcurrent: 100 },
        }),
      );
      // Back 10 minutes 30 s after the first occurrence: it and the nine after it are more than
      // the grace late, the eleventh 30 s late. The workers take them in order.
      const backAt = at(startAt + 10 * MINUTE + 30_000);
      const queued = (await f.runs())
        .filter((r) => r.jobId === job.jobId && Date.parse(r.scheduledFor) <= startAt + 10 * MINUTE)
        .sort((a, b) => (a.scheduledFor < b.scheduledFor ? -1 : 1));
      expect(queued).toHaveLength(11);
      for (const run of queued)
        expect(
          await processRun(
            { ...f.workerDeps("w", handlers), engine: { ...f.engine, clock: backAt } },
            deliveryOfRun(f.engine, run),
          ),
        ).toBe("ack");
      const minute = (n: number) => new Date(startAt + n * MINUTE).toISOString();
      const expected =
        misfire === "skip"
          ? [minute(10)]
          : misfire === "fire_once"
            ? [minute(9), minute(10)]
            : Array.from({ length: 11 }, (_, n) => minute(n));
      expect(ran).toEqual(expected);
      const ended = (await f.runs()).filter((r) => queued.some((q) => q.runId === r.runId));
      const skipped = ended.filter((r) => r.status === "SKIPPED");
      expect(skipped).toHaveLength(11 - expected.length);
      for (const r of skipped) expect(r.reason).toMatch(/^misfire: started \d+ s late/);
    }, 60_000);
  }
});
