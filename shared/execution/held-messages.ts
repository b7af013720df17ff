import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { type ReceivedRun, runKeysOf, SQS_BATCH, setVisibilityBatch } from "../queue/work-queue.js";
import { pushQueuedDeadline } from "../storage/inflight.js";
import { keepCompletedJobForWaitingRun } from "../storage/job-status.js";

interface Held {
  readonly received: ReceivedRun;
  readonly receivedAt: number;
  /** Aborted once it has been held HOLD_LIMIT_MS: the loop gives it back (giveBack). */
  readonly expiry: AbortController;
  /** Still waiting at its tenant's gate: only such a message is handed back at the hold limit. */
  atGate: boolean;
  visibleUntil: number;
  /**
   * When its run's reaper deadline was last set, as far as the loop can tell: the run's due time
   * (its deadline is a lease after it, at the earliest) or its receive, whichever is earlier; then
   * each time it is moved on.
   */
  deadlineKeptAt: number;
}

/** Requests in flight at once while keeping held messages. */
const LANES = 8;

/**
 * How long a message is held unstarted. SQS keeps a received message hidden at most 12 hours from
 * its receive and refuses a ChangeMessageVisibility past that (InvalidParameterValue), after which
 * it would be delivered again while still held here. An hour short of that, so that a run that
 * passes its gate just before still has longer than the longest run (900 s) and its lease for its
 * heartbeats to keep the message hidden.
 */
const HOLD_LIMIT_MS = 11 * 3_600_000;

/**
 * Looks after the messages the worker loop holds but has not started. A message waiting at its
 * tenant's gate (tenant-gates.ts) may wait longer than the visibility it was received with, and
 * its run longer than the reaper's deadline (a lease after it was due); without care it would be
 * delivered again, or re-sent by the reaper, while it waits. Every sixth of the visibility:
 * - messages with less than half their visibility left get all of it again, ten to a request;
 * - a message whose run's reaper deadline was set half a lease ago moves it a lease on (one
 *   conditional write per run per half lease, only while it waits that long). Its deadline is
 *   taken as set when the run was due, or when the message was received if it came early: a
 *   message received late is that much nearer its deadline, and one received half a lease late
 *   or more has it moved at the first look. One whose deadline was set after it was due (handed
 *   back and received again, sent again by the reaper, claimed late) has it moved at the first
 *   look too, a write sooner than it needed (refused by `pushQueuedDeadline` when the deadline is
 *   later already, a write unit billed all the same): at most one write more per receive, and only
 *   for a message still held then. One received on time costs nothing more.
 * Once a run starts, its heartbeat does both instead. When the loop stops, the messages still held
 * are made visible again at once, so a restarted loop (or another) takes them without waiting
 * out their visibility. A message held HOLD_LIMIT_MS has its hold's signal (from `track`) aborted:
 * the loop gives it back (`giveBack`), visible at once, to be received again with SQS's 12 hours
 * counted afresh, rather than have SQS refuse to hide it longer and deliver it again meanwhile.
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

  /** A message received just now; answers a signal aborted once it has been held too long. */
  track(received: ReceivedRun): AbortSignal {
    const now = this.elapsedMs();
    // Received late (a loop with a backlog receives late), its deadline comes that much sooner: a
    // deadline already half a lease old is moved at the next look, before the reaper takes it.
    const lateMs = this.engine.clock().getTime() - Date.parse(received.message.dueAt);
    const expiry = new AbortController();
    this.held.set(received.receiptHandle, {
      received,
      receivedAt: now,
      expiry,
      atGate: true,
      visibleUntil: now + this.visibilitySeconds * 1000,
      deadlineKeptAt: now - Math.max(0, lateMs),
    });
    return expiry.signal;
  }

  /** Its run is starting (its heartbeat takes over), or it was dealt with. */
  untrack(received: ReceivedRun): void {
    this.held.delete(received.receiptHandle);
  }

  /** The loop is stopping without starting it: made visible again at `stop`. */
  release(received: ReceivedRun): void {
    if (this.held.delete(received.receiptHandle)) this.released.push(received);
  }

  /**
   * It passed its tenant's gate: held on (renewed) until its run starts, never handed back. Its
   * wait for a slot of the loop may outlast the hold limit, and a message neither renewed nor
   * handed back would be delivered again while this loop starts its run.
   */
  passedGate(received: ReceivedRun): void {
    const h = this.held.get(received.receiptHandle);
    if (h !== undefined) h.atGate = false;
  }

  /** Held too long (its signal aborted): made visible again now. */
  async giveBack(received: ReceivedRun): Promise<void> {
    if (this.held.delete(received.receiptHandle)) await this.setVisibility([received], 0);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.keeping;
    await this.setVisibility(this.released.splice(0), 0);
  }

  private async keep(): Promise<void> {
    const now = this.elapsedMs();
    const leaseMs = this.engine.settings.leaseMs;
    for (const h of this.held.values()) {
      if (!h.atGate || now - h.receivedAt < HOLD_LIMIT_MS || h.expiry.signal.aborted) continue;
      this.engine.obs.log.warn("a message held at its tenant's gate too long goes back to SQS", {
        ...runKeysOf(h.received.message),
        messageId: h.received.messageId,
        heldMs: now - h.receivedAt,
      });
      h.expiry.abort();
    }
    // Not one given back meanwhile (it is no longer held), nor one past the limit (SQS refuses).
    const renew = [...this.held.values()].filter(
      (h) => !h.expiry.signal.aborted && h.visibleUntil - now < (this.visibilitySeconds * 1000) / 2,
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
