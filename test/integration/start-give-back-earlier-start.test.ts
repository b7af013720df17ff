import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { describe, expect, it } from "vitest";
import { processRun } from "../../shared/execution/worker.js";
import { setVisibility } from "../../shared/queue/work-queue.js";
import { runKeyOf } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { countedOneOffDueNow } from "../support/counted-runs.js";
import { createEngineFixture } from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";
import { throttled, withJobReadHook } from "../support/job-reads-hook.js";

/**
 * A start given back on a storage failure is one that never had the run run: a run an earlier
 * start handed to its async target, or ran to a recorded version, is that start's, and the
 * redelivery that fails on storage leaves it RUNNING, as a crash does.
 */
const LEASE_MS = 3000;

const earlierStarts: readonly (readonly [string, string, Record<string, unknown>])[] = [
  ["handed it to its async target", "handedOverAt = :v", { ":v": new Date().toISOString() }],
  ["ran it to a recorded version", "executedVersion = :v", { ":v": 1 }],
];

describe("a redelivery that fails on storage after an earlier start", () => {
  it.for(earlierStarts)(
    "leaves the run RUNNING when that start %s",
    { timeout: 30_000 },
    async ([, set, values], { onTestFinished }) => {
      const f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
      onTestFinished(() => f.destroy());
      const engine = withJobReadHook(f, onTestFinished, () => {
        throw throttled();
      });
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
