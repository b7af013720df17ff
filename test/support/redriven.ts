import { expect } from "vitest";
import { receiveRuns } from "../../shared/queue/work-queue.js";
import type { EngineFixture } from "./engine-fixture.js";
import { waitFor } from "./wait.js";

/**
 * Waits for SQS to move the job's message to the redrive DLQ and receives it there (a receive of
 * the work queue is what makes SQS move an over-received message), within `withinMs`.
 */
export async function redriven(f: EngineFixture, jobId: string, withinMs: number) {
  const inDlq = await waitFor(
    "the message in the DLQ",
    async () => {
      await receiveRuns(f.engine.sqs, f.engine.queues.normal, { max: 1, waitSeconds: 1 });
      const batch = await receiveRuns(f.engine.sqs, f.dlqUrl, { max: 10, waitSeconds: 0 });
      return batch.find((r) => r.message.jobId === jobId);
    },
    withinMs,
  );
  expect(inDlq.message.jobId).toBe(jobId);
  return inDlq;
}
