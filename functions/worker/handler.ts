import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import { asyncCallbacksFrom } from "../../shared/execution/async-callbacks.js";
import { builtInJobTypes } from "../../shared/execution/built-in-handlers.js";
import { handlerRegistry } from "../../shared/execution/job-contract.js";
import { allowPrivateTargetsFrom } from "../../shared/execution/private-targets.js";
import { processRun } from "../../shared/execution/worker.js";
import { decodeRunMessage } from "../../shared/queue/work-queue.js";
import { engineFromEnv, powertoolsObservability } from "../../shared/runtime.js";
import { cachedSigningSecrets } from "../../shared/webhooks/secrets.js";
import { customJobTypes } from "./handlers/index.js";

const obs = powertoolsObservability("scheduler-worker");
const engine = engineFromEnv(obs);
const handlers = handlerRegistry([
  ...builtInJobTypes(
    {
      signingSecrets: cachedSigningSecrets(engine),
      allowPrivateTargets: allowPrivateTargetsFrom(process.env, false),
      ...asyncCallbacksFrom(process.env, engine.settings),
    },
    engine.clock,
  ),
  ...customJobTypes,
]);

/** SQS event source with ReportBatchItemFailures: only the records that failed come back. */
export async function handler(event: SQSEvent, context: Context): Promise<SQSBatchResponse> {
  const deps = {
    engine,
    handlers,
    workerId: `lambda:${context.awsRequestId}`,
    remainingMs: () => context.getRemainingTimeInMillis(),
  };
  try {
    const results = await Promise.all(event.Records.map((record) => processRecord(deps, record)));
    return { batchItemFailures: results.flatMap((id) => (id ? [{ itemIdentifier: id }] : [])) };
  } finally {
    obs.metrics.publishStoredMetrics();
  }
}

async function processRecord(
  deps: Parameters<typeof processRun>[0],
  record: SQSRecord,
): Promise<string | null> {
  const message = decodeRunMessage(record.body);
  if (message === null) {
    obs.log.error("unreadable run message; dropped", { messageId: record.messageId });
    return null;
  }
  try {
    const disposition = await processRun(deps, {
      message,
      queueUrl: queueUrlOf(record.eventSourceARN),
      receiptHandle: record.receiptHandle,
      messageId: record.messageId,
      receiveCount: Number(record.attributes.ApproximateReceiveCount) || 1,
    });
    return disposition === "ack" ? null : record.messageId;
  } catch (error) {
    obs.log.error("run failed to process; SQS will deliver it again", {
      messageId: record.messageId,
      error: String(error),
    });
    return record.messageId;
  }
}

/** The queue URL of an event source ARN, from the configured URLs (the worker changes visibility by URL). */
function queueUrlOf(arn: string): string {
  const name = arn.split(":").at(-1) ?? "";
  const url = Object.values(engine.queues).find((candidate) => candidate.endsWith(`/${name}`));
  if (!url) throw new Error(`message from an unknown queue ${arn}`);
  return url;
}
