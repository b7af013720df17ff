import type { SQSClient } from "@aws-sdk/client-sqs";

/**
 * When the messages a client sent with an SQS delay become visible, by queue: what a receive that
 * waits for delayed messages (the engine fixture's `receiveAll`) needs to know to wait only for
 * those that come within its wait. SQS says only how many messages of a queue are in their delay,
 * not until when.
 */
export interface DelayedSends {
  /**
   * Whether every message of the queue in its delay (`delayed`, as the queue counts them) was
   * sent through this client and becomes visible later than `withinMs` from now: a wait of
   * `withinMs` for them would receive none. False when any is unknown (sent by another client).
   */
  allLaterThan(queueUrl: string, delayed: number, withinMs: number): boolean;
  /** Forgets what was sent (the queues were purged). */
  clear(): void;
}

interface SendInput {
  readonly QueueUrl?: string;
  readonly DelaySeconds?: number;
  readonly Entries?: readonly { readonly Id?: string; readonly DelaySeconds?: number }[];
}

interface BatchOutput {
  readonly Failed?: readonly { readonly Id?: string }[];
}

/** Records the delays of the messages `sqs` sends (SendMessage and SendMessageBatch). */
export function recordDelayedSends(sqs: SQSClient): DelayedSends {
  /** By queue, each message's visibility: from before its send (earliest) and after (latest). */
  const visibleAt = new Map<string, { earliest: number; latest: number }[]>();
  sqs.middlewareStack.add(
    (next, context) => async (args) => {
      const sentAt = Date.now();
      const result = await next(args);
      const input = args.input as SendInput;
      // A batch's entries SQS refused are not in the queue.
      const failed = new Set(
        ((result.output as BatchOutput).Failed ?? []).map((entry) => entry.Id),
      );
      const delays =
        context.commandName === "SendMessageCommand"
          ? [input.DelaySeconds ?? 0]
          : context.commandName === "SendMessageBatchCommand"
            ? (input.Entries ?? [])
                .filter((entry) => !failed.has(entry.Id))
                .map((entry) => entry.DelaySeconds ?? 0)
            : [];
      // A delay counts from when SQS took the message, between the send and its answer.
      const answeredAt = Date.now();
      const queueUrl = input.QueueUrl ?? "";
      const sent = delays
        .filter((seconds) => seconds > 0)
        .map((seconds) => ({
          earliest: sentAt + seconds * 1000,
          latest: answeredAt + seconds * 1000,
        }));
      if (sent.length > 0) visibleAt.set(queueUrl, [...(visibleAt.get(queueUrl) ?? []), ...sent]);
      return result;
    },
    { step: "initialize", name: "recordDelayedSends" },
  );
  return {
    allLaterThan(queueUrl, delayed, withinMs) {
      const now = Date.now();
      // Those that may still be in their delay; any that may come within the wait is waited for.
      const pending = (visibleAt.get(queueUrl) ?? []).filter((at) => at.latest > now);
      visibleAt.set(queueUrl, pending);
      return pending.length >= delayed && pending.every((at) => at.earliest > now + withinMs);
    },
    clear: () => visibleAt.clear(),
  };
}
