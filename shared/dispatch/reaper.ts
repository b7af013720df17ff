import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { METRICS } from "../observability.js";
import { sendRuns } from "../queue/work-queue.js";
import { overdueRunKeys, pushInflightDeadline, readInflightRun } from "../storage/inflight.js";
import { runMessageOf } from "../storage/items.js";

export interface ReapResult {
  readonly examined: number;
  readonly resent: number;
}

const MAX_PER_SHARD = 500;

export interface ReapOptions {
  readonly now?: Date;
  /**
   * Runs whose deadline is before this are re-sent; defaults to now. The sandbox passes the far
   * future after restarting its in-memory queue, which lost every message.
   */
  readonly overdueBefore?: Date;
  /** Bounds one pass; the rest waits for the next tick. */
  readonly maxPerShard?: number;
}

/**
 * Finds runs whose message should have been acted on by now and was not:
 * QUEUED past its start deadline (claimed but never sent, or the message was
 * lost), or RUNNING a lease past its lapsed lease (no worker picked the
 * message up again). Sends each again and pushes its deadline on by a lease.
 * Lapsed means the lease, read from the run; the index only says when to look.
 * Repeating a send is harmless: a run starts only once.
 */
export async function reap(engine: Engine, options: ReapOptions = {}): Promise<ReapResult> {
  const now = options.now ?? engine.clock();
  const overdueBefore = options.overdueBefore ?? now;
  // Asked to look past now: the caller knows the queue lost its messages, live leases included.
  const messagesLost = overdueBefore > now;
  let examined = 0;
  let resent = 0;
  for (let shard = 0; shard < engine.settings.maxShardCount; shard++) {
    const overdue = await overdueRunKeys(
      engine,
      shard,
      overdueBefore,
      options.maxPerShard ?? MAX_PER_SHARD,
    );
    examined += overdue.length;
    const toSend: Run[] = [];
    await forEachConcurrently(overdue, 16, async (key) => {
      const run = await readInflightRun(engine, key);
      if (run === null || (run.status !== "QUEUED" && run.status !== "RUNNING")) return;
      // A run started on time keeps its queued deadline (starts and heartbeats do not move it,
      // to spare the index a write); one still under a live lease only has its deadline moved.
      const live = run.status === "RUNNING" && (run.leaseUntil ?? "") > now.toISOString();
      const resend = !live || messagesLost;
      const deadline = live
        ? Date.parse(run.leaseUntil ?? "") + engine.settings.leaseMs
        : // A run re-sent ahead of time (after a restart) keeps its deadline relative to when it is due.
          Math.max(now.getTime(), Date.parse(run.dueAt)) + engine.settings.leaseMs;
      // The first re-send fixes when a late start counts from (the worker's misfire check): a
      // message lost while the scheduler ran, from now; after a restart, when the scheduler itself
      // was down, from the occurrence, so that what fell due meanwhile follows its misfire policy.
      const misfireFrom =
        resend && run.misfireFrom === null
          ? messagesLost
            ? new Date(run.plannedFor ?? run.scheduledFor)
            : now
          : null;
      if ((await pushInflightDeadline(engine, run, new Date(deadline), misfireFrom)) && resend)
        toSend.push(run);
    });
    if (toSend.length > 0) {
      await sendRuns(
        engine.sqs,
        engine.queues,
        toSend.map((run) => ({ message: runMessageOf(run), dueAt: new Date(run.dueAt) })),
        // Delays count from the moment of sending, not from the start of a pass that may take seconds.
        options.now ?? engine.clock(),
      );
      resent += toSend.length;
      engine.obs.metrics.add(METRICS.reaperResends, toSend.length, "Count");
      engine.obs.log.warn("reaper re-sent runs", { shard, runs: toSend.length });
    }
  }
  return { examined, resent };
}
