import { setMaxListeners } from "node:events";
import { sleep } from "../clock.js";
import { Wakeup } from "../concurrency.js";
import { DEFAULT_LOW_PRIORITY_SHARE } from "../config.js";
import { PRIORITIES, type Priority } from "../model.js";
import { type ReceivedRun, receiveRuns, runKeysOf, SQS_BATCH } from "../queue/work-queue.js";
import { concurrentRunsCap } from "../quotas/concurrency.js";
import { AckBatcher } from "./ack-batcher.js";
import { DueTimers, FairSlots } from "./fair-slots.js";
import { HandBacks, quotaWaitedMs, quotaWaitStart } from "./hand-back.js";
import { HeldMessages } from "./held-messages.js";
import { IdleWait } from "./idle-wait.js";
import { type GateAnswer, TenantGates } from "./tenant-gates.js";
import {
  MAX_EARLY_WAIT_MS,
  processRun,
  receiveVisibilitySeconds,
  type WorkerDeps,
} from "./worker.js";

export interface WorkerLoopOptions {
  /** Runs in progress at once. */
  readonly concurrency: number;
  readonly signal: AbortSignal;
  /**
   * When every queue is empty: long-poll all of them at once this long (see IdleWait), or, with 0,
   * sleep `idleSleepMs` and look again.
   */
  readonly idleWaitSeconds?: number;
  readonly idleSleepMs?: number;
  /**
   * The starvation guard: the share of `concurrency` that each queue below high (normal, low) is
   * guaranteed while it has runs waiting, however busy the queues above it are. Default 10 %.
   */
  readonly lowPriorityShare?: number;
}

/** After an empty receive from a queue below its share, the loop looks there first again this much later. */
const GUARD_EMPTY_BACKOFF_MS = 1000;

/**
 * Messages held at once, waiting for their second or running, per slot of concurrency; messages
 * waiting at their tenant's gate do not count (tenant-gates.ts).
 */
const HELD_PER_SLOT = 2;

/** Messages held at all, those waiting at a gate too, per slot of concurrency. */
const MOST_HELD_PER_SLOT = 100;

/**
 * The share of the loop's hold (MOST_HELD_PER_SLOT a slot) that messages waiting at their tenants'
 * gates may take together. Past it, as past a tenant's own limit, a message is handed back to SQS
 * (hand-back.ts): however many capped tenants have a backlog, the other half of the hold stays
 * for the messages that run, and the loop receives on for the uncapped tenants.
 */
const WAITING_SHARE_OF_MOST_HELD = 0.5;

/** How often the caps of tenants with messages waiting at their gates are read again (cached 10 s). */
const CAP_REFRESH_MS = 5_000;

/** Receives in flight at once while the queues have a backlog. */
const MAX_RECEIVERS = 8;

/**
 * The worker as a long-lived process (the sandbox, a container): keeps up to
 * `concurrency` runs going, taking from the high queue before normal before
 * low, except that normal and low each keep a minimum share of the slots
 * (`lowPriorityShare`) while they have runs waiting: a queue below its share
 * is received from first, and a freed slot goes to its waiting run first. Within
 * a priority, the runs it holds take slots in turn by tenant, so a tenant with
 * a backlog does not hold back another's runs; a tenant at its concurrent-runs
 * quota waits at its gate without taking the loop's capacity (tenant-gates.ts),
 * so the loop receives past its backlog; what its gate may not keep goes back
 * to SQS for a while (hand-back.ts). The Lambda worker runs the same
 * `processRun` per SQS record.
 *
 * A message that arrives early (SQS delays are whole seconds, rounded down)
 * waits for its second without taking a slot: at a top-of-the-minute spike
 * most messages arrive up to a second early, and slots spent waiting would
 * hold back the runs already due.
 *
 * One receiver polls all the time. Up to MAX_RECEIVERS − 1 more join it while
 * receives come back full (a backlog) and go back to waiting when theirs comes
 * back short, so an idle loop makes one receive at a time, while a spike is
 * not read ten messages per round trip by one receiver whose responses wait
 * behind the runs it has already started.
 */
