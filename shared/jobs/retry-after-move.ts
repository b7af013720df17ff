import type { Engine } from "../engine.js";
import { cancelledUnstarted } from "../execution/retry-predecessor.js";
import { MAX_ATTEMPT } from "../keys.js";
import { type DueEntry, isRetryOrReplay, type Job, type RetryOf, type Run } from "../model.js";
import { runLogKeys } from "../observability.js";
import type { ScheduleSpec } from "../schedule/index.js";
import { dueEntryKey } from "../storage/due-entries.js";
import { readDueEntry } from "../storage/job-edit.js";
import { latestAttemptOf, latestAttemptsOfJob } from "../storage/job-queries.js";
import { queuedRun } from "../storage/runs.js";
import { oneOffPointsBelow, oneOffRunsFrom } from "./one-off-floor.js";

/** Whether a pause with `running: "cancel"` cancelled the run (or is cancelling it). */
export function cancelledByPause(run: Run): boolean {
  return run.cancelledBy === "pause" && (run.status === "CANCELLED" || run.status === "RUNNING");
}

/**
 * What a one-off's occurrence filed again after its run was cancelled (a resume's, an edit's back
 * to its time) names (`retryOf`): a run a pause cancelled, or any run still running under a cancel
 * request (a run cancel's through the API too), which its worker holds under a live lease until
 * its next heartbeat sees the cancel, or a run a cancel ended never started (fence 0): a worker
 * may run it with its start held unwritten, its handler on until that worker's first write. The
 * worker of the new attempt waits for it to end, or for that first write's time to pass
 * (`decideOnPredecessor`), so two attempts of one occurrence never run at once. Fence 0, the fence
 * of no start: no failure wrote it, so neither a failure's own retry of that run (put before its
 * refused ending) nor `retryLeftByMove`'s entry, which name its start's fence, puts over the run
 * this one queued, nor this one over theirs (`RETRY_RUN_PUT_CONDITION`). The one-off's (`oneOff`),
 * as `retryLeftByMove`'s. Undefined for any other run.
 */
export function afterCancelledRun(run: Run): RetryOf | undefined {
  const stillCancelling = run.status === "RUNNING" && Boolean(run.cancelRequestedAt);
  return cancelledByPause(run) || stillCancelling || cancelledUnstarted(run)
    ? { runId: run.runId, fence: 0, oneOff: true }
    : undefined;
}

/**
 * A paused one-off moved away from its occurrence (a new `runAt`, or a recurring schedule) whose
 * latest run there a pause cancelled as a failure's retry or a replay: that run's next attempt,
 * a retry entry due now. The resume would have filed it (`DueEntry.retryAgain`), but reads the
 * occurrence the job has by then, and a pause deletes an entry a resume filed and left unclaimed;
 * a retry no pause cancelled runs at its time whatever the edit, and so does this one (its claim
 * while paused queues a run its worker parks until the resume). It names the cancelled attempt
 * (`retryOf`, the one-off's: `oneOff`): its worker runs it once that attempt has ended
 * (`retriedAfterPause`), and its claim finds handled a run of it another writer put first (the
 * resume's after a move back). Null otherwise: a first attempt a pause cancelled stands in for the
 * occurrence, which the one-off's new time takes (`rerun`); a dependent's run is no occurrence of
 * it. An entry an earlier such edit filed for the same attempt, still unclaimed (`Job.retryLeftKey`,
 * one consistent read, made before the query so that a claim between the two is seen), is kept:
 * none is filed beside it. One consistent query of one item, made
 * by such edits alone.
 */
export async function retryLeftByMove(
  engine: Engine,
  job: Job,
  schedule: ScheduleSpec,
  now: Date,
): Promise<DueEntry | null> {
  if (job.status !== "PAUSED" || !("runAt" in job.schedule)) return null;
  if ("runAt" in schedule && Date.parse(schedule.runAt) === Date.parse(job.schedule.runAt))
    return null;
  // Read before the latest attempt: a claim puts its run before it deletes its entry, so an entry
  // gone here has its run seen by the query below; read after, a claim between the two reads
  // left neither seen, and a second entry was filed for the attempt that claim queued.
  const filed = job.retryLeftKey ? await readDueEntry(engine, job.retryLeftKey) : null;
  const latest = await latestAttemptOf(engine, job.jobId, job.schedule.runAt);
  if (
    latest === null ||
    !cancelledByPause(latest) ||
    !isRetryOrReplay(latest) ||
    latest.trigger !== undefined
  )
    return null;
  if (latest.attempt >= MAX_ATTEMPT) {
    logLastAttemptNotFiled(engine, latest);
    return null;
  }
  const attempt = latest.attempt + 1;
  // Moved away, back and away again before a pass claimed it: the entry an earlier move filed for
  // this attempt is still there (its claim puts the attempt's run, which `latest` would then be),
  // and a second, at another key, would send the run a second message. Kept, none is filed.
  if (filed?.attempt === attempt && filed.retryOf?.runId === latest.runId) return null;
  return {
    key: dueEntryKey(job.jobId, now, attempt, now, engine.settings.shardCount),
    kind: "retry",
    jobId: job.jobId,
    tenantId: job.tenantId,
    dueAt: now.toISOString(),
    scheduledFor: latest.scheduledFor,
    ...(latest.plannedFor ? { plannedFor: latest.plannedFor } : {}),
    attempt,
    jobVersion: latest.jobVersion,
    priority: job.priority,
    schedule: job.schedule,
    misfire: job.policies.misfire,
    retryOf: { runId: latest.runId, fence: latest.fence, oneOff: true },
  };
}

