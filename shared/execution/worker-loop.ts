import { setMaxListeners } from "node:events";
import type { SQSClient } from "@aws-sdk/client-sqs";
import { sleep } from "../clock.js";
import { PRIORITIES } from "../model.js";
import type { Logger } from "../observability.js";
import { deleteMessages, type ReceivedRun, receiveRuns, SQS_BATCH } from "../queue/work-queue.js";
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
   * When every queue is empty: long-poll the lowest-priority queue this long (cheap on AWS, where
   * each empty receive is billed, but a message for a higher queue waits it out), or, with 0,
   * sleep `idleSleepMs` and look again (the sandbox: starts stay on their second).
   */
  readonly idleWaitSeconds?: number;
  readonly idleSleepMs?: number;
}

/** Messages held at once, waiting for their second or running, per slot of concurrency. */
const HELD_PER_SLOT = 2;

/** Receives in flight at once while the queues have a backlog. */
const MAX_RECEIVERS = 8;

/**
 * The worker as a long-lived process (the sandbox, a container): keeps up to
 * `concurrency` runs going, always taking from the high queue before normal
 * before low. The Lambda worker runs the same `processRun` per SQS record.
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
  const slots = new Slots(options.concurrency);
  const acks = new AckBatcher(deps.engine.sqs, deps.engine.obs.log);
  const { signal } = options;
  const capacity = options.concurrency * HELD_PER_SLOT;
  // Every message waiting for its second listens for the stop: that many listeners are expected.
  setMaxListeners(capacity + options.concurrency + 16, signal);
  const settled = new Wakeup();
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

  const receiver = async (first: boolean) => {
    let joined = first;
    while (!signal.aborted) {
      if (!joined) {
        await backlog.wait();
        joined = true;
        continue;
      }
      const free = Math.min(options.concurrency - slots.busy, capacity - held.size) - asked;
      if (free <= 0) {
        await settled.wait();
        continue;
      }
      const max = Math.min(SQS_BATCH, free);
      asked += max;
      let batch: ReceivedRun[];
      try {
        batch = await receiveByPriority(deps, max, first ? idleWaitSeconds : 0, signal);
      } finally {
        asked -= max;
        // What this receive did not fill is free again for a receiver waiting on it.
        settled.notify();
      }
      for (const received of batch) {
        const task = handle(deps, received, slots, acks, signal).finally(() => {
          held.delete(task);
          settled.notify();
        });
        held.add(task);
      }
      if (batch.length === SQS_BATCH) backlog.notify();
      else if (!first) joined = false;
      else if (batch.length === 0 && idleWaitSeconds === 0)
        await sleep(options.idleSleepMs ?? 100, signal);
    }
  };
  const receivers = Math.max(1, Math.min(MAX_RECEIVERS, Math.ceil(capacity / SQS_BATCH)));
  await Promise.all(Array.from({ length: receivers }, (_, i) => receiver(i === 0)));
  await Promise.allSettled(held);
  await acks.flush();
}

/** Wakes everyone waiting at once. */
class Wakeup {
  private waiting: (() => void)[] = [];

  wait(): Promise<void> {
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  notify(): void {
    const waiting = this.waiting;
    this.waiting = [];
    for (const resolve of waiting) resolve();
  }
}

/**
 * Deletes acknowledged messages ten to a request. A delete may wait a moment:
 * the message stays invisible for a lease, and a run already ended is only
 * acknowledged again if it comes back.
 */
export class AckBatcher {
  private readonly pending = new Map<string, string[]>();
  private readonly deleting = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly sqs: SQSClient,
    private readonly log: Logger,
    private readonly lingerMs = 50,
  ) {}

  add(received: ReceivedRun): void {
    const handles = this.pending.get(received.queueUrl) ?? [];
    handles.push(received.receiptHandle);
    this.pending.set(received.queueUrl, handles);
    if (handles.length >= SQS_BATCH) this.track(this.flushQueue(received.queueUrl));
    else this.timer ??= setTimeout(() => this.track(this.flush()), this.lingerMs);
  }

  /** Sends what is pending and waits for every delete already sent, so none is cut off at exit. */
  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await Promise.all([
      ...[...this.pending.keys()].map((url) => this.flushQueue(url)),
      ...this.deleting,
    ]);
  }

  private track(deleting: Promise<void>): void {
    this.deleting.add(deleting);
    void deleting.finally(() => this.deleting.delete(deleting));
  }

  private async flushQueue(queueUrl: string): Promise<void> {
    const handles = this.pending.get(queueUrl) ?? [];
    this.pending.delete(queueUrl);
    if (handles.length === 0) return;
    try {
      await deleteMessages(this.sqs, queueUrl, handles);
    } catch (error) {
      // Undeleted, they come back after their visibility and are acknowledged again: nothing reruns.
      this.log.warn("could not delete acknowledged messages", {
        messages: handles.length,
        error: String(error),
      });
    }
  }
}

/** A counting semaphore: at most `size` holders at once, the rest wait in arrival order. */
class Slots {
  busy = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly size: number) {}

  async acquire(): Promise<void> {
    if (this.busy < this.size) {
      this.busy++;
      return;
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve));
  }

  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.busy--;
  }
}

async function receiveByPriority(
  deps: WorkerDeps,
  max: number,
  idleWaitSeconds: number,
  signal: AbortSignal,
): Promise<ReceivedRun[]> {
  const queues = deps.engine.queues;
  for (const [index, priority] of PRIORITIES.entries()) {
    const last = index === PRIORITIES.length - 1;
    try {
      const batch = await receiveRuns(deps.engine.sqs, queues[priority], {
        max,
        waitSeconds: last ? idleWaitSeconds : 0,
        visibilitySeconds: receiveVisibilitySeconds(deps.engine.settings.leaseMs / 1000),
        signal,
      });
      if (batch.length > 0) return batch;
    } catch (error) {
      if (signal.aborted) return [];
      deps.engine.obs.log.warn("receive failed; backing off", { priority, error: String(error) });
      await sleep(1000, signal);
      return [];
    }
  }
  return [];
}

async function handle(
  deps: WorkerDeps,
  received: ReceivedRun,
  slots: Slots,
  acks: AckBatcher,
  signal: AbortSignal,
): Promise<void> {
  const early = Date.parse(received.message.dueAt) - deps.engine.clock().getTime();
  if (early > 0 && early <= MAX_EARLY_WAIT_MS) {
    await sleep(early, signal);
    // Stopping: leave it undeleted; it comes back after its visibility, or the reaper re-sends it.
    if (signal.aborted) return;
  }
  await slots.acquire();
  try {
    if ((await processRun(deps, received)) === "ack") acks.add(received);
  } catch (error) {
    // Left undeleted, the message comes back after its visibility: at-least-once.
    deps.engine.obs.log.error("run processing failed; the message will be delivered again", {
      jobId: received.message.jobId,
      scheduledFor: received.message.scheduledFor,
      error: String(error),
    });
  } finally {
    slots.release();
  }
}
