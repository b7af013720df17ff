import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import type { RunMessage } from "../queue/run-message.js";
import {
  type OutgoingRun,
  type ReceivedRun,
  runKeysOf,
  SQS_BATCH,
  sendRunsSettled,
} from "../queue/work-queue.js";
import { pushQueuedDeadline } from "../storage/inflight.js";
import { keepCompletedJobForWaitingRun } from "../storage/job-status.js";
import type { AckBatcher } from "./ack-batcher.js";

const MIN_OUT_MS = 1_000;
const MAX_OUT_MS = 60_000;

/** How long a hand-back waits for others to share its requests with (as AckBatcher does). */
const LINGER_MS = 50;

/** Deadline writes in flight at once. */
const LANES = 8;

/**
 * How long a handed-back message stays out: as long as its run has waited so far, from 1 s up
 * to 60 s, less up to half at random so a backlog does not come back together. Whole seconds
 * (SQS delays are), at least one, so a message is never received again at once. Each time out
 * is at most as long as the wait before it, as the Lambda worker's recheck of a run over its quota
 * doubles (quotaRecheckMs): 1, 1 to 2, 2 to 4 … s, the 60 s ceiling once the run has waited a
 * minute.
 */
export function handBackDelayMs(waitedMs: number, random: () => number): number {
  const ceiling = Math.min(MAX_OUT_MS, Math.max(MIN_OUT_MS, waitedMs));
  return Math.max(MIN_OUT_MS, Math.ceil((ceiling * (1 - random() / 2)) / 1000) * 1000);
}

/** How a message came to a worker: when it arrived, and when it was sent (SQS's SentTimestamp). */
export interface Arrival {
  readonly arrivedAt: number;
  /** Absent where SQS did not say. */
  readonly sentAt?: number | undefined;
}

/**
 * When the message's run began waiting for its tenant's quota, taking it to wait from now: since
 * it arrived or was due, whichever is later; or, handed back by an earlier loop, as long before
 * it arrived as it had waited by then. Its time out counts only up to the longest a hand-back
 * delays a message (60 s) after it was sent: past that it was back on the queue, and a wait for a
 * worker (the workers down, a priority's invocations full) is lateness, as for any message. With
 * no SentTimestamp it is taken to have been sent as its wait began (at most 60 s out counted).
 * A loop that hands it back again passes this on as `quotaWaitSince`, so each time out is bounded.
 */
export function quotaWaitStart(message: RunMessage, { arrivedAt, sentAt }: Arrival): number {
  const here = Math.max(arrivedAt, Date.parse(message.dueAt));
  if (message.quotaWaitSince === undefined) return here;
  const since = Date.parse(message.quotaWaitSince);
  const backBy = Math.min(arrivedAt, (sentAt ?? since) + MAX_OUT_MS);
  return Math.min(here, arrivedAt - Math.max(0, backBy - since));
}

/**
 * How long the message's run had waited for its tenant's quota when the wait ended at `endedAt`
 * (`ReceivedRun.waitedForQuotaMs`, which the start's misfire decision does not count as lateness):
 * at the worker loop, as it passes its tenant's gate; at the Lambda worker, which has no gate, as
 * it arrives, so that only the time out since a loop handed it back counts (`quotaWaitStart`).
 */
export function quotaWaitedMs(message: RunMessage, arrival: Arrival, endedAt: number): number {
  return Math.max(0, endedAt - quotaWaitStart(message, arrival));
}

interface Pending {
  readonly received: ReceivedRun;
  readonly waitSince: number;
  readonly done: () => void;
}

/**
 * Hands messages turned away at their tenant's full gate (tenant-gates.ts) back to SQS, so that
 * a capped tenant's backlog cannot fill the worker loop's hold and stop its receives for every
 * other tenant. Each goes back as a fresh message (its body the same, with `quotaWaitSince`)
 * delayed by `handBackDelayMs`, and the one received is deleted once that is sent: making the
 * received one visible again instead would count a receive each time towards the redrive's
 * maxReceiveCount, and a run waiting out its tenant's quota would reach the DLQ unstarted.
 *
 * Before it is sent, a run whose reaper deadline may fall less than half a lease after the
 * message is back has it moved to a lease after that (one conditional write, as HeldMessages
 * does for a message it holds), so that the reaper does not take the run for lost and send a
 * copy while its message is out. Should that write fail, the
 * reaper may send one: a copy of a QUEUED run, due when the run was, that its first delivery
 * starts and the other finds started and acknowledges (a duplicate delivery, as after any lost
 * delete). Ten to a batch, a hand-back costs that write if any, a tenth of a SendMessageBatch
 * and of a DeleteMessageBatch, and the receive that takes it again.
 */
export class HandBacks {
  private pending: Pending[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly engine: Engine,
    private readonly acks: AckBatcher,
  ) {}

  /**
   * Hands the message back; resolves once it is sent again, or left undeleted to come back after
   * its visibility. `waitSince`: when its run began waiting for its tenant's quota.
   */
  handBack(received: ReceivedRun, waitSince: number): Promise<void> {
    return new Promise((done) => {
      this.pending.push({ received, waitSince, done });
      if (this.pending.length >= SQS_BATCH) void this.flush();
      else this.timer ??= setTimeout(() => void this.flush(), LINGER_MS);
    });
  }

  private async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending.splice(0);
    try {
      await this.send(batch);
    } catch (error) {
      // Left undeleted, each comes back after its visibility, a receive counted.
      this.engine.obs.log.warn(
        "could not hand messages back; they come back after their visibility",
        {
          messages: batch.length,
          error: String(error),
        },
      );
    } finally {
      for (const { done } of batch) done();
    }
  }

  private async send(batch: readonly Pending[]): Promise<void> {
    const { engine } = this;
    const now = engine.clock();
    const out = new Map<OutgoingRun, ReceivedRun>();
    for (const { received, waitSince } of batch) {
      const back = now.getTime() + handBackDelayMs(now.getTime() - waitSince, engine.random);
      const message = { ...received.message, quotaWaitSince: new Date(waitSince).toISOString() };
      out.set({ message, dueAt: new Date(back) }, received);
    }
    const leaseMs = engine.settings.leaseMs;
    // A QUEUED run's deadline is a lease after it was due at the earliest (queuedRun, requeueRun,
    // the reaper's pushes): one still half a lease past the message's return needs no write.
    const nearDeadline = [...out.keys()].filter(
      ({ message, dueAt }) => Date.parse(message.dueAt) + leaseMs < dueAt.getTime() + leaseMs / 2,
    );
    await forEachConcurrently(nearDeadline, LANES, async ({ message, dueAt }) => {
      const deadline = new Date(dueAt.getTime() + leaseMs);
      try {
        // Refused when the run started, ended or moved on (or its deadline is later already).
        if (await pushQueuedDeadline(engine, message, message.fence ?? 0, deadline))
          await keepCompletedJobForWaitingRun(engine, message, engine.clock());
      } catch (error) {
        engine.obs.log.warn("could not keep a handed-back run from the reaper", {
          ...runKeysOf(message),
          error: String(error),
        });
      }
    });
    const { unsent, failure } = await sendRunsSettled(
      engine.sqs,
      engine.queues,
      [...out.keys()],
      now,
    );
    const notSent = new Set(unsent);
    for (const [run, received] of out) if (!notSent.has(run)) this.acks.add(received);
    if (failure !== null)
      engine.obs.log.warn("could not hand messages back; they come back after their visibility", {
        messages: notSent.size,
        error: String(failure.error),
      });
  }
}
