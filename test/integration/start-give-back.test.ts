import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { describe, expect, it, type TestContext } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { ConcurrentUpdateError } from "../../shared/errors.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob } from "../../shared/jobs/index.js";
import { setVisibility } from "../../shared/queue/work-queue.js";
import { runKeyOf } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { countedJob, countedOneOffDueNow } from "../support/counted-runs.js";
import { deliverEach } from "../support/deliver-each.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";
import { runOf } from "../support/held-runs.js";
import { throttled, withJobReadHook } from "../support/job-reads-hook.js";

/**
 * A delivery whose message came back writes its start before it reads the job. Failing on storage
 * then, before the handler has the run, it gives the start back (QUEUED again): on every failure
 * that says storage failed for now, not throttling alone. Failing otherwise, or on a run an earlier
 * start handed to its async target or ran to a recorded version (that start's, not this one's), it
 * leaves the run RUNNING under its lapsing lease, as a crash does, for the redrive DLQ to count.
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

/** Failures that say storage failed for now, each as the SDK throws it past its retries. */
const storageFailures: readonly (readonly [string, () => Error])[] = [
  ["throttled past the SDK's retries", throttled],
  [
    "a 5xx",
    () =>
      Object.assign(new Error("Internal server error"), {
        name: "InternalServerError",
        $metadata: { httpStatusCode: 500 },
      }),
  ],
  [
    "a request timeout",
    () => Object.assign(new Error("Request timed out"), { name: "TimeoutError" }),
  ],
  ["contention past its attempts", () => new ConcurrentUpdateError("the job changed meanwhile")],
];

describe("a delivery that wrote its start and then failed before its handler had the run", () => {
  it.for(storageFailures)(
    "gives the start back when storage failed (%s): QUEUED, and the next delivery runs it",
    { timeout: 30_000 },
    async ([, failure], { onTestFinished }) => {
      const { f, engine, failing } = await failingJobReads(onTestFinished, failure);
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
    },
  );

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

const earlierStarts: readonly (readonly [string, string, Record<string, unknown>])[] = [
  ["handed it to its async target", "handedOverAt = :v", { ":v": new Date().toISOString() }],
  ["ran it to a recorded version", "executedVersion = :v", { ":v": 1 }],
];

describe("a redelivery that fails on storage after an earlier start", () => {
  it.for(earlierStarts)(
    "leaves the run RUNNING when that start %s",
    { timeout: 30_000 },
    async ([, set, values], { onTestFinished }) => {
      const { f, engine } = await failingJobReads(onTestFinished, throttled);
      const { job, worker, calls } = await countedOneOffDueNow(f);
      const queued = await runOf(f, job.jobId);
      // The earlier start, its worker gone since, its lease lapsed.
      const earlier = await startRun(
        f.engine,
        queued,
        "worker-gone",
        new Date(Date.now() - 60_000),
      );
      if (earlier.kind !== "started") throw new Error(`not started: ${earlier.kind}`);
      await f.engine.doc.send(
        new UpdateCommand({
          TableName: f.engine.tables.runs,
          Key: runKeyOf(queued),
          UpdateExpression: `SET ${set}`,
          ExpressionAttributeValues: values,
        }),
      );
      const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      await setVisibility(f.engine.sqs, first.queueUrl, first.receiptHandle, 0);
      const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(again.receiveCount).toBe(2);
      await expect(processRun({ ...worker, engine }, again)).rejects.toThrow("throughput");
      expect(calls.count).toBe(0);
      expect(await runOf(f, job.jobId)).toMatchObject({ status: "RUNNING", fence: 2 });
    },
  );
});

describe("a first delivery that fails on storage after taking its run, its start held unwritten", () => {
  it("leaves the run as it was, QUEUED under fence 0: it wrote no start to give back", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
    onTestFinished(() => f.destroy());
    const { job, worker, calls } = await countedJob(f, { every: "PT1H" });
    // The recurring job's admission (an UpdateItem of the job) throttled past the SDK's retries.
    const admissionThrottled = withFaults(f.engine, {
      operation: "UpdateItem",
      times: 100,
      match: (input) => input.TableName === f.engine.tables.jobs,
      error: throttled,
    });
    onTestFinished(() => admissionThrottled.destroy());
    const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(first.receiveCount).toBe(1);
    await expect(
      processRun({ ...worker, engine: admissionThrottled.engine }, first),
    ).rejects.toThrow("throughput");
    expect(admissionThrottled.injected.count).toBeGreaterThan(0);
    expect(calls.count).toBe(0);
    const run = await runOf(f, job.jobId);
    expect(run).toMatchObject({ status: "QUEUED", fence: 0 });
    expect(run.reason ?? "").not.toContain("released");
  }, 30_000);
});