/** A next attempt put as a QUEUED run, and its item. */
export type QueuedAttempt = ReturnType<typeof queuedRun>;

/**
 * The next attempts of a one-off's failure retries and replays that a pause cancelled (ended, or
 * still asked to) at an occurrence that is no longer its own: a retry there runs at its old time
 * (`retryLeftByMove`'s, a failure's own), and a pause with `running: "cancel"` cancels it there,
 * however long ago that was (`cancelRunsOfJob`). The resume gives the one-off's own occurrence its
 * next attempt (`claimedOneOff`), and these their own, as it would have given them had they been
 * its own (`retryAgain`): each a QUEUED run due now, naming the cancelled attempt under fence 0
 * (`afterCancelledRun`), so its worker waits for that attempt to end and then runs it. A run, not
 * an entry: its key (the attempt) keeps it one run however many resumes file it, where entries
 * filed apart lie under different keys. One `retryLeftByMove` filed for the same attempt, still
 * unclaimed, is kept (read first, as there), and none is put beside it. Not a triggered run's or
 * a dependent's, which no resume gives back, nor a first attempt's or a `rerun`'s, which the
 * one-off's new time took. One consistent query of the one-off's runs from its floor
 * (`oneOffRunsFrom`), and one of each occurrence it keeps below it (`oneOffBelow`), never a
 * recurring history it had before.
 */
export async function retriesCancelledElsewhere(
  engine: Engine,
  job: Job,
  now: Date,
): Promise<QueuedAttempt[]> {
  if (!("runAt" in job.schedule)) return [];
  const own = Date.parse(job.schedule.runAt);
  const filed = job.retryLeftKey ? await readDueEntry(engine, job.retryLeftKey) : null;
  const from = oneOffRunsFrom(engine, job, job.schedule.runAt, now);
  const below = oneOffPointsBelow(job).map((at) => new Date(at));
  const attempts = await latestAttemptsOfJob(engine, job.jobId, from, below);
  return attempts.flatMap(({ latest, triggered }) => {
    const retryOf = afterCancelledRun(latest);
    // A pause's cancel alone: a run cancel through the API, still running under its worker's lease
    // (`afterCancelledRun` names that too), ends the attempt for good, as once it has landed.
    if (
      retryOf === undefined ||
      !cancelledByPause(latest) ||
      // A retry whose failed attempt was not the one-off's (a recurring job's, made a one-off
      // since): a pause's cancel of it stands (`RetryOf.oneOff`), as its worker reads it.
      (latest.retryOf !== undefined && latest.retryOf.oneOff !== true) ||
      Date.parse(latest.scheduledFor) === own ||
      !isRetryOrReplay(latest) ||
      triggered ||
      latest.trigger !== undefined ||
      (filed?.attempt === latest.attempt + 1 && filed.retryOf?.runId === latest.runId)
    )
      return [];
    if (latest.attempt >= MAX_ATTEMPT) {
      logLastAttemptNotFiled(engine, latest);
      return [];
    }
    const spec = {
      jobId: job.jobId,
      tenantId: job.tenantId,
      scheduledFor: new Date(latest.scheduledFor),
      dueAt: now,
      ...(latest.plannedFor ? { plannedFor: new Date(latest.plannedFor) } : {}),
      attempt: latest.attempt + 1,
      priority: job.priority,
      jobVersion: latest.jobVersion,
      retryOf,
    };
    return [queuedRun(spec, now, engine.settings)];
  });
}

/**
 * A retry a pause cancelled at an occurrence the one-off has left, at the last attempt a run can
 * have (attempts are four digits in keys): it gets no next attempt, as a failure there is DEAD,
 * and the run reads CANCELLED by the pause. Logged, with its keys, so that an operator can tell
 * why the retry stopped.
 */
function logLastAttemptNotFiled(engine: Engine, latest: Run): void {
  engine.obs.log.warn(
    "a retry a pause cancelled is at the last attempt a run can have: no next attempt is filed",
    { ...runLogKeys(latest), scheduledFor: latest.scheduledFor },
  );
}