export async function runWorkerLoop(deps: WorkerDeps, options: WorkerLoopOptions): Promise<void> {
  const held = new Set<Promise<void>>();
  const share = options.lowPriorityShare ?? DEFAULT_LOW_PRIORITY_SHARE;
  const slots: FairSlots = new FairSlots(options.concurrency, share, (tenantId) =>
    gates.heldBy(tenantId),
  );
  const guard = new ReceiveGuard(slots, deps.engine.clock);
  const acks = new AckBatcher(deps.engine.sqs, deps.engine.obs.log);
  const { signal } = options;
  const capacity = options.concurrency * HELD_PER_SLOT;
  const mostHeld = options.concurrency * MOST_HELD_PER_SLOT;
  // Every message held listens for the stop: that many listeners are expected.
  setMaxListeners(mostHeld + options.concurrency + 16, signal);
  const settled = new Wakeup();
  const gates = new TenantGates(
    (tenantId) => concurrentRunsCap(deps.engine, tenantId),
    () => settled.notify(),
    // A tenant keeps as many waiting as the loop holds ready to run: two turns of every slot, more
    // than it can run at once, so its slots do not wait for its messages handed back.
    { perTenant: capacity, total: Math.floor(mostHeld * WAITING_SHARE_OF_MOST_HELD) },
  );
  const handBacks = new HandBacks(deps.engine, acks);
  const due = new DueTimers();
  const kept = new HeldMessages(
    deps.engine,
    receiveVisibilitySeconds(deps.engine.settings.leaseMs / 1000),
  );
  const capRefresh = setInterval(() => {
    gates.refreshCaps().catch((error: unknown) => {
      deps.engine.obs.log.warn("could not read waiting tenants' quotas", { error: String(error) });
    });
  }, CAP_REFRESH_MS);
  capRefresh.unref();
  const backlog = new Wakeup();
  signal.addEventListener(
    "abort",
    () => {
      settled.notify();
      backlog.notify();
    },
    { once: true },
  );
  const idleWaitSeconds = options.idleWaitSeconds ?? 1;
  let asked = 0;
  const take = (batch: readonly ReceivedRun[]) => {
    for (const received of batch) {
      const { tenantId } = received.message;
      gates.hold(tenantId);
      const parts = { due, slots, gates, kept, acks, handBacks };
      const task = handle(deps, received, parts, signal).finally(() => {
        gates.unhold(tenantId);
        held.delete(task);
        settled.notify();
      });
      held.add(task);
    }
  };
  const idle = idleWaitSeconds > 0 ? new IdleWait(idleWaitSeconds, take) : null;

  const receiver = async (first: boolean) => {
    let joined = first;
    while (!signal.aborted) {
      if (!joined) {
        await backlog.wait();
        joined = true;
        continue;
      }
      // While the messages coming in go back to SQS from full gates, a receive asks for a full
      // batch, not only for the loop's free slots: one message a round trip, a backlog of hundreds
      // would hold a quiet tenant's run behind it for seconds. What passes its gate of such a
      // batch is held ready past the capacity by up to a batch, and no receive follows until
      // that is back under it.
      const ready = Math.min(options.concurrency - slots.busy, capacity - gates.counted());
      const free =
        ready <= 0
          ? 0
          : Math.min(gates.turningAway() ? SQS_BATCH : ready, mostHeld - held.size) - asked;
      if (free <= 0) {
        await settled.wait();
        continue;
      }
      const max = Math.min(SQS_BATCH, free);
      asked += max;
      let batch: ReceivedRun[];
      try {
        batch = await receiveByPriority(deps, guard, gates, max, first ? idle : null, signal);
      } finally {
        asked -= max;
        // What this receive did not fill is free again for a receiver waiting on it.
        settled.notify();
      }
      take(batch);
      if (batch.length === SQS_BATCH) backlog.notify();
      else if (!first) joined = false;
      else if (batch.length === 0 && idle === null) await sleep(options.idleSleepMs ?? 100, signal);
    }
  };
  const receivers = Math.max(1, Math.min(MAX_RECEIVERS, Math.ceil(capacity / SQS_BATCH)));
  await Promise.all(Array.from({ length: receivers }, (_, i) => receiver(i === 0)));
  await idle?.drained();
  await Promise.allSettled(held);
  clearInterval(capRefresh);
  await kept.stop();
  await acks.flush();
}

/**
 * The starvation guard on the receive side: a queue below high that holds fewer runs than its
 * share is asked first (lowest first), for what it is owed. After it came back empty it is asked
 * only in its normal turn for a second, so an empty low queue does not cost a receive before
 * every other one.
 */
class ReceiveGuard {
  private readonly emptyUntil: Record<Priority, number> = { high: 0, normal: 0, low: 0 };

  constructor(
    private readonly slots: FairSlots,
    private readonly clock: () => Date,
  ) {}

  /** The queues to ask first, each with how many runs it is owed. */
  firsts(): { priority: Priority; owed: number }[] {
    const now = this.clock().getTime();
    return (["low", "normal"] as const)
      .filter((p) => this.emptyUntil[p] <= now)
      .map((priority) => ({ priority, owed: this.slots.owed(priority) }))
      .filter(({ owed }) => owed > 0);
  }

  /** Not asked out of turn: it came back empty less than GUARD_EMPTY_BACKOFF_MS ago. */
  resting(priority: Priority): boolean {
    return this.emptyUntil[priority] > this.clock().getTime();
  }

  cameBackEmpty(priority: Priority): void {
    this.emptyUntil[priority] = this.clock().getTime() + GUARD_EMPTY_BACKOFF_MS;
  }
}

