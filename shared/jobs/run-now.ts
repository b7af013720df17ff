import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { runLogKeys } from "../observability.js";
import { sendRuns } from "../queue/work-queue.js";
import { runMessageOf } from "../storage/items.js";
import { queuedRun } from "../storage/runs.js";

/**
 * A run due now outside the schedule (trigger, replay): QUEUED, its item not yet stored. Due no
 * earlier than its occurrence: a trigger moved a few milliseconds on, past a same-millisecond
 * twin's, is due at that instant, so its worker (which waits for a message's dueAt) does not
 * start it before its `scheduledFor`.
 */
export function runDueNow(
  engine: Engine,
  spec: Omit<Parameters<typeof queuedRun>[0], "dueAt">,
): { run: Run; item: Record<string, unknown>; now: Date } {
  const now = engine.clock();
  const dueAt = new Date(Math.max(now.getTime(), spec.scheduledFor.getTime()));
  return { ...queuedRun({ ...spec, dueAt }, now, engine.settings), now };
}

/**
 * Sends the message of a run `runDueNow` made at `now`, once it is stored, due at its dueAt. A
 * failed send is left to the reaper (the run is QUEUED with its deadline, a lease after it is
 * due) and is not the request's failure: the run stands, and a caller told otherwise would
 * trigger it again, a second run.
 */
export async function sendRunDueNow(engine: Engine, run: Run, now: Date): Promise<void> {
  await sendRuns(
    engine.sqs,
    engine.queues,
    [{ message: runMessageOf(run), dueAt: new Date(run.dueAt) }],
    now,
  ).catch((error: unknown) => {
    engine.obs.log.warn("could not send a run that is stored; the reaper will", {
      ...runLogKeys(run),
      error: String(error),
    });
  });
}

/**
 * Sends the message of a run a request stored with its key and then found stored again (its own
 * write, applied with its answer lost, or an earlier send's of the same request), when that run
 * may be unsent: QUEUED and never started (fence 0). The request that wrote it may have died
 * before its send, leaving it to the reaper a lease past its due time. A second message of a run
 * sent already is harmless (workers dedupe a run's deliveries); a run past QUEUED, or one whose
 * start is written (fence above 0), was sent. A run a worker took with its start held unwritten
 * (`takeRun`) still reads QUEUED, fence 0, while its handler runs, until its first write: it is
 * sent again, and that delivery does not run it again (keyed-repeat-sends.test.ts).
 */
export async function sendRunIfUnsent(engine: Engine, run: Run, now: Date): Promise<void> {
  if (run.status !== "QUEUED" || run.fence !== 0) return;
  await sendRunDueNow(engine, run, now);
}
