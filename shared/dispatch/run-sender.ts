import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { sendRuns } from "../queue/work-queue.js";
import { runMessageOf } from "../storage/items.js";

/**
 * Buffers claimed runs and sends them ten to a batch. A failed send is not
 * fatal: the runs are QUEUED in the table and the reaper sends them again.
 */
export class RunSender {
  private pending: Run[] = [];

  constructor(
    private readonly engine: Engine,
    private readonly stats: { sendFailures: number },
    private readonly onClaimed?: (runs: readonly Run[]) => void,
  ) {}

  async add(runs: readonly Run[]): Promise<void> {
    this.onClaimed?.(runs);
    this.pending.push(...runs);
    if (this.pending.length >= 10) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
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