async function receiveByPriority(
  deps: WorkerDeps,
  guard: ReceiveGuard,
  gates: TenantGates,
  max: number,
  idle: IdleWait | null,
  signal: AbortSignal,
): Promise<ReceivedRun[]> {
  const receive = async (priority: Priority, count: number, waitSeconds: number) => {
    try {
      return await receiveRuns(deps.engine.sqs, deps.engine.queues[priority], {
        max: count,
        waitSeconds,
        visibilitySeconds: receiveVisibilitySeconds(deps.engine.settings.leaseMs / 1000),
        // A long poll is left to end (within its seconds), not aborted at the stop: the queue
        // does not see its caller go, and would hand the poll messages no one then holds, each
        // invisible until its visibility ends. What it brings is made visible again (handle).
        ...(waitSeconds === 0 ? { signal } : {}),
      });
    } catch (error) {
      if (signal.aborted) return null;
      deps.engine.obs.log.warn("receive failed; backing off", { priority, error: String(error) });
      await sleep(1000, signal);
      return null;
    }
  };
  for (const { priority, owed } of guard.firsts()) {
    const batch = await receive(priority, Math.min(max, owed), 0);
    if (batch === null) return [];
    if (batch.length > 0) return batch;
    guard.cameBackEmpty(priority);
  }
  // A queue whose messages go back to SQS from full gates runs none of them: the queues below it
  // are asked before it (each once a second at most while empty), so a capped tenant's backlog
  // cycling through it does not hold back their runs.
  const blocked = PRIORITIES.findIndex((p) => gates.turningAway(p));
  const below = blocked < 0 ? [] : PRIORITIES.slice(blocked + 1);
  for (const priority of below.filter((p) => !gates.turningAway(p) && !guard.resting(p))) {
    const batch = await receive(priority, max, 0);
    if (batch === null) return [];
    if (batch.length > 0) return batch;
    guard.cameBackEmpty(priority);
  }
  for (const priority of PRIORITIES) {
    const batch = await receive(priority, max, 0);
    if (batch === null) return [];
    if (batch.length > 0) return batch;
  }
  return idle === null ? [] : idle.next(receive, max);
}

interface LoopParts {
  readonly due: DueTimers;
  readonly slots: FairSlots;
  readonly gates: TenantGates;
  readonly kept: HeldMessages;
  readonly acks: AckBatcher;
  readonly handBacks: HandBacks;
}

async function handle(
  deps: WorkerDeps,
  received: ReceivedRun,
  parts: LoopParts,
  signal: AbortSignal,
): Promise<void> {
  const { tenantId, priority } = received.message;
  const clock = deps.engine.clock;
  const heldTooLong = parts.kept.track(received);
  try {
    const arrival = { arrivedAt: clock().getTime(), sentAt: received.sentAt };
    let answer: GateAnswer;
    try {
      answer = await parts.gates.enter(tenantId, priority, AbortSignal.any([signal, heldTooLong]));
    } catch (error) {
      // Its tenant's quota could not be read: left undeleted, the message comes back.
      deps.engine.obs.log.warn("could not read the tenant's quota; the message will come back", {
        ...runKeysOf(received.message),
        error: String(error),
      });
      return;
    }
    // Its tenant's gate full: back to SQS for a while, the loop not held by its backlog.
    if (answer === "full")
      return await parts.handBacks.handBack(received, quotaWaitStart(received.message, arrival));
    // Stopping: made visible again for the next loop (HeldMessages.stop); held near SQS's 12 hours
    // (HOLD_LIMIT_MS): made visible again now, to be received again.
    if (answer === "stopped")
      return signal.aborted ? parts.kept.release(received) : await parts.kept.giveBack(received);
    // Renewed from here on until its run starts, whatever the hold limit (HeldMessages.passedGate).
    parts.kept.passedGate(received);
    // Lateness the gate caused: from when it was due (or arrived, if later) until it passed, and
    // the wait before it arrived if a loop handed it back (its time out bounded, quotaWaitStart).
    const waitedForQuotaMs = quotaWaitedMs(received.message, arrival, clock().getTime());
    parts.slots.hold(priority);
    try {
      await runHeld(deps, { ...received, waitedForQuotaMs }, parts, signal);
    } finally {
      parts.slots.unhold(priority);
      parts.gates.leave(tenantId);
    }
  } finally {
    parts.kept.untrack(received);
  }
}

async function runHeld(
  deps: WorkerDeps,
  received: ReceivedRun,
  { due, slots, kept, acks }: LoopParts,
  signal: AbortSignal,
): Promise<void> {
  const dueMs = Date.parse(received.message.dueAt);
  const nowMs = deps.engine.clock().getTime();
  if (dueMs > nowMs && dueMs - nowMs <= MAX_EARLY_WAIT_MS) {
    await due.until(dueMs, nowMs, signal);
    if (signal.aborted) return kept.release(received);
  }
  await slots.acquire(received.message.priority, received.message.tenantId);
  // From here on the run's own heartbeat keeps the message invisible and the run off the reaper's list.
  kept.untrack(received);
  try {
    if ((await processRun(deps, received)) === "ack") acks.add(received);
  } catch (error) {
    // Left undeleted, the message comes back after its visibility: at-least-once.
    deps.engine.obs.log.error("run processing failed; the message will be delivered again", {
      ...runKeysOf(received.message),
      scheduledFor: received.message.scheduledFor,
      error: String(error),
    });
  } finally {
    slots.release(received.message.priority);
  }
}
