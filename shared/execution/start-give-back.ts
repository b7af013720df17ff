import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, FenceLostError, RunCancelledError } from "../errors.js";
import { METRICS, runLogKeys } from "../observability.js";
import { isThrottling, isTransientFailure } from "../storage/dynamo-errors.js";
import type { HeldRun } from "../storage/run-fence.js";
import { requeueRun } from "../storage/run-requeue.js";
import { endOnCancelRequest, type RunProgress } from "./run-endings.js";

/** Why a run given back waits: its next delivery decides again. */
const GIVEN_BACK = "released: its delivery failed on storage before running it";

/**
 * Whether a delivery's failure said storage failed for now (throttling past the SDK's retries, a
 * 5xx, a timeout, contention that outlasted its attempts) rather than anything about the run.
 */
function failedOnStorage(error: unknown): boolean {
  return isThrottling(error) || isTransientFailure(error) || error instanceof ConcurrentUpdateError;
}

/**
 * A delivery whose start is written before it reads the job (every delivery after a message's
 * first, so that each start of a run that kills its worker counts towards the redrive DLQ) and that
 * then fails on storage, before any handler or target had the run, gives the start back as a
 * released run does: QUEUED again under its fence, due now, its message kept for SQS to deliver
 * again and the reaper past its deadline. Left RUNNING, its lease lapsing, it would read as a start
 * that crashed its worker, and the DLQ consumer would mark a run that never ran DEAD. Best effort:
 * a start held unwritten has nothing to give back; a run no longer held under this start (taken
 * over, ended, put back QUEUED by its own wait or park) is left as it is, one asked to cancel is
 * ended CANCELLED as a heartbeat would end it; a
 * give-back that fails too leaves the run RUNNING under its lapsing lease, as a crash does.
 */
export async function giveStartBackOnStorageError(
  engine: Engine,
  run: HeldRun,
  error: unknown,
  progress: RunProgress,
): Promise<void> {
  if (!failedOnStorage(error)) return;
  if (run.unwrittenStart !== undefined && !run.unwrittenStart.written) return;
  // An earlier start handed it to its target, or ran it to a recorded version: not this start's to give.
  if (run.handedOverAt || run.executedVersion !== null) return;
  try {
    await requeueRun(engine, run, GIVEN_BACK, engine.clock());
    // The DLQ consumer leaves such a run to its wait, so a run whose storage keeps failing goes
    // round for ever: counted, so that an operator sees it without reading the consumer's logs.
    engine.obs.metrics.add(METRICS.startsGivenBack, 1, "Count");
    engine.obs.log.warn("delivery failed on storage before running the run; its start given back", {
      ...runLogKeys(run),
      error: String(error),
    });
  } catch (failure) {
    if (failure instanceof FenceLostError) return;
    // Still this start's, with a cancel asked: carried out now, as a heartbeat would, rather than
    // left RUNNING until its lease lapses and a delivery or the reaper comes for it.
    if (failure instanceof RunCancelledError) {
      await endOnCancelRequest(engine, run, failure, progress).catch((cancelError: unknown) =>
        engine.obs.log.warn("could not end a run given back with a cancel asked", {
          ...runLogKeys(run),
          error: String(cancelError),
        }),
      );
      return;
    }
    engine.obs.log.warn("could not give back the start of a run whose delivery failed", {
      ...runLogKeys(run),
      error: String(error),
      giveBackError: String(failure),
    });
  }
}
