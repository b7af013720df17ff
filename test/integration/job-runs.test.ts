import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import { jobAsItStands } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";

/** Every minute: the job's next run comes soon, so a run's ending leaves the job's write to it. */
const MINUTELY = { cron: "* * * * *", timezone: "UTC" };
/** Its next run is far off: a run's ending writes the job at once. */
const YEARLY = { cron: "0 0 1 1 *", timezone: "UTC" };

describe("a frequent recurring run's ending writes the run alone", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  async function jobOf(jobId: string): Promise<Job> {
    const job = await getJob(f.engine, jobId);
    if (job === null) throw new Error(`job ${jobId} is gone`);
    return job;
  }

  /** Triggers a run of the job and has a worker (on `engine`) process its message to the end. */
  async function runOnce(job: Job, engine = f.engine): Promise<Run> {
    const run = await triggerJob(f.engine, job.tenantId, job.jobId);
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process({ ...f.workerDeps("worker"), engine }, received)).toBe("ack");
    const ended = (await f.runs()).find((r) => r.runId === run.runId);
    if (ended === undefined) throw new Error(`run ${run.runId} is gone`);
    return ended;
  }

  it("a run writes its job once, at its admission", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    // Counts the updates of the job item on a real client (the worker makes no other kind).
    const counted = createTestClients();
    const jobWrites: string[] = [];
    counted.doc.middlewareStack.add(
      (next) => async (args) => {
        const input: { TableName?: string; Key?: { pk?: unknown }; UpdateExpression?: string } =
          args.input as object;
        const ofTheJob =
          input.TableName === f.engine.tables.jobs && input.Key?.pk === `JOB#${job.jobId}`;
        if (ofTheJob && input.UpdateExpression !== undefined)
          jobWrites.push(String(input.UpdateExpression));
        return next(args);
      },
      { step: "initialize", name: "countJobWrites" },
    );
    try {
      const first = await runOnce(job, { ...f.engine, doc: counted.doc });
      expect(first.status).toBe("SUCCEEDED");
      expect(jobWrites).toHaveLength(1);
      expect(jobWrites[0]).toContain("activeRuns.#runId = :leaseUntil");
    } finally {
      counted.destroy();
    }
  });

  it("readers see it as lastRun at once; the next admission drops its entry and records it", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const first = await runOnce(job);
    expect(first.status).toBe("SUCCEEDED");

    const stored = await jobOf(job.jobId);
    expect(Object.keys(stored.activeRuns)).toEqual([first.runId]);
    expect(stored.lastRun).toBeNull();
    const shown = await jobAsItStands(f.engine, stored);
    expect(shown.activeRuns).toEqual({});
    expect(shown.lastRun).toEqual({
      runId: first.runId,
      status: "SUCCEEDED",
      scheduledFor: first.scheduledFor,
      attempt: 1,
      finishedAt: first.finishedAt,
    });

    const second = await runOnce(job);
    expect(second.status).toBe("SUCCEEDED");
    const after = await jobOf(job.jobId);
    expect(Object.keys(after.activeRuns)).toEqual([second.runId]);
    expect(after.lastRun?.runId).toBe(first.runId);
    expect((await jobAsItStands(f.engine, after)).lastRun?.runId).toBe(second.runId);
  });

  it("under overlap skip, a run right after an ended one starts, though that one's lease is live", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const first = await runOnce(job);
    const listed = (await jobOf(job.jobId)).activeRuns[first.runId] ?? "";
    expect(listed > f.engine.clock().toISOString()).toBe(true);
    const second = await runOnce(job);
    expect([first.status, second.status]).toEqual(["SUCCEEDED", "SUCCEEDED"]);
  });

  it("a stored lastRun that finished later than a listed run stays the job's lastRun", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: MINUTELY }));
    const listed = await runOnce(job);
    const stored = await jobOf(job.jobId);
    const later = {
      runId: "a-later-run",
      status: "FAILED" as const,
      scheduledFor: listed.scheduledFor,
      attempt: 1,
      finishedAt: new Date(Date.parse(listed.finishedAt ?? "") + 1).toISOString(),
    };
    const shown = await jobAsItStands(f.engine, { ...stored, lastRun: later });
    expect(shown.lastRun).toEqual(later);
    expect(shown.activeRuns).toEqual({});
  });

  it("a sparse schedule's run writes the job at once: lastRun does not wait for a run a year off", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: YEARLY }));
    const ran = await runOnce(job);
    const stored = await jobOf(job.jobId);
    expect(stored.activeRuns).toEqual({});
    expect(stored.lastRun).toMatchObject({ runId: ran.runId, status: "SUCCEEDED" });
  });
});
