import { createHash } from "node:crypto";
import {
  ChangeMessageVisibilityBatchCommand,
  ChangeMessageVisibilityCommand,
  DeleteMessageBatchCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { longPollTimeoutMs } from "../aws.js";
import { MAX_SQS_DELAY_SECONDS } from "../config.js";
import { JOB_ID_PATTERN, MAX_ATTEMPT, runId, runSortKey } from "../keys.js";
import type { Priority } from "../model.js";
import { type RunLogKeys, runLogKeys } from "../observability.js";
import type { RunMessage } from "./run-message.js";

export type QueueUrls = Readonly<Record<Priority, string>>;

/** A run message with when it should become visible. */
export interface OutgoingRun {
  readonly message: RunMessage;
  readonly dueAt: Date;
}

export interface ReceivedRun {
  readonly message: RunMessage;
  readonly queueUrl: string;
  readonly receiptHandle: string;
  readonly messageId: string;
  readonly receiveCount: number;
  /** When it was sent to SQS (its SentTimestamp, epoch ms); absent where SQS did not say. */
  readonly sentAt?: number;
  /** The visibility it was received with, when the receiver chose one; else the queue's default. */
  readonly visibilitySeconds?: number;
  /**
   * How long its run waited for its tenant's concurrent-runs quota before it was taken to start
   * (`quotaWaitedMs`): held at a worker loop's gate, and out in SQS since a loop handed it back
   * (`quotaWaitSince`) up to 60 s after it was sent, whichever worker received it. A wait for the quota is not lateness (the
   * misfire policy does not count it).
   */
  readonly waitedForQuotaMs?: number;
}

/** SQS takes at most this many messages a batch request and returns at most this many a receive. */
export const SQS_BATCH = 10;

/**
 * Whole seconds of SQS delay for a run due at `dueAt`. Rounded down so the
 * message is visible at most one second early; the worker waits out the
 * remainder, which puts the start on its second rather than up to a second late.
 */
export function delaySecondsFor(dueAt: Date, now: Date): number {
  const seconds = Math.floor((dueAt.getTime() - now.getTime()) / 1000);
  return Math.min(MAX_SQS_DELAY_SECONDS, Math.max(0, seconds));
}

export function encodeRunMessage(message: RunMessage): string {
  return JSON.stringify(message);
}

/**
 * Whether a run could have this key: a message whose key no run can have (sent by no scheduler
 * process: an operator's test message, another system's) would make every reader of the run throw,
 * and the worker and the DLQ consumer hand it back to SQS for good, instead of dropping it.
 */
function namesARun(jobId: string, scheduledFor: string, attempt: number): boolean {
  if (!JOB_ID_PATTERN.test(jobId) || !Number.isInteger(attempt)) return false;
  if (attempt < 1 || attempt > MAX_ATTEMPT) return false;
  try {
    runSortKey(scheduledFor, attempt);
    return true;
  } catch {
    return false;
  }
}

/** Parses a message body; returns null for anything that is not a run message (poison). */
export function decodeRunMessage(body: string | undefined): RunMessage | null {
  if (body === undefined) return null;
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return null;
  }
  if (typeof value !== "object" || value === null) return null;
  const v = value as Record<string, unknown>;
  if (
    typeof v.jobId !== "string" ||
    typeof v.scheduledFor !== "string" ||
    typeof v.dueAt !== "string" ||
    typeof v.attempt !== "number" ||
    typeof v.jobVersion !== "number" ||
    (v.priority !== "high" && v.priority !== "normal" && v.priority !== "low") ||
    (v.fence !== undefined &&
      !(typeof v.fence === "number" && Number.isInteger(v.fence) && v.fence >= 0)) ||
    !namesARun(v.jobId, v.scheduledFor, v.attempt) ||
    !Number.isFinite(Date.parse(v.dueAt))
  ) {
    return null;
  }
  return {
    jobId: v.jobId,
    scheduledFor: v.scheduledFor,
    dueAt: v.dueAt,
    attempt: v.attempt,
    jobVersion: v.jobVersion,
    priority: v.priority,
    ...(typeof v.fence === "number" && v.fence > 0 ? { fence: v.fence } : {}),
    tenantId: typeof v.tenantId === "string" ? v.tenantId : "",
    // Only a time: anything else is no wait to count (the run is judged as it arrives).
    ...(typeof v.quotaWaitSince === "string" && Number.isFinite(Date.parse(v.quotaWaitSince))
      ? { quotaWaitSince: v.quotaWaitSince }
      : {}),
  };
}

