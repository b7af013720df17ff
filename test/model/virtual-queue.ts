import {
  type Message,
  ReceiveMessageCommand,
  type SendMessageBatchRequestEntry,
  SendMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { InitializeMiddleware, MetadataBearer } from "@smithy/types";
import type { RunMessage } from "../../shared/queue/run-message.js";
import { decodeRunMessage, encodeRunMessage } from "../../shared/queue/work-queue.js";
import { injectedSqsError, refusedBatch } from "../support/faults.js";
import { deliveryDied, InjectedCrash } from "./faults.js";

/**
 * The work queues in virtual time. Messages really go through the SQS
 * emulator, but its delays and visibility timeouts run on the wall clock,
 * while the model's clock jumps by days. So middleware on the engine's SQS
 * client sends every message without a delay and keeps every visibility
 * change out of the emulator (a received message stays hidden there for
 * 12 hours), and this store remembers when each message becomes visible in
 * virtual time, how often it was received, and its receipt handle. Deletes
 * still go to the emulator, which is what acknowledging means.
 */
export interface HeldMessage {
  readonly seq: number;
  readonly messageId: string;
  readonly queueUrl: string;
  readonly receiptHandle: string;
  readonly message: RunMessage;
  /** Virtual epoch ms at which a receive would return it. */
  visibleAt: number;
  receives: number;
  /** A worker of the model holds it right now (its handler is still running). */
  busy: boolean;
}

const HIDDEN_SECONDS = 43_200;

/**
 * What SQS does to the next sends the engine makes, faults the emulator never produces:
 * `refuse` lists every entry as `Failed` (a partial failure of all of them); `resent` takes the
 * batch and loses its answer, so the SDK sends it again and both copies are queued; `lostAfter`
 * takes the batch and the caller still sees an error (every answer lost); `unavailable` takes
 * nothing and the caller sees an error (SQS down past the SDK's retries).
 */
export type SendFault = "refuse" | "resent" | "lostAfter" | "unavailable";

/** The faults still to inject, in the order they are met. */
export interface SqsFaults {
  readonly sends: SendFault[];
  /** Visibility changes still to refuse as if their receipt handle had expired. */
  expiredReceipts: number;
  /** Every fault injected, for the report. */
  readonly injected: string[];
}

export class VirtualQueues {
  private readonly held = new Map<string, HeldMessage>();
  /** Messages sent but not yet pulled from the emulator: their virtual visibility. */
  private readonly sent = new Map<string, number>();
  private seq = 0;
  /** Queues a send went to since their last pull (all of them at first: nothing is known yet). */
  private readonly sentTo: Set<string>;
  private pulling: Promise<void> = Promise.resolve();
  readonly faults: SqsFaults = { sends: [], expiredReceipts: 0, injected: [] };

  constructor(
    private readonly sqs: SQSClient,
    readonly urls: readonly string[],
    private readonly now: () => number,
  ) {
    this.sentTo = new Set(urls);
  }

  /**
   * Receives every message the emulator has for the model and holds it. Only the queues a send
   * went to since their last pull can have any (a received message stays hidden in the emulator),
   * so a queue no send touched is not asked; pulls run one at a time, each queue's messages held in
   * the order of `urls`.
   */
  pull(): Promise<void> {
    const pulled = this.pulling.then(() => this.pullSent());
    this.pulling = pulled.catch(() => undefined);
    return pulled;
  }

  private async pullSent(): Promise<void> {
    const urls = this.urls.filter((url) => this.sentTo.has(url));
    // Cleared before receiving: a send that ends while the receives run marks its queue again.
    for (const url of urls) this.sentTo.delete(url);
    const received = await Promise.all(
      urls.map((url) =>
        this.receiveAll(url).catch((error: unknown) => {
          this.sentTo.add(url);
          throw error;
        }),
      ),
    );
    for (const [index, url] of urls.entries()) {
      for (const m of received[index] ?? []) {
        const message = decodeRunMessage(m.Body);
        if (!message || !m.MessageId || !m.ReceiptHandle) continue;
        const visibleAt = this.sent.get(m.MessageId) ?? this.now();
        this.sent.delete(m.MessageId);
        this.held.set(m.ReceiptHandle, {
          seq: this.seq++,
          messageId: m.MessageId,
          queueUrl: url,
          receiptHandle: m.ReceiptHandle,
          message,
          visibleAt,
          receives: 0,
          busy: false,
        });
      }
    }
  }

  private async receiveAll(url: string): Promise<Message[]> {
    const all: Message[] = [];
    for (;;) {
      const result = await this.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: url,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 0,
          VisibilityTimeout: HIDDEN_SECONDS,
        }),
      );
      const messages = result.Messages ?? [];
      if (messages.length === 0) return all;
      all.push(...messages);
    }
  }

  /** Messages a receive would return now, in a reproducible order. */
  visible(): HeldMessage[] {
    const now = this.now();
    return [...this.held.values()]
      .filter((m) => !m.busy && m.visibleAt <= now)
      .sort((a, b) => a.visibleAt - b.visibleAt || order(a.message, b.message) || a.seq - b.seq);
  }

  all(): HeldMessage[] {
    return [...this.held.values()];
  }

  /** The earliest virtual instant at which a message not held by a worker becomes visible. */
  nextVisibleAt(): number | null {
    const times = [...this.held.values()].filter((m) => !m.busy).map((m) => m.visibleAt);
    return times.length ? Math.min(...times) : null;
  }

  /** A second copy of a message, as SQS's at-least-once delivery may hand out. */
  async duplicate(original: HeldMessage): Promise<void> {
    await this.sqs.send(
      new SendMessageCommand({
        QueueUrl: original.queueUrl,
        MessageBody: encodeRunMessage(original.message),
      }),
    );
    await this.pull();
  }

  /**
   * The message `original` as SQS shows it again once its visibility lapsed while a worker still
   * holds it (the holder's visibility change was refused): a receive returns it under a new receipt
   * handle, with its receive count. The emulator cannot hand out a message it holds, so the
   * redelivery is a copy carrying the original's receives; it is visible now. Undefined: not sent.
   */
  async redelivery(original: HeldMessage): Promise<HeldMessage | undefined> {
    const before = new Set(this.held.keys());
    await this.duplicate(original);
    const copy = [...this.held.values()].find(
      (m) =>
        !before.has(m.receiptHandle) &&
        m.message.jobId === original.message.jobId &&
        m.message.scheduledFor === original.message.scheduledFor &&
        m.message.attempt === original.message.attempt,
    );
    if (copy === undefined) return undefined;
    copy.receives = original.receives;
    copy.visibleAt = this.now();
    return copy;
  }

  forget(receiptHandle: string): void {
    this.held.delete(receiptHandle);
  }

  /** The SQS client middleware that keeps delays and visibility in virtual time. */
  middleware(): InitializeMiddleware<object, MetadataBearer> {
    return (next, context) => async (args) => {
      const command = context.commandName ?? "";
      const input = args.input as Record<string, unknown>;
      if (command === "SendMessageBatchCommand") {
        const entries = (input.Entries ?? []) as SendMessageBatchRequestEntry[];
        const delays = new Map(entries.map((e) => [e.Id ?? "", e.DelaySeconds ?? 0]));
        const sentAt = this.now();
        const fault = deliveryDied() ? undefined : this.faults.sends.shift();
        if (fault !== undefined) this.faults.injected.push(`send ${fault}`);
        if (fault === "refuse") return refusedBatch(entries);
        if (fault === "unavailable")
          throw injectedSqsError("InternalError", "SQS did not take the batch", 500);
        const send = async () => {
          const result = await next({
            ...args,
            input: { ...input, Entries: entries.map((e) => ({ ...e, DelaySeconds: 0 })) },
          }).finally(() => this.sentTo.add(String(input.QueueUrl)));
          const output = result.output as { Successful?: { Id?: string; MessageId?: string }[] };
          for (const ok of output.Successful ?? []) {
            if (ok.MessageId)
              this.sent.set(ok.MessageId, sentAt + (delays.get(ok.Id ?? "") ?? 0) * 1000);
          }
          return result;
        };
        const result = await send();
        if (fault === "lostAfter")
          throw injectedSqsError("InternalError", "SQS took the batch; its answer was lost", 500);
        // The SDK sends a batch whose answer was lost again: SQS queues both copies.
        if (fault === "resent") return send();
        return result;
      }
      if (command === "SendMessageCommand") {
        const sentAt = this.now();
        const delay = typeof input.DelaySeconds === "number" ? input.DelaySeconds : 0;
        const result = await next({ ...args, input: { ...input, DelaySeconds: 0 } }).finally(() =>
          this.sentTo.add(String(input.QueueUrl)),
        );
        const output = result.output as { MessageId?: string };
        if (output.MessageId) this.sent.set(output.MessageId, sentAt + delay * 1000);
        return result;
      }
      if (command === "ChangeMessageVisibilityCommand") {
        // A worker that died runs nothing more: its message keeps the visibility it had.
        if (deliveryDied()) throw new InjectedCrash("the worker's process died");
        if (this.faults.expiredReceipts > 0) {
          this.faults.expiredReceipts--;
          this.faults.injected.push("visibility: receipt expired");
          throw injectedSqsError("ReceiptHandleIsInvalid", "the receipt handle has expired", 400);
        }
        const handle = String(input.ReceiptHandle ?? "");
        const seconds = Number(input.VisibilityTimeout ?? 0);
        const held = this.held.get(handle);
        if (held) held.visibleAt = this.now() + seconds * 1000;
        return next({ ...args, input: { ...input, VisibilityTimeout: HIDDEN_SECONDS } });
      }
      if (command === "DeleteMessageBatchCommand") {
        const entries = (input.Entries ?? []) as { Id?: string; ReceiptHandle?: string }[];
        const result = await next(args);
        const output = result.output as { Successful?: { Id?: string }[] };
        const deleted = new Set((output.Successful ?? []).map((s) => s.Id));
        for (const e of entries)
          if (deleted.has(e.Id) && e.ReceiptHandle) this.forget(e.ReceiptHandle);
        return result;
      }
      return next(args);
    };
  }
}

function order(a: RunMessage, b: RunMessage): number {
  return (
    a.dueAt.localeCompare(b.dueAt) ||
    a.jobId.localeCompare(b.jobId) ||
    a.scheduledFor.localeCompare(b.scheduledFor) ||
    a.attempt - b.attempt
  );
}
