import { type ReceivedRun, setVisibility } from "../../shared/queue/work-queue.js";
import type { EngineFixture } from "./engine-fixture.js";

/**
 * `n` deliveries of the job's message on the normal queue, each handed to `check` (which processes
 * it and asserts what came of it; `index` counts from 0), each message shown again
 * `visibleAgainSeconds` after it (at once by default) as a lapsed lease would show it, unacknowledged.
 */
export async function deliverEach(
  f: EngineFixture,
  jobId: string,
  n: number,
  check: (delivery: ReceivedRun, index: number) => Promise<void>,
  { visibleAgainSeconds = 0 }: { readonly visibleAgainSeconds?: number } = {},
): Promise<void> {
  for (let i = 0; i < n; i++) {
    const delivery = await f.nextDelivery(f.engine.queues.normal, jobId);
    await check(delivery, i);
    await setVisibility(
      f.engine.sqs,
      delivery.queueUrl,
      delivery.receiptHandle,
      visibleAgainSeconds,
    );
  }
}
