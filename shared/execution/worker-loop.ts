import { sleep } from "../clock.js";
import { PRIORITIES } from "../model.js";
import { deleteMessages, type ReceivedRun, receiveRuns } from "../queue/work-queue.js";
import { processRun, type WorkerDeps } from "./worker.js";

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

/**
 * The worker as a long-lived process (the sandbox, a container): keeps up to
 * `concurrency` runs going, always taking from the high queue before normal
 * before low. The Lambda worker runs the same `processRun` per SQS record.
 */
export async function runWorkerLoop(deps: WorkerDeps, options: WorkerLoopOptions): Promise<void> {
  const inFlight = new Set<Promise<void>>();
  const { signal } = options;
  while (!signal.aborted) {
    const free = options.concurrency - inFlight.size;
    if (free <= 0) {
      await Promise.race(inFlight);
      continue;
    }
    const idleWaitSeconds = options.idleWaitSeconds ?? 1;
    const batch = await receiveByPriority(deps, free, idleWaitSeconds, signal);
    if (batch.length === 0 && idleWaitSeconds === 0)
      await sleep(options.idleSleepMs ?? 100, signal);
    for (const received of batch) {
      const task = handle(deps, received).finally(() => inFlight.delete(task));
      inFlight.add(task);
    }
  }
  await Promise.allSettled(inFlight);
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

async function handle(deps: WorkerDeps, received: ReceivedRun): Promise<void> {
  try {
    const disposition = await processRun(deps, received);
    if (disposition === "ack") {
      await deleteMessages(deps.engine.sqs, received.queueUrl, [received.receiptHandle]);
    }
  } catch (error) {
    // Left undeleted, the message comes back after its visibility: at-least-once.
    deps.engine.obs.log.error("run processing failed; the message will be delivered again", {
      jobId: received.message.jobId,
      scheduledFor: received.message.scheduledFor,
      error: String(error),
    });
  }
}
