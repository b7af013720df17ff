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
 * How long a run due later waits for its batch to fill: a whole second, when that second comes off
 * its SQS delay (whole seconds, rounded down, counted from the send), so its message becomes
 * visible as it would sent at once, 100 ms sooner than after SEND_LINGER_MS. A wait of another
 * length, or a second that does not shorten its delay by a second, makes it visible later (a run
 * due in 1.5 s sent 500 ms after its claim gets a delay of 1 s: visible at its due time, not
 * 400 ms before, and it starts late by the receive). The bound keeps short the time in which a
 * dispatcher that dies leaves a claimed run unsent (the reaper sends it a lease late).
 */
const MAX_SEND_LINGER_MS = 1_000;

/** Whole seconds of SQS delay for a run due in `dueInMs`, sent `afterMs` from now (as `delaySecondsFor`). */
const delayAfter = (dueInMs: number, afterMs: number) => Math.floor((dueInMs - afterMs) / 1000);

/**
 * When a run claimed at `now` is sent at the latest, in the clock's milliseconds: MAX_SEND_LINGER_MS
 * from now when that wait takes a whole second off its delay (so it is visible no later than after
 * SEND_LINGER_MS), else SEND_LINGER_MS, as every run waited before.
 */
function sendByOf(run: Run, now: number): number {
  const dueInMs = Date.parse(run.dueAt) - now;
  const longer = delayAfter(dueInMs, MAX_SEND_LINGER_MS);
  const secondOffDelay = longer >= 0 && longer === delayAfter(dueInMs, SEND_LINGER_MS) - 1;
  return now + (secondOffDelay ? MAX_SEND_LINGER_MS : SEND_LINGER_MS);
}

interface Buffered {
  readonly run: Run;
  /** When it is sent at the latest (`sendByOf`). */
  readonly sendBy: number;
}

/**
 * Buffers claimed runs and sends them ten to a batch (one buffer per priority: a batch goes to one
 * queue), or what a buffer holds once the earliest `sendBy` among its runs has come: a run due now
 * waits SEND_LINGER_MS, one due later a second when that second comes off its delay, and a run
 * due now added to a buffer of later ones brings its send forward. A failed send is not fatal: the runs are QUEUED in the
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
