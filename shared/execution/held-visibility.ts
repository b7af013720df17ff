import type { SQSClient } from "@aws-sdk/client-sqs";
import type { Logger } from "../observability.js";
import { type ReceivedRun, setVisibilities } from "../queue/work-queue.js";

interface Held {
  readonly queueUrl: string;
  visibleUntil: number;
}

/**
 * Keeps the messages the worker loop holds but has not started invisible: a message waiting at
 * its tenant's gate (tenant-gates.ts) may wait longer than the visibility it was received with,
 * and would otherwise be delivered again while it waits. Every sixth of the visibility, the
 * messages with less than half of it left get all of it again, ten to a request. Once a run
 * starts, its heartbeat keeps its message invisible instead.
 */
export class HeldVisibility {
  private readonly held = new Map<string, Held>();
  private readonly timer: NodeJS.Timeout;
  private extending: Promise<void> = Promise.resolve();

  constructor(
    private readonly sqs: SQSClient,
    private readonly log: Logger,
    private readonly visibilitySeconds: number,
    private readonly elapsedMs: () => number = () => performance.now(),
  ) {
    this.timer = setInterval(
      () => {
        this.extending = this.extending.then(() => this.extend());
      },
      (visibilitySeconds * 1000) / 6,
    );
    this.timer.unref();
  }

  /** A message received just now; returns what to call once its run starts or it is let go. */
  track(received: ReceivedRun): () => void {
    const handle = received.receiptHandle;
    this.held.set(handle, {
      queueUrl: received.queueUrl,
      visibleUntil: this.elapsedMs() + this.visibilitySeconds * 1000,
    });
    return () => this.held.delete(handle);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.extending;
  }

  private async extend(): Promise<void> {
    const now = this.elapsedMs();
    const byQueue = new Map<string, string[]>();
    for (const [handle, held] of this.held) {
      if (held.visibleUntil - now >= (this.visibilitySeconds * 1000) / 2) continue;
      const handles = byQueue.get(held.queueUrl) ?? [];
      handles.push(handle);
      byQueue.set(held.queueUrl, handles);
    }
    for (const [queueUrl, handles] of byQueue) {
      let failed: readonly string[];
      try {
        failed = await setVisibilities(this.sqs, queueUrl, handles, this.visibilitySeconds);
      } catch (error) {
        failed = handles;
        this.log.warn("could not keep held messages invisible", { error: String(error) });
      }
      const failedSet = new Set(failed);
      for (const handle of handles) {
        const held = this.held.get(handle);
        // One that failed is delivered again once visible: a duplicate the fence makes harmless.
        if (held !== undefined && !failedSet.has(handle))
          held.visibleUntil = now + this.visibilitySeconds * 1000;
      }
    }
  }
}
