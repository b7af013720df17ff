import { randomUUID } from "node:crypto";
import {
  SendMessageBatchCommand,
  type SendMessageBatchCommandOutput,
  type SendMessageBatchRequestEntry,
  type ServiceInputTypes,
  type ServiceOutputTypes,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { SerializeMiddleware } from "@smithy/types";
import type { Clock } from "../shared/clock.js";
import { SQS_BATCH } from "../shared/queue/work-queue.js";

const NAME = "benchVirtualDelays";

interface Held {
  readonly queueUrl: string;
  readonly entry: SendMessageBatchRequestEntry;
  /** On the virtual clock. */
  readonly visibleAt: number;
}

/**
 * SQS delays on a virtual clock: a bench that steps its clock a minute at a time cannot wait out
 * delays of up to 15 minutes for real. The client's SendMessageBatch calls are still made and
 * counted (this sits after the call counter) but are answered here: each message is held until
 * `release` finds the virtual clock at or past the time its delay ends, and then sent, with no
 * delay, by `plain` (a client nothing counts).
 */
export function holdDelayedSends(
  client: SQSClient,
  plain: SQSClient,
  clock: Clock,
): { release(): Promise<number>; remove(): void } {
  let held: Held[] = [];
  const answerHere: SerializeMiddleware<ServiceInputTypes, ServiceOutputTypes> =
    (next, context) => async (args) => {
      const batch = sendBatchOf(args.input);
      if (context.commandName !== "SendMessageBatchCommand" || batch === null) return next(args);
      const now = clock().getTime();
      for (const entry of batch.entries) {
        held.push({
          queueUrl: batch.queueUrl,
          entry: { ...entry, DelaySeconds: 0 },
          visibleAt: now + (entry.DelaySeconds ?? 0) * 1000,
        });
      }
      const output: SendMessageBatchCommandOutput = {
        Successful: batch.entries.map((e) => ({
          Id: e.Id,
          MessageId: randomUUID(),
          MD5OfMessageBody: "",
        })),
        Failed: [],
        $metadata: {},
      };
      return { output, response: {} };
    };
  client.middlewareStack.addRelativeTo(answerHere, {
    relation: "after",
    toMiddleware: "benchCallCounter",
    name: NAME,
    override: true,
  });
  return {
    async release() {
      const now = clock().getTime();
      const due = held.filter((h) => h.visibleAt <= now);
      held = held.filter((h) => h.visibleAt > now);
      const byQueue = new Map<string, Held[]>();
      for (const h of due) byQueue.set(h.queueUrl, [...(byQueue.get(h.queueUrl) ?? []), h]);
      for (const [queueUrl, messages] of byQueue) {
        for (let i = 0; i < messages.length; i += SQS_BATCH) {
          // Ids are unique within a request only: messages held from several sends repeat them.
          const batch = messages
            .slice(i, i + SQS_BATCH)
            .map((m, k) => ({ ...m.entry, Id: `${k}` }));
          await plain.send(new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: batch }));
        }
      }
      return due.length;
    },
    remove() {
      client.middlewareStack.remove(NAME);
    },
  };
}

function sendBatchOf(
  input: ServiceInputTypes,
): { queueUrl: string; entries: SendMessageBatchRequestEntry[] } | null {
  if (!("QueueUrl" in input) || input.QueueUrl === undefined) return null;
  if (!("Entries" in input) || input.Entries === undefined) return null;
  const entries: SendMessageBatchRequestEntry[] = [];
  for (const entry of input.Entries) {
    if (!("MessageBody" in entry)) return null;
    entries.push(entry);
  }
  return { queueUrl: input.QueueUrl, entries };
}