/** The log keys of the run a message is of (runLogKeys), for a line about the message. */
export function runKeysOf(message: RunMessage): RunLogKeys {
  return runLogKeys({
    ...message,
    runId: runId(message.jobId, message.scheduledFor, message.attempt),
  });
}

/**
 * Sends runs to the queue of their priority, ten to a batch, each delayed to its due second and
 * in the message group of its tenant: on a standard queue that makes it an SQS fair queue, which
 * hands out the messages of a tenant with a backlog behind those of quieter tenants. Throws the
 * first batch's failure once every batch has been tried.
 */
export async function sendRuns(
  sqs: SQSClient,
  queues: QueueUrls,
  runs: readonly OutgoingRun[],
  now: Date,
): Promise<void> {
  const { failure } = await sendRunsSettled(sqs, queues, runs, now);
  if (failure) throw failure.error;
}

/**
 * What `sendRuns` does, answering which runs were not sent rather than throwing: those SQS refused
 * after three rounds, and every run of a batch whose request failed (sent or not, unknown: taken
 * as not), with the first batch's failure. The runs are those given (the same objects).
 */
export async function sendRunsSettled(
  sqs: SQSClient,
  queues: QueueUrls,
  runs: readonly OutgoingRun[],
  now: Date,
): Promise<{
  readonly unsent: readonly OutgoingRun[];
  readonly failure: { readonly error: unknown } | null;
}> {
  const byQueue = new Map<string, OutgoingRun[]>();
  for (const run of runs) {
    const url = queues[run.message.priority];
    const list = byQueue.get(url) ?? [];
    list.push(run);
    byQueue.set(url, list);
  }
  const sends: Promise<BatchOutcome>[] = [];
  for (const [url, list] of byQueue) {
    for (let i = 0; i < list.length; i += SQS_BATCH) {
      sends.push(sendBatch(sqs, url, list.slice(i, i + SQS_BATCH), now));
    }
  }
  const outcomes = await Promise.all(sends);
  const failed = outcomes.find((o) => o.failure !== null);
  return { unsent: outcomes.flatMap((o) => o.unsent), failure: failed?.failure ?? null };
}

interface BatchOutcome {
  readonly unsent: readonly OutgoingRun[];
  readonly failure: { readonly error: unknown } | null;
}

async function sendBatch(
  sqs: SQSClient,
  queueUrl: string,
  batch: readonly OutgoingRun[],
  now: Date,
): Promise<BatchOutcome> {
  let pending = batch.map((run, index) => ({ id: String(index), run }));
  // SendMessageBatch can fail per entry; resend only those, a few times, then surface the error.
  for (let round = 0; round < 3 && pending.length > 0; round++) {
    let result: Awaited<ReturnType<typeof sendEntries>>;
    try {
      result = await sendEntries(sqs, queueUrl, pending, now);
    } catch (error) {
      return { unsent: pending.map(({ run }) => run), failure: { error } };
    }
    const failed = new Set((result.Failed ?? []).map((f) => f.Id));
    pending = pending.filter(({ id }) => failed.has(id));
  }
  if (pending.length > 0) {
    return {
      unsent: pending.map(({ run }) => run),
      failure: { error: new Error(`SQS refused ${pending.length} message(s) for ${queueUrl}`) },
    };
  }
  return { unsent: [], failure: null };
}

function sendEntries(
  sqs: SQSClient,
  queueUrl: string,
  entries: readonly { readonly id: string; readonly run: OutgoingRun }[],
  now: Date,
) {
  return sqs.send(
    new SendMessageBatchCommand({
      QueueUrl: queueUrl,
      Entries: entries.map(({ id, run }) => ({
        Id: id,
        MessageBody: encodeRunMessage(run.message),
        DelaySeconds: delaySecondsFor(run.dueAt, now),
        ...messageGroupOf(run.message),
      })),
    }),
  );
}

