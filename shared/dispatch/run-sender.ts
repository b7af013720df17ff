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
 * The longest a run due later waits for its batch to fill. Its SQS delay is counted from the
 * moment it is sent, so the wait moves nothing but the send; the bound keeps short the time in
 * which a dispatcher that dies leaves a claimed run unsent (the reaper sends it a lease late).
 */
const MAX_SEND_LINGER_MS = 1_000;

/**
 * A run due later is sent at least this long before it is due: time for the send (its retries of
 * refused entries, a busy event loop) and the worker's receive. Its delay, whole seconds rounded
 * down from its due time, then makes it visible in the second before it is due, as sent at once,
 * and it starts as early.
 */
const SEND_MARGIN_MS = 1_000;

/**
 * When a run claimed at `now` is sent at the latest, in the clock's milliseconds: SEND_LINGER_MS
 * from now for a run due within the margin (as every run waited before), else up to
 * MAX_SEND_LINGER_MS, never past its due time less SEND_MARGIN_MS.
 */
function sendByOf(run: Run, now: number): number {
  const untilMargin = Date.parse(run.dueAt) - SEND_MARGIN_MS - now;
  return now + Math.min(MAX_SEND_LINGER_MS, Math.max(SEND_LINGER_MS, untilMargin));
}

interface Buffered {
  readonly run: Run;
  /** When it is sent at the latest (`sendByOf`). */
  readonly sendBy: number;
}

/**
 * Buffers claimed runs and sends them ten to a batch (one buffer per priority: a batch goes to one
 * queue), or what a buffer holds once the earliest `sendBy` among its runs has come: a run due now
 * waits SEND_LINGER_MS, one due seconds ahead up to a second, and a run due now added to a buffer
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
      const buffer = [
        ...(this.buffers.get(run.priority) ?? []),
        { run, sendBy: sendByOf(run, now) },
      ];
      if (buffer.length < SQS_BATCH) {
        this.keep(run.priority, buffer, now);
        continue;
      }
      this.keep(run.priority, [], now);
      this.start(buffer.map((b) => b.run));
      filled = true;
    }
    // A full batch waits for the sends under way, as a flush does: claims do not run ahead of them.
    if (filled) await Promise.all([...this.sending]);
  }

  /** Sends what is buffered, and waits for every send under way. */
  async flush(): Promise<void> {
    for (const [priority, buffer] of this.buffers) {
      this.keep(priority, [], 0);
      this.start(buffer.map((b) => b.run));
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
        this.start(due.map((b) => b.run));
      }, at - now),
    });
  }

  private start(batch: readonly Run[]): void {
    if (batch.length === 0) return;
    const send = this.send(batch);
    this.sending.add(send);
    void send.finally(() => this.sending.delete(send));
  }

  private async send(batch: readonly Run[]): Promise<void> {
    try {
      await sendRuns(
        this.engine.sqs,
        this.engine.queues,
        batch.map((run) => ({ message: runMessageOf(run), dueAt: new Date(run.dueAt) })),
        // Delays count from the moment of sending: a pass that took seconds must not send them late.
        this.engine.clock(),
      );
    } catch (error) {
      this.stats.sendFailures += batch.length;
      this.engine.obs.log.error("could not enqueue claimed runs; the reaper will resend them", {
        runs: batch.map((r) => r.runId),
        error: String(error),
      });
    }
  }
}
