import type { SQSBatchResponse, SQSEvent } from "aws-lambda";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import { decodeRunMessage, runKeysOf } from "../../shared/queue/work-queue.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";

const obs = powertoolsObservability("scheduler-dlq");
/** How much of a dropped message's body the log keeps. */
const UNREADABLE_BODY_LOGGED = 1024;
const engine = engineFromEnv(obs);

/** Consumes the work queues' redrive DLQs: each message is a run that crashed its worker every time. */
export async function handler(event: SQSEvent): Promise<SQSBatchResponse> {
  const failures: { itemIdentifier: string }[] = [];
  try {
    for (const record of event.Records) {
      const message = decodeRunMessage(record.body);
      if (message === null) {
        // Its body is logged because it is deleted: the log is all an operator has left of it.
        obs.log.error("unreadable message in the DLQ; dropped", {
          messageId: record.messageId,
          body: record.body.slice(0, UNREADABLE_BODY_LOGGED),
        });
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
          ...runKeysOf(message),
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
