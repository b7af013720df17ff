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
    // Each delay drawn near the top of its jitter range, so the policy that drew it shows.
    f = await createEngineFixture({ random: () => 0.999 });
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
    const [first] = await runsOf(job.jobId);
    if (!first) throw new Error("no first attempt");
    expect(await deliver(first)).toBe("ack");
    const current = await getJob(f.engine, job.jobId);
    if (!current) throw new Error("job gone");
    await editJob(f.engine, job.tenantId, job.jobId, current.version, {
      policies: {
        ...current.policies,
        retry: { maxAttempts: 3, initialDelayMs: 600_000, maxDelayMs: 600_000 },
      },
    });
    const second = (await runsOf(job.jobId)).find((r) => r.attempt === 2);
    if (!second) throw new Error("no second attempt");
    expect(await deliver(second)).toBe("ack");
    const runs = await runsOf(job.jobId);
    const [ended1, ended2] = runs;
    if (!ended1?.finishedAt || !ended2?.finishedAt) throw new Error("attempts not ended");
    expect([ended1.status, ended2.status]).toEqual(["FAILED", "FAILED"]);
    // The delay drawn before the edit stands; attempt 3's is drawn under the new policy: up to
    // 600 s, drawn near the top (a retry entry, past the fast path's window, or a queued run).
    expect(Date.parse(ended2.dueAt) - Date.parse(ended1.finishedAt)).toBeLessThanOrEqual(1000);
    const third =
      runs.find((r) => r.attempt === 3)?.dueAt ??
      (await f.dueEntries()).find((d) => d.jobId === job.jobId && d.kind === "retry")?.dueAt;
    if (third === undefined) throw new Error("no third attempt");
    const delay = Date.parse(third) - Date.parse(ended2.finishedAt);
    expect(delay).toBeGreaterThan(500_000);
    expect(delay).toBeLessThanOrEqual(600_000);
  });
});
