import { CANCEL_REASONS } from "../cancel-reasons.js";
import { forEachConcurrently } from "../concurrency.js";
import { dispatchAfterCommit } from "../dispatch/fast-path.js";
import type { Engine } from "../engine.js";
import { IllegalTransitionError } from "../errors.js";
import { endsOneOff } from "../execution/run-endings.js";
import { MAX_ATTEMPT, parseRunId, shardOf } from "../keys.js";
import { type DueEntry, hasEnd, isRetryOrReplay, type Job, type Run } from "../model.js";
import { sendRuns } from "../queue/work-queue.js";
import { recordShardCount } from "../shard-count.js";
import { inflightPk, runMessageOf } from "../storage/items.js";
import { latestAttemptOf } from "../storage/job-queries.js";
import { writeResumedJob } from "../storage/job-status.js";
import { putNextAttempt } from "../storage/next-attempt.js";
import { endRunAsSeen } from "../storage/run-end-unowned.js";
import { rearmParkedRun } from "../storage/run-park.js";
import { getJob } from "../storage/run-reads.js";
import { dueEntryFor, entryWithinEnd, givenUpAttemptAt, occurrenceAgain } from "./due-entry.js";
import { getTenantJob } from "./queries.js";
import {
  afterCancelledRun,
  cancelledByPause,
  type QueuedAttempt,
  retriesCancelledElsewhere,
} from "./retry-after-move.js";
import { withJob } from "./with-job.js";

/** What a resume wrote: its pending entry, the parked runs, the job. */
interface Resumed {
  readonly entry: DueEntry | null;
  readonly parked: Run[];
  readonly job: Job;
}

/**
 * Resumes a paused job: its pending occurrence gets its due entry back (the
 * claim applies the misfire policy to what fell due meanwhile; a one-off whose
 * run the pause cancelled gets its occurrence back too), and the runs
 * parked while it was paused are sent again (their workers apply the misfire
 * policy at start). Each parked run gets its reaper deadline back before the
 * job says ACTIVE, so a resume that dies before sending loses none of them. A
 * one-off whose cancelled run was the last attempt a run can have cannot run
 * again: its resume is refused, and nothing is written. A one-off's retries a
 * pause cancelled at occurrences it has left get their next attempts too, put
 * as runs just before the job's write (`retriesCancelledElsewhere`).
 */
export async function resumeJob(engine: Engine, tenantId: string, jobId: string): Promise<Job> {
  // The runs this resume put, over each plan: a job cancelled or deleted meanwhile refuses the
  // resume's write, and those its sweep passed over are ended here (`putUnlessJobEnded`); a
  // write refused by another change (an edit) is planned again, and the plan that commits finds
  // an earlier plan's runs there, as another's: all are sent once it has committed.
  const putHere: Run[] = [];
  const resumed = await withJob<Resumed | null>(engine, tenantId, jobId, async (job, now) => {
    if (job.status === "ACTIVE") return { done: null };
    if (job.status !== "PAUSED") throw new IllegalTransitionError("resume", job.status);
    // Before any write: a resume it refuses leaves the job and its parked runs as they were.
    const claimed = job.nextRunAt ? null : await claimedOneOff(engine, job, now);
    // Retries a pause cancelled at occurrences the one-off has left: put before the job's write.
    const elsewhere = await retriesCancelledElsewhere(engine, job, now);
    // Before the re-arming too: a one-off's occurrence with no attempt left refuses the resume.
    const filed = job.nextRunAt
      ? await pendingOccurrence(engine, job, job.nextRunAt, now)
      : undefined;
    // The end in force now applies to the pending occurrence, which edits while paused kept
    // whatever end they set (one may have lowered it, a later one lifted it again).
    const pending = filed?.due && !entryWithinEnd(filed.due) ? { due: null } : filed;
    const due = pending === undefined ? (claimed?.rerun ?? null) : pending.due;
    await recordShardCount(engine);
    const parked = await rearmParked(engine, job, now);
    // Nothing is left to run: the job's end (an edit while paused set it) leaves its pending
    // occurrence out, or a one-off's occurrence ended for good (or ran, `pending`) while paused.
    const completes =
      due === null && (hasEnd(job) || claimed?.ended === true || pending?.due === null);
    return {
      write: async () => {
        // Each on its own, not in the job's transaction, which holds 100 items where a one-off can
        // have left more such retries. Put while the job is PAUSED, a run the resume then fails to
        // send (it died) is sent by the reaper at its deadline, and its worker parks it while the
        // job stays PAUSED.
        const put = await putQueuedAttempts(engine, elsewhere);
        putHere.push(...put);
        return {
          entry: due,
          parked,
          job: await writeResumedJob(engine, job, due, now, completes, pending),
        };
      },
    };
  }).catch(async (error: unknown) => {
    await putUnlessJobEnded(engine, jobId, putHere);
    throw error;
  });
  if (resumed) {
    const { priority } = resumed.job;
    await sendResumedRuns(engine, jobId, [
      ...resumed.parked.map((run) => ({ ...run, priority })),
      ...putHere,
    ]);
    // The claim applies the misfire policy to whatever fell due while the job was paused.
    await dispatchAfterCommit(engine, resumed.entry, "resume");
  }
  return getTenantJob(engine, tenantId, jobId);
}

