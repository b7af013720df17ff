import type { Engine } from "../engine.js";
import { isRetryOrReplay, type Job, type Run } from "../model.js";
import { runLogKeys } from "../observability.js";
import { isOneOffOccurrence, oneOffAttemptOf } from "../one-off.js";
import { retryNotRunReason } from "../storage/next-attempt.js";
import type { RunEnding } from "../storage/run-finish.js";
import { getRetryPredecessor, isOccurrenceRun } from "../storage/run-reads.js";
import { endsOneOff } from "./run-endings.js";
import { MAX_HEARTBEAT_MS } from "./run-execution.js";
import type { StartDecision } from "./start-decision.js";

/** Clocks that disagree (the cancel's, this worker's): a held start's first write is waited out by this much more. */
const CLOCK_SLACK_MS = 1_000;
/** How soon a next attempt whose predecessor has not ended looks again, at first. */
const PREDECESSOR_RECHECK_MS = 5_000;
/** ...and at most: SQS delays a message up to 15 minutes. */
const PREDECESSOR_RECHECK_MAX_MS = 900_000;

export type PredecessorDecision =
  | {
      readonly action: "run";
      /** The attempt the one-off's occurrence was filed at (`filedAtThisAttempt`): it stands in for it. */
      readonly filedAttempt?: true;
    }
  | { readonly action: "wait"; readonly reason: string; readonly recheckAt: Date }
  | {
      readonly action: "end";
      readonly ending: Pick<RunEnding, "status" | "reason" | "completesJob">;
    };

/**
 * Whether a failure's next attempt (`run.retryOf`, written before its predecessor's FAILED
 * ending) runs, from its predecessor as read after the start. FAILED: it runs. Not ended yet
 * (its worker died or lost its fence between the two writes, or is still writing): it waits, a
 * little longer at each of its starts and not before the predecessor's lease lapses, since the
 * predecessor may still fail (again) and its ending then lets this attempt run (a cancelled run,
 * fence 0, is looked at again sooner: any ending of it lets the attempt run). Ended otherwise
 * (succeeded on a later start, dead, cancelled, skipped): SKIPPED, naming it, so the occurrence
 * has no attempt its predecessor did not ask for. A one-off's occurrence cancelled by a pause is
 * the exception: its resume gives it a next attempt, and this is that attempt; a failure's retry
 * or a replay so cancelled gives a retry (`DueEntry.retryAgain`), which runs at its time even
 * once the one-off was moved away, as it would have unpaused (not a triggered run's or a
 * dependent's, which no resume gives back: `retriedAfterPause`). So is an attempt the one-off's
 * occurrence was filed at again (`filedAtThisAttempt`): it is that occurrence's run. A
 * predecessor gone (its TTL passed: it was written a retention ago) has ended long since: the
 * attempt runs.
 */
export function decideOnPredecessor(
  job: Job,
  run: Run,
  predecessor: Run | null,
  now: Date,
  /** The run's attempt 1 was a trigger's (`retriedAfterPause`'s runs only: read for them alone). */
  ofTriggeredRun = false,
): PredecessorDecision {
  if (predecessor === null || predecessor.status === "FAILED") return { action: "run" };
  if (predecessor.status === "QUEUED" || predecessor.status === "RUNNING") {
    const backoff = PREDECESSOR_RECHECK_MS * 2 ** Math.max(0, run.fence - 1);
    const leaseLeft =
      predecessor.leaseUntil === null ? 0 : Date.parse(predecessor.leaseUntil) - now.getTime();
    // A run asked to cancel (fence 0) ends at its worker's next heartbeat, well within its
    // lease, and whatever it ends as the attempt runs: it looks again after the backoff alone, not
    // past the lease, which only a predecessor that may still fail (again) is waited out for.
    const afterCancel = run.retryOf?.fence === 0 && leaseLeft > 0;
    const waitMs = Math.min(
      PREDECESSOR_RECHECK_MAX_MS,
      afterCancel ? Math.min(backoff, leaseLeft + 1_000) : Math.max(backoff, leaseLeft + 1_000),
    );
    return {
      action: "wait",
      reason: `waiting: ${predecessor.runId} has not ended (${predecessor.status})`,
      recheckAt: new Date(now.getTime() + waitMs),
    };
  }
  // Fence 0 names no failed start: a cancelled run, which the attempt (a resume's, an edit's back
  // to its time) only waits for (`afterCancelledRun`). Ended, it runs as the start
  // decided, as such an attempt did before it named the run: a retry filed again (`retryAgain`)
  // still runs once its one-off is made recurring. One a cancel ended never started may have had
  // its start held unwritten: it is waited out until that start's first write.
  if (run.retryOf?.fence === 0) {
    const heldUntil = heldStartLearnsBy(predecessor);
    if (heldUntil === null || heldUntil <= now.getTime()) return { action: "run" };
    return {
      action: "wait",
      reason: `waiting: ${predecessor.runId} was cancelled unstarted, and its handler may run on until its first write`,
      recheckAt: new Date(heldUntil),
    };
  }
  if (
    predecessor.status === "CANCELLED" &&
    predecessor.cancelledBy === "pause" &&
    isOneOffOccurrence(job, run.scheduledFor)
  )
    return { action: "run" };
  if (retriedAfterPause(job, run, predecessor) && !ofTriggeredRun) return { action: "run" };
  if (filedAtThisAttempt(job, run)) return { action: "run", filedAttempt: true };
  return {
    action: "end",
    ending: {
      status: "SKIPPED",
      reason: retryNotRunReason(predecessor),
      completesJob: job.status === "ACTIVE" && endsOneOff(job, run, "SKIPPED"),
    },
  };
}

