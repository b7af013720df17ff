import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Clock, offsetClock } from "../../shared/clock.js";
import type { JobContext, JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import type { RetryPolicy } from "../../shared/retry.js";
import { getJob } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";

/**
 * A pending retry runs the job's definition as it is when it starts (docs/api.md, "Editing a
 * job"): its failure is decided by the retry policy an edit made while it waited.
 */
describe("an edit of the retry policy while a retry is pending", () => {
  let f: EngineFixture;
  const handlers: Record<string, JobHandler> = {
    failing: async (_ctx: JobContext) => {
      throw new Error("target down");
    },
  };
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const at = (ms: number): Clock => offsetClock(ms - Date.now());
  const deliver = (run: Run) =>
    processRun(
      { ...f.workerDeps("w", handlers), engine: { ...f.engine, clock: at(Date.parse(run.dueAt)) } },
      deliveryOfRun(f.engine, run),
    );
  const runsOf = async (jobId: string) =>
    (await f.runs()).filter((r) => r.jobId === jobId).sort((a, b) => a.attempt - b.attempt);

  async function failingOneOff(retry: RetryPolicy) {
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "failing",
        schedule: { runAt: new Date().toISOString() },
        policies: { ...testJob().policies, retry },
      }),
    );
    return job;
  }

  /** Delivers the job's attempts in turn until none is left queued. */
  async function runOut(jobId: string, edit?: { afterAttempt: number; retry: RetryPolicy }) {
    for (;;) {
      const next = (await runsOf(jobId)).find((r) => r.status === "QUEUED");
      if (!next) return runsOf(jobId);
      expect(await deliver(next)).toBe("ack");
      if (edit && next.attempt === edit.afterAttempt) {
        const job = await getJob(f.engine, jobId);
        if (!job) throw new Error("job gone");
        await editJob(f.engine, job.tenantId, jobId, job.version, {
          policies: { ...job.policies, retry: edit.retry },
        });
      }
    }
  }

  it("lowering maxAttempts under the pending attempt: that attempt is the last", async () => {
    const job = await failingOneOff({ maxAttempts: 5, initialDelayMs: 1000, maxDelayMs: 1000 });
    const runs = await runOut(job.jobId, {
      afterAttempt: 1,
      retry: { maxAttempts: 2, initialDelayMs: 1000, maxDelayMs: 1000 },
    });
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "DEAD"],
    ]);
    expect(runs[1]?.reason ?? runs[1]?.error).toMatch(/gave up after 2 attempts/);
  });

  it("raising maxAttempts while the last attempt is pending: it retries up to the new count", async () => {
    const job = await failingOneOff({ maxAttempts: 2, initialDelayMs: 1000, maxDelayMs: 1000 });
    const runs = await runOut(job.jobId, {
      afterAttempt: 1,
      retry: { maxAttempts: 4, initialDelayMs: 1000, maxDelayMs: 1000 },
    });
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "FAILED"],
      [3, "FAILED"],
      [4, "DEAD"],
    ]);
  });

  it("a new backoff applies to the pending attempt's failure, not to the delay already drawn", async () => {
    const job = await failingOneOff({ maxAttempts: 3, initialDelayMs: 1000, maxDelayMs: 1000 });
    const runs = await runOut(job.jobId, {
      afterAttempt: 1,
      retry: { maxAttempts: 3, initialDelayMs: 600_000, maxDelayMs: 600_000 },
    });
    const [first, second] = runs;
    if (!first?.finishedAt || !second?.finishedAt) throw new Error("missing attempts");
    expect(Date.parse(second.dueAt) - Date.parse(first.finishedAt)).toBeLessThanOrEqual(1000);
    // Attempt 3 waits out the new backoff (up to 600 s: past the fast path, a retry entry).
    expect(runs.map((r) => [r.attempt, r.status])).toEqual([
      [1, "FAILED"],
      [2, "FAILED"],
    ]);
    const retry = (await f.dueEntries()).find((d) => d.jobId === job.jobId && d.kind === "retry");
    expect(retry?.attempt).toBe(3);
    const delay = Date.parse(retry?.dueAt ?? "") - Date.parse(second.finishedAt);
    expect(delay).toBeGreaterThanOrEqual(0);
    expect(delay).toBeLessThanOrEqual(600_000);
  });
});
