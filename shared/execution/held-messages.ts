import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { type ReceivedRun, SQS_BATCH, setVisibilityBatch } from "../queue/work-queue.js";
import { pushQueuedDeadline } from "../storage/inflight.js";
import { keepCompletedJobForWaitingRun } from "../storage/job-status.js";

interface Held {
  readonly received: ReceivedRun;
  visibleUntil: number;
  /** When its run's reaper deadline was last moved on (or the message received). */
  deadlineKeptAt: number;
}

/** Requests in flight at once while keeping held messages. */
const LANES = 8;

/**
 * Looks after the messages the worker loop holds but has not started. A message waiting at its
 * tenant's gate (tenant-gates.ts) may wait longer than the visibility it was received with, and
 * its run longer than the reaper's deadline (a lease after it was due); without care it would be
 * delivered again, or re-sent by the reaper, while it waits. Every sixth of the visibility:
 * - messages with less than half their visibility left get all of it again, ten to a request;
 * - a message held for half a lease moves its run's reaper deadline a lease on (one conditional
 *   write per run per half lease, only while it waits that long).
 * Once a run starts, its heartbeat does both instead. When the loop stops, the messages still held
 * are made visible again at once, so a restarted loop (or another) takes them without waiting
 * out their visibility.
 */
export class HeldMessages {
  private readonly held = new Map<string, Held>();
  private readonly released: ReceivedRun[] = [];
  private readonly timer: NodeJS.Timeout;
  private keeping: Promise<void> = Promise.resolve();

  constructor(
    private readonly engine: Engine,
    private readonly visibilitySeconds: number,
    private readonly elapsedMs: () => number = () => performance.now(),
  ) {
    this.timer = setInterval(
      () => {
        this.keeping = this.keeping.then(() => this.keep());
      },
      (visibilitySeconds * 1000) / 6,
    );
    this.timer.unref();
  }

  /** A message received just now. */
  track(received: ReceivedRun): void {
    const now = this.elapsedMs();
    this.held.set(received.receiptHandle, {
      received,
      visibleUntil: now + this.visibilitySeconds * 1000,
      deadlineKeptAt: now,
    });
  }

  /** Its run is starting (its heartbeat takes over), or it was dealt with. */
  untrack(received: ReceivedRun): void {
    this.held.delete(received.receiptHandle);
  }

  /** The loop is stopping without starting it: made visible again at `stop`. */
  release(received: ReceivedRun): void {
    if (this.held.delete(received.receiptHandle)) this.released.push(received);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.keeping;
    await this.setVisibility(this.released.splice(0), 0);
  }

  private async keep(): Promise<void> {
    const now = this.elapsedMs();
    const leaseMs = this.engine.settings.leaseMs;
    const renew = [...this.held.values()].filter(
      (h) => h.visibleUntil - now < (this.visibilitySeconds * 1000) / 2,
    );
    const renewed = await this.setVisibility(
      renew.map((h) => h.received),
      this.visibilitySeconds,
    );
    for (const h of renew)
      if (renewed.has(h.received.receiptHandle))
        h.visibleUntil = now + this.visibilitySeconds * 1000;
    const overdue = [...this.held.values()].filter((h) => now - h.deadlineKeptAt >= leaseMs / 2);
    const deadline = new Date(this.engine.clock().getTime() + leaseMs);
    await forEachConcurrently(overdue, LANES, async (h) => {
      const { message } = h.received;
      // Started, ended or moved on meanwhile: nothing to keep.
      if (await pushQueuedDeadline(this.engine, message, message.fence ?? 0, deadline))
        await keepCompletedJobForWaitingRun(this.engine, message, this.engine.clock());
      h.deadlineKeptAt = now;
    }).catch((error: unknown) => {
      // Kept again at the next turn; meanwhile the reaper may send a copy: a duplicate delivery
      // (see docs/architecture.md, Known limits, on duplicates of a run's first start).
      this.engine.obs.log.warn("could not keep held runs from the reaper", {
        error: String(error),
      });
    });
  }

  /** Sets the visibility of these messages; returns the receipt handles it was set for. */
  private async setVisibility(
    messages: readonly ReceivedRun[],
    seconds: number,
  ): Promise<Set<string>> {
    const byQueue = new Map<string, string[]>();
    for (const { queueUrl, receiptHandle } of messages) {
      const handles = byQueue.get(queueUrl) ?? [];
      handles.push(receiptHandle);
      byQueue.set(queueUrl, handles);
    }
    const batches = [...byQueue].flatMap(([queueUrl, handles]) =>
      Array.from({ length: Math.ceil(handles.length / SQS_BATCH) }, (_, i) => ({
        queueUrl,
        handles: handles.slice(i * SQS_BATCH, (i + 1) * SQS_BATCH),
      })),
    );
    const done = new Set<string>();
    await forEachConcurrently(batches, LANES, async ({ queueUrl, handles }) => {
      try {
        const failed = new Set(
          await setVisibilityBatch(this.engine.sqs, queueUrl, handles, seconds),
        );
        for (const handle of handles) if (!failed.has(handle)) done.add(handle);
      } catch (error) {
        // Visible again once its time is up: delivered again, a duplicate delivery.
        this.engine.obs.log.warn("could not set held messages' visibility", {
          messages: handles.length,
          error: String(error),
        });
      }
    });
    return done;
  }
}
