import type { Engine } from "../engine.js";
import type { Job, Run } from "../model.js";
import { floorLoweringFor, loweredJob } from "../storage/items.js";
import { lowerOneOffFloorForRun } from "../storage/job-status.js";
import { getJob } from "../storage/run-reads.js";
import { afterPredecessor, type PredecessorDecision } from "./retry-predecessor.js";
import { decideStartReadingRuns, type StartDecision } from "./start-decision.js";

/**
 * Lowerings of its one-off's floor a run below it tries, each on the job read afresh after the last
 * failed, before it waits instead. A lowering the SDK sent again after its answer was lost fails on
 * itself: the next read finds the run's occurrence kept on the job (or the floor at it), and the
 * run runs.
 */
const FLOOR_LOWERING_TRIES = 3;
/** How soon a run whose job kept changing under its floor's lowering looks again. */
const FLOOR_RECHECK_MS = 1_000;

type RunDecision = StartDecision | Extract<PredecessorDecision, { action: "wait" }>;

/**
 * What the worker does with a run it holds, decided on its job as read (`job`; null: gone) and,
 * for a failure's next attempt, on the attempt before it: with the job the decision was made on.
 * A one-off's run below its floor (`floorLoweringFor`: a retry or replay queued before an edit made
 * the job a one-off, or made it one again) that is to run first has its occurrence kept on the job
 * (`oneOffBelow`; past the few it keeps, the floor lowered to it), in one write conditioned on the
 * job as read (`lowerOneOffFloorForRun`), so that a pause with
 * `running: "cancel"`, a job cancel or a delete reads it: one that read the job before this write
 * fails its own and reads the job again, one written before it fails this write, and the job is
 * read again and the run decided again. A job that keeps changing that way has the run wait.
 */
export async function decideRun(
  engine: Engine,
  job: Job | null,
  run: Run,
  lateAsOf: Date,
  /** The attempt before `run` as read with it (null: gone); absent: not read. */
  predecessor: Run | null | undefined,
): Promise<{ readonly decision: RunDecision; readonly job: Job | null }> {
  let read = job;
  for (let tries = 1; ; tries++) {
    const decided = await decideStartReadingRuns(engine, read, run, lateAsOf);
    const predecessorSaid =
      decided.action === "run" && run.retryOf !== undefined
        ? await afterPredecessor(engine, decided.job, run, predecessor)
        : decided;
    // A failure's own next attempt that holds the key of the one-off's occurrence filed there
    // runs as that occurrence's run: late, it is skipped as the claim's put of it (a `rerun`,
    // standing in for a first attempt) would be, and completes the one-off as that one would.
    const decision =
      predecessorSaid.action === "run" && predecessorSaid.filedAttempt === true
        ? await decideStartReadingRuns(
            engine,
            predecessorSaid.job,
            { ...run, rerun: true },
            lateAsOf,
          )
        : predecessorSaid;
    if (decision.action !== "run") return { decision, job: read };
    const lowering = floorLoweringFor(decision.job, run.scheduledFor);
    if (lowering === undefined) return { decision, job: read };
    if (await lowerOneOffFloorForRun(engine, decision.job, lowering)) {
      const lowered = loweredJob(decision.job, lowering);
      return { decision: { action: "run", job: lowered }, job: lowered };
    }
    if (tries >= FLOOR_LOWERING_TRIES) {
      const recheckAt = new Date(engine.clock().getTime() + FLOOR_RECHECK_MS);
      const reason = "waiting: its job changed while its one-off's floor was lowered to it";
      return { decision: { action: "wait", reason, recheckAt }, job: read };
    }
    read = await getJob(engine, run.jobId);
  }
}