/** Sends the runs a resume (or a pause's check after one) gives back, at their due time or now. */
async function sendResumedRuns(engine: Engine, jobId: string, runs: readonly Run[]): Promise<void> {
  const now = engine.clock();
  await sendRuns(
    engine.sqs,
    engine.queues,
    runs.map((run) => {
      const dueAt = new Date(Math.max(Date.parse(run.dueAt), now.getTime()));
      return {
        message: { ...runMessageOf(run), dueAt: dueAt.toISOString() },
        dueAt,
      };
    }),
    now,
  ).catch((error: unknown) => {
    // Each run has its reaper deadline (given back, or its first): the reaper sends what this could not.
    engine.obs.log.warn("resume could not send every parked run; the reaper will", {
      jobId,
      error: String(error),
    });
  });
}

/**
 * The due entry of the pending occurrence at `nextRunAt`. A one-off's may be a run's next attempt:
 * a resume gave back a run a pause cancelled, and a pause came before that attempt was claimed
 * (the pause deletes the entry, which named the attempt). Its run's latest attempt says so (or a
 * failure's retry still QUEUED that will not run, `givenUpAttemptAt`); filed at attempt 1, its
 * claim would find that attempt's run handled and move the job on with nothing pending. Any other
 * occurrence is filed at its first attempt. Null when the one-off's occurrence has run: an edit
 * while paused gave it back a time whose run, under way then (met at attempt 1), has since
 * SUCCEEDED as an occurrence's (the edit refuses such a time, `attemptForRunAt`); filed at its next
 * attempt, the occurrence ran a second time. One consistent read more, for such a success alone.
 * With the run met under way there (`underWay`), filed at attempt 1: the resume's write is
 * conditioned on it still under way (`runStillUnderWay`), for one that ended between this read and
 * that write (succeeded, dead, cancelled) left the one-off ACTIVE with nothing pending. Filed after
 * a failure's retry taken back or read SKIPPED (`skippedRetry`): the write is conditioned on it
 * still a retry (`stillARetry`), for a replay of its dead predecessor put over it between this read
 * and that write ran beside the attempt filed.
 */
async function pendingOccurrence(
  engine: Engine,
  job: Job,
  nextRunAt: string,
  now: Date,
): Promise<{
  readonly due: DueEntry | null;
  readonly underWay?: Run;
  readonly skippedRetry?: Run | undefined;
}> {
  const first = () => ({ due: dueEntryFor(engine, job, new Date(nextRunAt), now) });
  if (!("runAt" in job.schedule) || Date.parse(job.schedule.runAt) !== Date.parse(nextRunAt))
    return first();
  const given = await givenUpAttemptAt(engine, job.jobId, job.schedule.runAt);
  if (given === null) return first();
  if ("underWay" in given) return { ...first(), underWay: given.underWay };
  if (given.occurrenceRan) return { due: null };
  if (given.latest.attempt >= MAX_ATTEMPT) throw noAttemptLeft(job, given.latest, "");
  return {
    due: await rerunOf(engine, job, given.latest, now, given.retryOf),
    skippedRetry: given.skippedRetry,
  };
}

/**
 * The refusal of a resume whose one-off's occurrence would be filed after its run at the last
 * attempt a run can have (attempts are four digits in keys): filed at attempt 1 instead, its claim
 * found that attempt's run handled, and the occurrence never ran.
 */
function noAttemptLeft(job: Job, latest: Run, how: string): IllegalTransitionError {
  return new IllegalTransitionError(
    "resume",
    job.status,
    `its run ${latest.runId}${how} is attempt ${latest.attempt}, the last attempt a run can have, and cannot run again; give the job a new runAt, or cancel it`,
  );
}

