import type { SQSBatchResponse, SQSRecord } from "aws-lambda";
import type { QueueUrls } from "../queue/work-queue.js";
import { decodeRunMessage, runKeysOf, sentAtOf } from "../queue/work-queue.js";
import { quotaWaitedMs } from "./hand-back.js";
import { processRun, type WorkerDeps } from "./worker.js";

/**
 * One batch from the SQS event source, as the Lambda worker gets it (with
 * ReportBatchItemFailures): its records run concurrently, and only those that
 * failed come back, each shown again a lease after its failure (`processRun`).
 */
export async function processRecords(
  deps: WorkerDeps,
  records: readonly SQSRecord[],
): Promise<SQSBatchResponse> {
  const results = await Promise.all(records.map((record) => processRecord(deps, record)));
  return { batchItemFailures: results.flatMap((id) => (id ? [{ itemIdentifier: id }] : [])) };
}

/** The record's message id when it failed, else null (acknowledged, or unreadable and dropped). */
async function processRecord(deps: WorkerDeps, record: SQSRecord): Promise<string | null> {
  const { log } = deps.engine.obs;
  const message = decodeRunMessage(record.body);
  if (message === null) {
    // Its body is logged because it is deleted: the log is all an operator has left of it.
    log.error("unreadable run message; dropped", {
      messageId: record.messageId,
      body: record.body.slice(0, 1024),
    });
    return null;
  }
  const arrivedAt = deps.engine.clock().getTime();
  const sent = sentAtOf(record.attributes.SentTimestamp);
  try {
    const disposition = await processRun(deps, {
      message,
      queueUrl: queueUrlOf(deps.engine.queues, record.eventSourceARN),
      receiptHandle: record.receiptHandle,
      messageId: record.messageId,
      receiveCount: Number(record.attributes.ApproximateReceiveCount) || 1,
      ...sent,
      // A message a worker loop handed back (its tenant's gate full) was out for the quota, up
      // to the hand-back's delay after it was sent.
      waitedForQuotaMs: quotaWaitedMs(message, { arrivedAt, ...sent }, arrivedAt),
    });
    return disposition === "ack" ? null : record.messageId;
  } catch (error) {
    log.error("run failed to process; SQS delivers it again a lease later", {
      messageId: record.messageId,
      ...runKeysOf(message),
      error: String(error),
    });
    return record.messageId;
  }
}

/** The queue URL of an event source ARN, from the configured URLs (the worker changes visibility by URL). */
function queueUrlOf(queues: QueueUrls, arn: string): string {
  const name = arn.split(":").at(-1) ?? "";
  const url = Object.values(queues).find((candidate) => candidate.endsWith(`/${name}`));
  if (!url) throw new Error(`message from an unknown queue ${arn}`);
  return url;
}
