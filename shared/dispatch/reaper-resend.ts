import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { METRICS, runLogKeys } from "../observability.js";
import { type OutgoingRun, sendRunsSettled } from "../queue/work-queue.js";
import { type InflightRun, type PushedResend, undoResend } from "../storage/inflight.js";
import { runMessageOf } from "../storage/items.js";
import { MAX_RESEND_INTERVAL_MS } from "../storage/retention.js";

/** The reaper's re-sends: how often a run is sent again, and the sending of those a pass moved on. */

/** A run the reaper moved on and sends again, with what that push wrote. */
export interface Resend {
  readonly run: InflightRun;
  readonly pushed: PushedResend;
}

/** How many times the reaper has re-sent the run since a worker last started it. */
export function resendsSinceStart(run: InflightRun): number {
  return run.resends !== null && run.resends.fence === run.fence ? run.resends.count : 0;
}

/**
 * How long after its `count`-th re-send (since its last start) the reaper looks at a run again: a
 * lease, doubling with each re-send no worker started, up to 15 minutes. A message that was lost
 * is re-sent a lease after it was due, as ever; one that waits in a backlog (the workers down or
 * saturated) is not copied into it every pass, which would feed the backlog it waits in.
 */
export function resendInterval(count: number, leaseMs: number): number {
  return Math.min(
    leaseMs * 2 ** Math.min(count - 1, 20),
    Math.max(leaseMs, MAX_RESEND_INTERVAL_MS),
  );
}

/**
 * Sends the runs a pass moved on in a shard; those SQS did not take have their push taken back.
 * The send's failure is returned, not thrown: the pass goes on with the shards after this one.
 */
export async function resendRuns(
  engine: Engine,
  toSend: readonly Resend[],
  { shard, now }: { readonly shard: number; readonly now: Date },
): Promise<{ readonly sent: number; readonly failure?: { readonly error: unknown } }> {
  if (toSend.length === 0) return { sent: 0 };
  const outgoing = new Map<OutgoingRun, Resend>(
    toSend.map((resend) => [
      { message: runMessageOf(resend.run), dueAt: new Date(resend.run.dueAt) },
      resend,
    ]),
  );
  const { unsent, failure } = await sendRunsSettled(
    engine.sqs,
    engine.queues,
    [...outgoing.keys()],
    now,
  );
  const sent = toSend.length - unsent.length;
  if (sent > 0) {
    engine.obs.metrics.add(METRICS.reaperResends, sent, "Count");
    engine.obs.log.warn("reaper re-sent runs", { shard, runs: sent });
  }
  if (!failure) return { sent };
  const notSent = unsent.flatMap((o) => outgoing.get(o) ?? []);
  engine.obs.log.error("reaper could not re-send runs; it tries again a lease on", {
    shard,
    runs: notSent.map(({ run }) => run.runId),
    error: String(failure.error),
  });
  // Their deadlines have moved on, so a later pass finds them again; a send that did not
  // happen is not counted: it doubles no interval and starts no misfire clock.
  await forEachConcurrently(notSent, 16, async ({ run, pushed }) => {
    const retryAt = Math.max(engine.clock().getTime(), Date.parse(run.dueAt));
    const retry = new Date(Math.min(retryAt + engine.settings.leaseMs, pushed.deadline.getTime()));
    await undoResend(engine, run, pushed, retry).catch((error: unknown) => {
      // Left counted: the run is re-sent at the later deadline the push gave it.
      engine.obs.log.warn("reaper could not take back a failed re-send's count", {
        ...runLogKeys(run),
        error: String(error),
      });
    });
  });
  return { sent, failure };
}