/**
 * The job's parked runs that are still QUEUED, each given its reaper deadline back. A parked run
 * whose TTL passed during the pause (a pause longer than the retention) is gone: a one-off's own
 * occurrence is given back by `claimedOneOff`; any other (a recurring job's occurrence, a
 * trigger's or a replay's run, all older than the retention) is logged and not run.
 */
async function rearmParked(engine: Engine, job: Job, now: Date): Promise<Run[]> {
  const { runs, expired } = await rearmParkedRuns(engine, job, now);
  if (expired.length > 0)
    engine.obs.log.warn("resume: parked runs expired during the pause (older than the retention)", {
      tenantId: job.tenantId,
      jobId: job.jobId,
      runIds: expired,
    });
  return runs;
}

/**
 * Gives each of the job's parked runs still QUEUED its reaper deadline back (rearmParkedRun): the
 * runs so re-armed, and the ids of those whose TTL passed during the pause.
 */
export async function rearmParkedRuns(
  engine: Engine,
  job: Job,
  now: Date,
): Promise<{ readonly runs: Run[]; readonly expired: string[] }> {
  const shardPk = inflightPk(shardOf(job.jobId, engine.settings.shardCount));
  const runs: Run[] = [];
  const expired: string[] = [];
  await forEachConcurrently(Object.keys(job.parkedRuns), 16, async (runId) => {
    const ref = parseRunId(runId);
    const run = ref ? await rearmParkedRun(engine, ref, shardPk, now) : "ended";
    if (run === "expired") expired.push(runId);
    else if (run !== "ended") runs.push(run);
  });
  return { runs, expired };
}

/**
 * What resume does with a one-off whose occurrence was claimed (nothing pending), from the
 * occurrence's latest attempt: a run the pause cancelled (ended, or still asked to) gets its next
 * attempt as a due entry (`rerun`), so the claim applies the misfire policy to it as to any
 * occurrence that fell due while the job was paused; a run that ended for good while the job was
 * paused (its ending completes a one-off only while ACTIVE) completes the job (`ended`). Queued,
 * parked, running and failed runs (with their next attempt) end the job themselves. A cancelled
 * run at the last attempt has no next attempt: IllegalTransitionError.
 */
async function claimedOneOff(
  engine: Engine,
  job: Job,
  now: Date,
): Promise<{ readonly rerun?: DueEntry; readonly ended?: boolean } | null> {
  if (!("runAt" in job.schedule)) return null;
  const latest = await latestAttemptOf(engine, job.jobId, job.schedule.runAt);
  if (latest === null) return expiredOneOff(engine, job, job.schedule.runAt, now);
  if (cancelledByPause(latest)) {
    if (latest.attempt >= MAX_ATTEMPT)
      throw noAttemptLeft(job, latest, ", which the pause cancelled,");
    return { rerun: rerunOf(engine, job, latest, now) };
  }
  const ended =
    latest.status !== "QUEUED" &&
    latest.status !== "RUNNING" &&
    endsOneOff(job, latest, latest.status);
  return { ended };
}

/**
 * A claimed one-off whose occurrence has no run left: its runs' TTL passed while the job was
 * paused (a pause longer than the retention; a run's retention counts from when it was written).
 * A run the job lists as parked never ran: the occurrence is given back at that attempt, whose key
 * is free again, and the claim applies the misfire policy to it. Otherwise its run ended while the
 * job was paused and has expired since: nothing is left to run, and the resume completes the job.
 */
function expiredOneOff(
  engine: Engine,
  job: Job,
  runAt: string,
  now: Date,
): { readonly rerun?: DueEntry; readonly ended?: boolean } {
  const parkedAttempts = Object.keys(job.parkedRuns).flatMap((runId) => {
    const ref = parseRunId(runId);
    return ref !== null && Date.parse(ref.scheduledFor) === Date.parse(runAt) ? [ref.attempt] : [];
  });
  if (parkedAttempts.length === 0) return { ended: true };
  return { rerun: occurrenceAgain(engine, job, runAt, Math.max(...parkedAttempts), now) };
}

/**
 * The due entry of the next attempt of a one-off's run that a pause cancelled (one below the last
 * attempt), or that ended otherwise (`pendingOccurrence`). The run's key makes it one run however
 * many writers plan it; the occurrence was counted when it was first claimed and is not counted
 * again. A failure's retry or a replay the pause cancelled is filed as one (`retryAgain`). After a
 * run the pause cancelled, it names that run (`retryOf`): its worker may still hold it under a live
 * lease, and the next attempt waits for it to end rather than run beside it; after a failure's
 * retry that will not run, it names that retry (`retryOf`, from `givenUpAttemptAt`).
 */
