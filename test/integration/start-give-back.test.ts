import { describe, expect, it, type TestContext } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob } from "../../shared/jobs/index.js";
import { deliverEach } from "../support/deliver-each.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";
import { withJobReadHook } from "../support/job-reads-hook.js";

/**
 * A delivery whose message came back writes its start before it reads the job. Failing on storage
 * then, before the handler has the run, it gives the start back (QUEUED again); failing otherwise,
 * it leaves the run RUNNING under its lapsing lease, as a crash does, for the redrive DLQ to count.
 */
const LEASE_MS = 3000;

/** A fixture, and its engine whose jobs-table reads fail with `failure()` while `failing.on` is set. */
async function failingJobReads(
  onTestFinished: TestContext["onTestFinished"],
  failure: () => Error,
): Promise<{ f: EngineFixture; engine: Engine; failing: { on: boolean } }> {
  const f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
  onTestFinished(() => f.destroy());
  const failing = { on: true };
  const engine = withJobReadHook(f, onTestFinished, () => {
    if (failing.on) throw failure();
  });
  return { f, engine, failing };
}

/**
 * A one-off due now whose handler counts its calls, delivered twice to a worker on `engine`: the
 * first delivery fails before any start, the second (its message came back) after writing its start.
 */
async function secondDeliveryFails(f: EngineFixture, engine: Engine) {
  const calls = { count: 0 };
  const handlers = {
    counted: async () => {
      calls.count++;
    },
  };
  const worker = { ...f.workerDeps("worker", handlers), engine };
  const { job } = await createJob(
    f.engine,
    testJob({ type: "counted", schedule: { runAt: new Date().toISOString() }, timeoutSeconds: 30 }),
  );
  await deliverEach(f, job.jobId, 2, async (delivery, i) => {
    expect(delivery.receiveCount).toBe(i + 1);
    await expect(processRun(worker, delivery)).rejects.toThrow();
  });
  return { job, worker: f.workerDeps("worker", handlers), calls };
}

describe("a delivery that wrote its start and then failed before its handler had the run", () => {
  it("gives the start back when storage failed (throttled past the SDK's retries): QUEUED, and the next delivery runs it", async ({
    onTestFinished,
  }) => {
    const { f, engine, failing } = await failingJobReads(onTestFinished, () =>
      Object.assign(new Error("The level of configured provisioned throughput was exceeded"), {
        name: "ProvisionedThroughputExceededException",
      }),
    );
    const { job, worker, calls } = await secondDeliveryFails(f, engine);
    expect(await runOf(f, job.jobId)).toMatchObject({
      status: "QUEUED",
      fence: 1,
      reason: "released: its delivery failed on storage before running it",
    });
    failing.on = false;
    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(worker, again)).toBe("ack");
    expect(calls.count).toBe(1);
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 2 });
  }, 30_000);

  it("leaves it RUNNING under its lease when the failure says nothing of storage, as a crash does", async ({
    onTestFinished,
  }) => {
    const { f, engine } = await failingJobReads(
      onTestFinished,
      () => new Error("Cannot read properties of undefined"),
    );
    const { job, calls } = await secondDeliveryFails(f, engine);
    expect(calls.count).toBe(0);
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "RUNNING", fence: 1 });
  }, 30_000);
});