/** The longest `MessageGroupId` SQS takes; a tenant id may be up to 256 characters. */
const MAX_GROUP_ID_LENGTH = 128;

/**
 * The run's fair-queue group, its tenant: the tenant id itself, or for one longer than SQS takes,
 * `#` and its SHA-256 in hex, which no tenant id can be (they hold no `#`). A message sent before
 * messages named their tenant has none to give (SQS refuses an empty id).
 */
function messageGroupOf(message: RunMessage): { MessageGroupId?: string } {
  const { tenantId } = message;
  if (tenantId === "") return {};
  if (tenantId.length <= MAX_GROUP_ID_LENGTH) return { MessageGroupId: tenantId };
  return { MessageGroupId: `#${createHash("sha256").update(tenantId).digest("hex")}` };
}

export async function receiveRuns(
  sqs: SQSClient,
  queueUrl: string,
  options: { max: number; waitSeconds: number; visibilitySeconds?: number; signal?: AbortSignal },
): Promise<ReceivedRun[]> {
  const { visibilitySeconds } = options;
  const result = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: queueUrl,
      MaxNumberOfMessages: Math.min(SQS_BATCH, options.max),
      WaitTimeSeconds: options.waitSeconds,
      ...(visibilitySeconds === undefined ? {} : { VisibilityTimeout: visibilitySeconds }),
      MessageSystemAttributeNames: ["ApproximateReceiveCount", "SentTimestamp"],
    }),
    // SQS holds the answer for up to the wait: the request timeout counts from the wait's end.
    { abortSignal: options.signal, requestTimeout: longPollTimeoutMs(sqs, options.waitSeconds) },
  );
  const runs: ReceivedRun[] = [];
  for (const m of result.Messages ?? []) {
    const message = decodeRunMessage(m.Body);
    if (message === null || m.ReceiptHandle === undefined || m.MessageId === undefined) continue;
    runs.push({
      message,
      queueUrl,
      receiptHandle: m.ReceiptHandle,
      messageId: m.MessageId,
      receiveCount: Number(m.Attributes?.ApproximateReceiveCount ?? "1"),
      ...sentAtOf(m.Attributes?.SentTimestamp),
      ...(visibilitySeconds === undefined ? {} : { visibilitySeconds }),
    });
  }
  return runs;
}

/** `sentAt` from a message's SentTimestamp attribute, where SQS gave one that reads as a time. */
export function sentAtOf(sentTimestamp: string | undefined): { readonly sentAt?: number } {
  const sentAt = Number(sentTimestamp);
  return sentTimestamp !== undefined && Number.isFinite(sentAt) && sentAt > 0 ? { sentAt } : {};
}

export async function setVisibility(
  sqs: SQSClient,
  queueUrl: string,
  receiptHandle: string,
  seconds: number,
): Promise<void> {
  await sqs.send(
    new ChangeMessageVisibilityCommand({
      QueueUrl: queueUrl,
      ReceiptHandle: receiptHandle,
      VisibilityTimeout: Math.max(0, Math.min(43_200, Math.ceil(seconds))),
    }),
  );
}

/** Sets the visibility of up to SQS_BATCH received messages in one request; returns the handles that failed. */
export async function setVisibilityBatch(
  sqs: SQSClient,
  queueUrl: string,
  receiptHandles: readonly string[],
  seconds: number,
): Promise<string[]> {
  const result = await sqs.send(
    new ChangeMessageVisibilityBatchCommand({
      QueueUrl: queueUrl,
      Entries: receiptHandles.map((handle, index) => ({
        Id: String(index),
        ReceiptHandle: handle,
        VisibilityTimeout: Math.max(0, Math.min(43_200, Math.ceil(seconds))),
      })),
    }),
  );
  return (result.Failed ?? []).flatMap((entry) => receiptHandles[Number(entry.Id)] ?? []);
}

export async function deleteMessages(
  sqs: SQSClient,
  queueUrl: string,
  receiptHandles: readonly string[],
): Promise<void> {
  for (let i = 0; i < receiptHandles.length; i += SQS_BATCH) {
    const batch = receiptHandles.slice(i, i + SQS_BATCH);
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: batch.map((handle, index) => ({ Id: String(index), ReceiptHandle: handle })),
      }),
    );
  }
}
