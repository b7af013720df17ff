import type { SQSClient } from "@aws-sdk/client-sqs";
import type { Logger } from "../observability.js";
import { deleteMessages, type ReceivedRun, SQS_BATCH } from "../queue/work-queue.js";

/**
 * Deletes acknowledged messages ten to a request. A delete may wait a moment:
 * the message stays invisible for a lease, and a run already ended is only
 * acknowledged again if it comes back.
 */
export class AckBatcher {
  private readonly pending = new Map<string, string[]>();
  private readonly deleting = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly sqs: SQSClient,
    private readonly log: Logger,
    private readonly lingerMs = 50,
  ) {}

  add(received: ReceivedRun): void {
    const handles = this.pending.get(received.queueUrl) ?? [];
    handles.push(received.receiptHandle);
    this.pending.set(received.queueUrl, handles);
    if (handles.length >= SQS_BATCH) this.track(this.flushQueue(received.queueUrl));
    else this.timer ??= setTimeout(() => this.track(this.flush()), this.lingerMs);
  }

  /** Sends what is pending and waits for every delete already sent, so none is cut off at exit. */
  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await Promise.all([
      ...[...this.pending.keys()].map((url) => this.flushQueue(url)),
      ...this.deleting,
    ]);
  }

  private track(deleting: Promise<void>): void {
    this.deleting.add(deleting);
    void deleting.finally(() => this.deleting.delete(deleting));
  }

  private async flushQueue(queueUrl: string): Promise<void> {
    const handles = this.pending.get(queueUrl) ?? [];
    this.pending.delete(queueUrl);
    if (handles.length === 0) return;
    try {
      await deleteMessages(this.sqs, queueUrl, handles);
    } catch (error) {
      // Undeleted, they come back after their visibility and are acknowledged again: nothing reruns.
      this.log.warn("could not delete acknowledged messages", {
        messages: handles.length,
        error: String(error),
      });
    }
  }
}
