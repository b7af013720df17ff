import { describe, expect, it } from "vitest";
import { processRun } from "../../shared/execution/worker.js";
import { cancelRun } from "../../shared/jobs/index.js";
import { countedOneOffDueNow } from "../support/counted-runs.js";
import { deliverEach } from "../support/deliver-each.js";
import { createEngineFixture } from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";
import { throttled, withJobReadHook } from "../support/job-reads-hook.js";

/**
 * The start give-back meets a cancel accepted while its delivery, having written its start, failed
 * on storage: the give-back's write fails on the cancel request (RunCancelledError), and the
 * delivery ends the run CANCELLED as the worker ends a cancel it meets on any other write of a run
 * it holds ("within a heartbeat", cancel-run.ts), rather than leave it RUNNING under its lease.
 * Storage is back by then: with it still failing, the run waits for its lease to lapse and the
 * next start to meet the cancel.
 */
const LEASE_MS = 3000;

describe("a cancel accepted while a delivery that wrote its start fails on storage", () => {
  it("ends the run CANCELLED when the delivery meets it on its give-back", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
    onTestFinished(() => f.destroy());
    const { job, worker: counting } = await countedOneOffDueNow(f);
    const cancelled = { done: false };
    // Once the start is written, a client cancels the run, then the job's read is throttled; the
    // reads after that one pass.
    const engine = withJobReadHook(f, onTestFinished, async () => {
      if (cancelled.done) return;
      const run = await runOf(f, job.jobId);
      if (run.status === "RUNNING" && !cancelled.done) {
        await cancelRun(f.engine, job.tenantId, job.jobId, run.runId);
        cancelled.done = true;
      }
      throw throttled();
    });
    const worker = { ...counting, engine };
    await deliverEach(f, job.jobId, 2, async (delivery, i) => {
      expect(delivery.receiveCount).toBe(i + 1);
      await expect(processRun(worker, delivery)).rejects.toThrow();
    });
    expect(cancelled.done).toBe(true);
    const run = await runOf(f, job.jobId);
    expect(run.cancelRequestedAt).toBeTruthy();
    expect(run.status).toBe("CANCELLED");
  }, 30_000);
});
