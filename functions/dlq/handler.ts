import type { SQSBatchResponse, SQSEvent } from "aws-lambda";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import { decodeRunMessage } from "../../shared/queue/work-queue.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";

const obs = powertoolsObservability("scheduler-dlq");
const engine = engineFromEnv(obs);

/** Consumes the work queues' redrive DLQs: each message is a run that crashed its worker every time. */
export async function handler(event: SQSEvent): Promise<SQSBatchResponse> {
  const failures: { itemIdentifier: string }[] = [];
  try {
    for (const record of event.Records) {
      const message = decodeRunMessage(record.body);
      if (message === null) {
        obs.log.error("unreadable message in the DLQ; dropped", { messageId: record.messageId });
        continue;
      }
      try {
        await handleCrashedRun(
          engine,
          message,
          Number(record.attributes.ApproximateReceiveCount) || null,
        );
      } catch (error) {
        obs.log.error("could not dead-letter run", {
          messageId: record.messageId,
          error: String(error),
        });
        failures.push({ itemIdentifier: record.messageId });
      }
    }
    return { batchItemFailures: failures };
  } finally {
    obs.metrics.publishStoredMetrics();
  }
}
