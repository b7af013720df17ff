import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { sendRuns } from "../queue/work-queue.js";
import { runMessageOf } from "../storage/items.js";

/**
 * How long a claimed run waits for nine more to share its batch. Without it, a run claimed beside
 * work that sends nothing through the sender (another tenant's fan-outs, claims that fail) waited
 * until the pass had nothing more to hand out: every fan-out of the bucket, seconds to minutes.
 */
const SEND_LINGER_MS = 100;

/**
 * Buffers claimed runs and sends them ten to a batch, or what is buffered once the oldest has
 * waited SEND_LINGER_MS. A failed send is not fatal: the runs are QUEUED in the table and the
 * reaper sends them again.
 */
export class RunSender {
  private pending: Run[] = [];
  private linger: ReturnType<typeof setTimeout> | undefined;
  /** Sends under way, which a flush waits for, so a pass ends only once its runs went out. */
  private readonly sending = new Set<Promise<void>>();

  constructor(
    private readonly engine: Engine,
    private readonly stats: { sendFailures: number },
    private readonly onClaimed?: (runs: readonly Run[]) => void,
  ) {}

  async add(runs: readonly Run[]): Promise<void> {
    this.onClaimed?.(runs);
    this.pending.push(...runs);
    if (this.pending.length >= 10) await this.flush();
    else if (this.pending.length > 0 && this.linger === undefined) {
      this.linger = setTimeout(() => {
        this.linger = undefined;
        void this.flush();
      }, SEND_LINGER_MS);
    }
  }

  /** Sends what is buffered, and waits for every send under way. */
  async flush(): Promise<void> {
    clearTimeout(this.linger);
    this.linger = undefined;
    if (this.pending.length > 0) {
      const send = this.send(this.pending);
      this.pending = [];
      this.sending.add(send);
      void send.finally(() => this.sending.delete(send));
    }
    await Promise.all([...this.sending]);
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
