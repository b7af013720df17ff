import { describe, expect, it } from "vitest";
import { ConcurrentUpdateError } from "../../shared/errors.js";
import { processRun } from "../../shared/execution/worker.js";
import { setVisibility } from "../../shared/queue/work-queue.js";
import { countedOneOffDueNow } from "../support/counted-runs.js";
import { createEngineFixture } from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";
import { withJobReadHook } from "../support/job-reads-hook.js";

/**
 * Every failure that says storage failed for now gives a written start back, not throttling
 * alone: a 5xx, a request that timed out, contention that outlasted its attempts. Left RUNNING,
 * the run would read to the redrive DLQ as a start that crashed its worker.
 */
const LEASE_MS = 3000;

const failures: readonly (readonly [string, () => Error])[] = [
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

describe("a delivery that wrote its start and then failed on storage before its handler", () => {
  it.for(failures)(
    "gives the start back on %s: QUEUED, and the next delivery runs it",
    { timeout: 30_000 },
    async ([, failure], { onTestFinished }) => {
      const f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
      onTestFinished(() => f.destroy());
      const failing = { on: true };
      const engine = withJobReadHook(f, onTestFinished, () => {
        if (failing.on) throw failure();
      });
      const { job, worker, calls } = await countedOneOffDueNow(f);
      for (let i = 0; i < 2; i++) {
        const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
        expect(delivery.receiveCount).toBe(i + 1);
        await expect(processRun({ ...worker, engine }, delivery)).rejects.toThrow();
        await setVisibility(f.engine.sqs, delivery.queueUrl, delivery.receiptHandle, 0);
      }
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
});
