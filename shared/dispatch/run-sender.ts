import type { Engine } from "../engine.js";
import type { Priority, Run } from "../model.js";
import { SQS_BATCH, sendRuns } from "../queue/work-queue.js";
import { runMessageOf } from "../storage/items.js";

/**
 * How long a claimed run due now (or overdue) waits for nine more to share its batch. Without it,
 * a run claimed beside work that sends nothing through the sender (another tenant's fan-outs,
 * claims that fail) waited until the pass had nothing more to hand out: every fan-out of the
 * bucket, seconds to minutes.
 */
const SEND_LINGER_MS = 100;

/**
 * How long a run due 1.1 s or more after its claim waits for its batch to fill. Its SQS delay is
 * counted to when it would be visible sent after SEND_LINGER_MS (`visibleBy`), so the wait moves
 * only the send: counted to its due time, whole seconds rounded down from a later send, it became
 * visible later (due 1.5 s ahead and sent at 400 ms: a delay of 1 s, visible at 1.4 s, not 1.1 s).
 * The bound keeps short the time in which a dispatcher that dies leaves a claimed run unsent (the
 * reaper sends it a lease late).
 */
const MAX_SEND_LINGER_MS = 1_000;

interface Buffered {
  readonly run: Run;
  /** When it is sent at the latest. */
  readonly sendBy: number;
  /**
   * When its message is visible at the latest, as sent SEND_LINGER_MS after its claim: its delay
   * is counted to this, so however early or late within its wait it goes, it is visible no later.
   */
  readonly visibleBy: number;
}

/** A run claimed at `now`, in the clock's milliseconds, with when it is sent and visible at the latest. */
function buffered(run: Run, now: number): Buffered {
  const sentAfterLinger = now + SEND_LINGER_MS;
  const dueAt = Date.parse(run.dueAt);
  const visibleBy =
    sentAfterLinger + Math.max(0, Math.floor((dueAt - sentAfterLinger) / 1000)) * 1000;
  // Sent by its `visibleBy`, its delay makes it visible no later (and under 2 s before it is due).
  const sendBy = now + MAX_SEND_LINGER_MS <= visibleBy ? now + MAX_SEND_LINGER_MS : sentAfterLinger;
  return { run, sendBy, visibleBy };
}

/**
 * Buffers claimed runs and sends them ten to a batch (one buffer per priority: a batch goes to one
 * queue), or what a buffer holds once the earliest `sendBy` among its runs has come: a run due now
 * waits SEND_LINGER_MS, one due 1.1 s or more ahead a second, and a run due now added to a buffer
 * of later ones brings its send forward. A failed send is not fatal: the runs are QUEUED in the
 * table and the reaper sends them again.
 */
export class RunSender {
  private readonly buffers = new Map<Priority, readonly Buffered[]>();
  /** Each buffer's timer, set for the earliest `sendBy` among its runs. */
  private readonly timers = new Map<
    Priority,
    { readonly at: number; readonly timer: ReturnType<typeof setTimeout> }
  >();
  /** Sends under way, which a flush waits for, so a pass ends only once its runs went out. */
  private readonly sending = new Set<Promise<void>>();

  constructor(
    private readonly engine: Engine,
    private readonly stats: { sendFailures: number },
    private readonly onClaimed?: (runs: readonly Run[]) => void,
  ) {}

  async add(runs: readonly Run[]): Promise<void> {
    this.onClaimed?.(runs);
    if (runs.length === 0) return;
    const now = this.engine.clock().getTime();
    let filled = false;
    for (const run of runs) {
      const buffer = [...(this.buffers.get(run.priority) ?? []), buffered(run, now)];
      if (buffer.length < SQS_BATCH) {
        this.keep(run.priority, buffer, now);
        continue;
      }
      this.keep(run.priority, [], now);
      this.start(buffer);
      filled = true;
    }
    // A full batch waits for the sends under way, as a flush does: claims do not run ahead of them.
    if (filled) await Promise.all([...this.sending]);
  }

  /** Sends what is buffered, and waits for every send under way. */
  async flush(): Promise<void> {
    for (const [priority, buffer] of this.buffers) {
      this.keep(priority, [], 0);
      this.start(buffer);
    }
    await Promise.all([...this.sending]);
  }

  /** Holds `buffer` as the priority's, its timer set for its earliest `sendBy`. */
  private keep(priority: Priority, buffer: readonly Buffered[], now: number): void {
    const timer = this.timers.get(priority);
    if (buffer.length === 0) {
      this.buffers.delete(priority);
      clearTimeout(timer?.timer);
      this.timers.delete(priority);
      return;
    }
    this.buffers.set(priority, buffer);
    const at = Math.min(...buffer.map((b) => b.sendBy));
    if (timer?.at === at) return;
    clearTimeout(timer?.timer);
    this.timers.set(priority, {
      at,
      timer: setTimeout(() => {
        const due = this.buffers.get(priority) ?? [];
        this.keep(priority, [], 0);
        this.start(due);
      }, at - now),
    });
  }

  private start(batch: readonly Buffered[]): void {
    if (batch.length === 0) return;
    const send = this.send(batch);
    this.sending.add(send);
    void send.finally(() => this.sending.delete(send));
  }

  private async send(batch: readonly Buffered[]): Promise<void> {
    try {
      await sendRuns(
        this.engine.sqs,
        this.engine.queues,
        batch.map((b) => ({ message: runMessageOf(b.run), dueAt: new Date(b.visibleBy) })),
        // Delays count from the moment of sending: a pass that took seconds must not send them late.
        this.engine.clock(),
      );
    } catch (error) {
      this.stats.sendFailures += batch.length;
      this.engine.obs.log.error("could not enqueue claimed runs; the reaper will resend them", {
        runs: batch.map((b) => b.run.runId),
        error: String(error),
      });
    }
  }
}
