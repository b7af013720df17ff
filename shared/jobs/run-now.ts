import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { sendRuns } from "../queue/work-queue.js";
import { runMessageOf } from "../storage/items.js";
import { queuedRun } from "../storage/runs.js";

/** A run due now outside the schedule (trigger, replay): QUEUED, its item not yet stored. */
export function runDueNow(
  engine: Engine,
  spec: Omit<Parameters<typeof queuedRun>[0], "dueAt">,
): { run: Run; item: Record<string, unknown>; now: Date } {
  const now = engine.clock();
  return { ...queuedRun({ ...spec, dueAt: now }, now, engine.settings), now };
}

/**
 * Sends the message of a run `runDueNow` made, once it is stored. A failed send is left to the
 * reaper (the run is QUEUED with its deadline, a lease after it is due) and is not the request's
 * failure: the run stands, and a caller told otherwise would trigger it again, a second run.
 */
export async function sendRunDueNow(engine: Engine, run: Run, now: Date): Promise<void> {
  await sendRuns(
    engine.sqs,
    engine.queues,
    [{ message: runMessageOf(run), dueAt: now }],
    now,
  ).catch((error: unknown) => {
    engine.obs.log.warn("could not send a run that is stored; the reaper will", {
      runId: run.runId,
      error: String(error),
    });
  });
}