function rerunOf(
  engine: Engine,
  job: Job,
  latest: Run,
  now: Date,
  retryOf = afterCancelledRun(latest),
): DueEntry {
  return occurrenceAgain(engine, job, latest.scheduledFor, latest.attempt + 1, now, {
    retryAgain: cancelledByPause(latest) && isRetryOrReplay(latest),
    retryOf,
  });
}

/**
 * A pause with `running: "cancel"` writes its cancel requests after the pause has committed: a
 * resume that committed in between found the one-off's run still running, uncancelled, and left
 * nothing pending. Once the requests are written, an ACTIVE one-off with nothing pending whose
 * latest run the pause cancelled gets that run's next attempt here, as the resume would have; at
 * the last attempt a run can have there is none, and the one-off, with nothing left to run, is
 * completed (the resume that would have refused has committed). So does a retry it cancelled at
 * an occurrence the one-off has left (`retriesCancelledElsewhere`): its next attempt is put here
 * (on a free key: a repeat's, or the resume's own, finds it there) and sent.
 */
export async function rerunIfResumedMeanwhile(
  engine: Engine,
  tenantId: string,
  jobId: string,
): Promise<void> {
  type Planned = { entry: DueEntry | null; elsewhere: QueuedAttempt[] } | null;
  const planned = await withJob<Planned>(engine, tenantId, jobId, async (job, now) => {
    if (job.status !== "ACTIVE" || !("runAt" in job.schedule)) return { done: null };
    const elsewhere = await retriesCancelledElsewhere(engine, job, now);
    const pending = job.nextDueKey !== null || job.nextRunAt !== null;
    const latest = pending ? null : await latestAttemptOf(engine, job.jobId, job.schedule.runAt);
    if (latest === null || !cancelledByPause(latest)) return { done: { entry: null, elsewhere } };
    const rerun = latest.attempt < MAX_ATTEMPT ? rerunOf(engine, job, latest, now) : null;
    return {
      write: async () => {
        await recordShardCount(engine);
        await writeResumedJob(engine, job, rerun, now, rerun === null);
        return { entry: rerun, elsewhere };
      },
    };
  });
  if (planned === null) return;
  await dispatchAfterCommit(engine, planned.entry, "resume");
  // Sent only where this put it: a run already there is the resume's (sent) or a repeat's.
  const put = await putQueuedAttempts(engine, planned.elsewhere);
  await sendResumedRuns(engine, jobId, await putUnlessJobEnded(engine, jobId, put));
}

/**
 * The runs a resume (or a pause's check after one) put with plain PutItems, outside any write of
 * the job, so a job cancel or a delete that committed since the job was read may have swept the
 * one-off's runs before they landed: the job is read again (one consistent read, made only when
 * runs were put), and if it is cancelled, gone or marked by a delete, each is ended CANCELLED as
 * the cancel would have (conditioned on it as put: a worker that took it ends it itself) and none
 * is answered. A cancel that commits after this read sweeps them itself: they were put before it.
 * Otherwise answers them all, and so when the read or an ending fails (logged): the reaper sends
 * them at their deadline, and their worker ends them if the job has ended.
 */
async function putUnlessJobEnded(engine: Engine, jobId: string, put: Run[]): Promise<Run[]> {
  if (put.length === 0) return put;
  try {
    const job = await getJob(engine, jobId);
    if (job !== null && job.status !== "CANCELLED" && job.deleteRequestedAt === undefined)
      return put;
    const now = engine.clock();
    await forEachConcurrently(put, 16, async (run) => {
      await endRunAsSeen(engine, run, "CANCELLED", CANCEL_REASONS["job-cancel"], now, {
        by: "job-cancel",
      });
    });
    return [];
  } catch (error) {
    // Left as put: each has its reaper deadline, and its worker ends it if the job has ended.
    engine.obs.log.warn("could not check the job after putting runs; the reaper will send them", {
      jobId,
      error: String(error),
    });
    return put;
  }
}

/** Puts each attempt's QUEUED run on a free key: the runs this put (a run there is another's). */
async function putQueuedAttempts(
  engine: Engine,
  attempts: readonly QueuedAttempt[],
): Promise<Run[]> {
  const put: Run[] = [];
  await forEachConcurrently(attempts, 16, async ({ run, item }) => {
    if (await putNextAttempt(engine, { runItem: item }, "resume")) put.push(run);
  });
  return put;
}
