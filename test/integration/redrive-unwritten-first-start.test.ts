import { describe, expect, it } from "vitest";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import { createJob } from "../../shared/jobs/index.js";
import { setVisibility } from "../../shared/queue/work-queue.js";
import { getRun } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { createEngineFixture, testJob } from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";
import { redriven } from "../support/redriven.js";
import { waitFor } from "../support/wait.js";

/**
 * A message sent for a run never started whose first delivery held its start unwritten (takeRun)
 * and crashed leaves no trace: its later deliveries' starts alone count, maxReceiveCount − 1 of
 * them, and a run that crashed every one of them is DEAD.
 */
const LEASE_MS = 3000;

describe("a run whose first delivery crashed with its start unwritten, and every later one crashed", () => {
  it("is marked DEAD by the redrive DLQ consumer", async ({ onTestFinished }) => {
    const f = await createEngineFixture({ settings: { leaseMs: LEASE_MS }, maxReceiveCount: 2 });
    onTestFinished(() => f.destroy());
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(first.message.fence ?? 0).toBe(0);
    // Its worker died before the start it held unwritten was written.
    await setVisibility(f.engine.sqs, first.queueUrl, first.receiptHandle, 1);
    const second = await f.nextDeliveryOfRun(first.message);
    const started = await startRun(f.engine, second.message, "crash-2", new Date());
    expect(started.kind).toBe("started");
    await setVisibility(f.engine.sqs, second.queueUrl, second.receiptHandle, 1);
    const inDlq = await redriven(f, job.jobId, LEASE_MS + 10_000);
    await waitFor(
      "the crashed run's lease to lapse",
      async () =>
        ((await getRun(f.engine, first.message))?.leaseUntil ?? "") < new Date().toISOString(),
      10_000,
    );
    await handleCrashedRun(f.engine, inDlq.message, inDlq.receiveCount);
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "DEAD", fence: 1 });
  }, 40_000);
});