/**
 * Whether an edit back to the one-off's time, or a resume, filed its occurrence at this very
 * attempt (`oneOffAttempt`) after the attempt before it was cancelled or ended: a failure of that
 * attempt that put its own next attempt first holds the occurrence's key, and, re-sent by the
 * reaper before the filing's claim, is the occurrence's run. It runs, as the claim's put over it
 * would have (`OWN_RETRY_NEVER_RUN`); skipped, it ended the one-off unrun (completed it, its
 * attempt being the filed one), and the claim then found the job completed or the key handled.
 */
const filedAtThisAttempt = (job: Job, run: Run) =>
  isOneOffOccurrence(job, run.scheduledFor) &&
  oneOffAttemptOf(job, run.scheduledFor) === run.attempt;

/**
 * Whether a cancel ended the run never started (fence 0): found QUEUED, though a worker may be
 * running it with its start held unwritten (run-fence.ts), which a one-off's run leaves no trace of.
 */
export const cancelledUnstarted = (run: Pick<Run, "status" | "fence">) =>
  run.status === "CANCELLED" && run.fence === 0;

/**
 * When a worker holding the start of `run`, cancelled unstarted, has surely made its first write
 * (which fails on the cancel and aborts its handler): a held start's first write comes within a
 * heartbeat of its take, which came before the cancel, and a second more covers clocks that
 * disagree. Null for any other run.
 */
function heldStartLearnsBy(run: Run): number | null {
  if (!cancelledUnstarted(run) || run.finishedAt == null) return null;
  return Date.parse(run.finishedAt) + MAX_HEARTBEAT_MS + CLOCK_SLACK_MS;
}

/**
 * Whether the run follows a failure's retry or a replay, of a one-off's occurrence moved away
 * since, that a pause cancelled: the retry its resume would have filed (`DueEntry.retryAgain`),
 * and so run. A dependent's run (`trigger`) is no occurrence of the one-off, nor is a triggered
 * run, which a later attempt does not say: its attempt 1 does (`afterPredecessor` reads it).
 * Neither is given back by a resume: the pause's cancel stands, and the attempt is skipped. So is
 * a recurring job's occurrence made a one-off since: the attempt says whether its predecessor was
 * the one-off's when it failed (`RetryOf.oneOff`). A one-off made recurring since is moved away
 * too (`retryLeftByMove` files such a retry for that move): the retry runs, as one no pause
 * cancelled does.
 */
function retriedAfterPause(job: Job, run: Run, predecessor: Run): boolean {
  return (
    predecessor.status === "CANCELLED" &&
    predecessor.cancelledBy === "pause" &&
    !isOneOffOccurrence(job, run.scheduledFor) &&
    run.trigger === undefined &&
    run.retryOf?.oneOff === true &&
    isRetryOrReplay(predecessor)
  );
}

/**
 * A failure's next attempt runs only once the attempt before it says FAILED (`decideOnPredecessor`):
 * decided on that attempt as a first delivery read it with the run (`takeRun`), else on one
 * consistent read of it.
 */
export async function afterPredecessor(
  engine: Engine,
  job: Job,
  run: Run,
  readWithRun: Run | null | undefined,
): Promise<StartDecision | Extract<PredecessorDecision, { action: "wait" }>> {
  const predecessor =
    readWithRun === undefined ? await getRetryPredecessor(engine, run) : readWithRun;
  // One more consistent read, only where a triggered run's chain would otherwise run.
  const ofTriggeredRun =
    predecessor !== null &&
    run.retryOf?.fence !== 0 &&
    retriedAfterPause(job, run, predecessor) &&
    !(await isOccurrenceRun(engine, run));
  const decided = decideOnPredecessor(job, run, predecessor, engine.clock(), ofTriggeredRun);
  if (decided.action === "run")
    return { action: "run", job, ...(decided.filedAttempt ? { filedAttempt: true } : {}) };
  if (decided.action === "end") return decided;
  engine.obs.log.info("a next attempt waits for the attempt before it to end", {
    ...runLogKeys(run),
    predecessor: run.retryOf?.runId,
    recheckAt: decided.recheckAt.toISOString(),
  });
  return decided;
}
