import type { Engine } from "../engine.js";
import { MAX_ATTEMPT, parseDueSortKey } from "../keys.js";
import {
  catchUpCountOf,
  type DueEntry,
  hasEnd,
  type Job,
  type RetryOf,
  type Run,
} from "../model.js";
import { runLogKeys } from "../observability.js";
import { plannedTime, windowMsOf } from "../schedule/index.js";
import { dueEntryKey } from "../storage/due-entries.js";
import { readDueEntry } from "../storage/job-edit.js";
import { latestAttemptOf } from "../storage/job-queries.js";
import { retractNextAttempt, retryNotRunReason } from "../storage/next-attempt.js";
import { runsOnAfterEndMs } from "../storage/retention.js";
import { getRetryPredecessor, isOccurrenceRun, runKeyOf, runOrigin } from "../storage/run-reads.js";
import { ValidationError } from "../validation.js";
import { afterCancelledRun } from "./retry-after-move.js";

/**
 * The due entry of the job's occurrence at `at` (its first attempt, unless `attempt` says
 * otherwise), filed as of `now`, at the occurrence's planned time (its jitter offset added, when
 * the job has a window). It carries the job's `catchUpCount`: the caller writes it for the job's
 * pending occurrence, in the middle of a fire_all catch-up that goes on from there.
 */
export function dueEntryFor(engine: Engine, job: Job, at: Date, now: Date, attempt = 1): DueEntry {
  const dueAt = plannedTime(job.jobId, at, windowMsOf(job.window), job.schedule);
  return {
    key: dueEntryKey(job.jobId, dueAt, attempt, now, engine.settings.shardCount),
    kind: "occurrence",
    jobId: job.jobId,
    tenantId: job.tenantId,
    dueAt: dueAt.toISOString(),
    scheduledFor: at.toISOString(),
    attempt,
    jobVersion: job.version,
    priority: job.priority,
    schedule: job.schedule,
    misfire: job.policies.misfire,
    ...(hasEnd(job)
      ? {
          end: {
            endAt: job.endAt ?? null,
            maxRuns: job.maxRuns ?? null,
            runsOnMs: runsOnAfterEndMs(job),
          },
        }
      : {}),
    queuedBefore: job.occurrencesQueued ?? 0,
    ...(catchUpCountOf(job) > 0 ? { catchUpCount: catchUpCountOf(job) } : {}),
    ...(job.window ? { window: job.window } : {}),
  };
}

/**
 * A one-off's claimed occurrence as a due entry again, at `attempt` (a run's next attempt after a
 * pause cancelled it): not counted again, the occurrence was counted when it was first claimed.
 * With `retryAgain`, in place of a failure's retry or a replay (`DueEntry.retryAgain`); with
 * `retryOf`, after a run a pause cancelled, which its worker waits for (`afterCancelledRun`).
 */
export function occurrenceAgain(
  engine: Engine,
  job: Job,
  scheduledFor: string,
  attempt: number,
  now: Date,
  follows: { readonly retryAgain?: boolean; readonly retryOf?: RetryOf | undefined } = {},
): DueEntry {
  const entry = dueEntryFor(engine, job, new Date(scheduledFor), now, attempt);
  return {
    ...entry,
    queuedBefore: Math.max(0, (entry.queuedBefore ?? 0) - 1),
    ...(follows.retryAgain === true ? { retryAgain: true } : {}),
    ...(follows.retryOf ? { retryOf: follows.retryOf } : {}),
  };
}

/**
 * The entry of the job's pending occurrence at `at`, filed again (an edit that keeps it): at the
 * attempt the job's entry names. A one-off's pending entry may be its run's next attempt (a
 * resume's, after a pause cancelled the run); filed at attempt 1, its claim would find that
 * attempt's run handled and move the job on with nothing pending. Such an entry is read (one
 * consistent read), so that one in place of a retry a pause cancelled stays so (`retryAgain`), and
 * one after a run a pause cancelled still waits for that run to end (`retryOf`).
 */
export async function pendingEntryAgain(
  engine: Engine,
  job: Job,
  at: Date,
  now: Date,
): Promise<DueEntry> {
  const attempt = job.nextDueKey ? (parseDueSortKey(job.nextDueKey.sk)?.attempt ?? 1) : 1;
  if (attempt === 1 || job.nextDueKey === null) return dueEntryFor(engine, job, at, now);
  const filed = await readDueEntry(engine, job.nextDueKey);
  return occurrenceAgain(engine, job, at.toISOString(), attempt, now, {
    retryAgain: filed?.retryAgain === true,
    retryOf: filed?.retryOf,
  });
}

/**
 * Whether `run` has ended or been asked to cancel (a pause's, an API cancel's, still running under
 * its worker's lease): its occurrence, filed again, runs as the next attempt. A FAILED run has not:
 * its next attempt was put before its ending (a retry entry, whose claim gives it that attempt),
 * and the occurrence filed again at that attempt would take the retry's key as a first attempt
 * stands in, to be skipped as one (late, or moved away) with the retry never run.
 */
function runGivenUp(run: Run): boolean {
  if (run.status === "FAILED") return false;
  return (run.status !== "QUEUED" && run.status !== "RUNNING") || Boolean(run.cancelRequestedAt);
}

interface GivenUpAttempt {
  readonly latest: Run;
  readonly ended: Run;
  readonly occurrenceRan: boolean;
  readonly retryOf?: RetryOf;
  /**
   * `latest` when it is a failure's retry, taken back here (`takeBackRetry`) or SKIPPED: a replay
   * of its dead predecessor may take its key (`stillARetry`).
   */
  readonly skippedRetry?: Run;
}

/**
 * A one-off's occurrence at `at` read to be filed again: its latest attempt (`latest`, whose next
 * attempt it is filed at), the run whose ending gave it up (`ended`) and what the next attempt
 * names to wait for (`retryOf`). The latest attempt has ended or been asked to cancel
 * (`runGivenUp`), or it is a failure's next attempt still QUEUED that will not run: its
 * predecessor ended otherwise than FAILED or is asked to cancel (an API cancel, a job cancel: not
 * a pause's, whose one-off's occurrence runs that attempt), so that attempt is taken back or
 * skipped by its worker (`decideOnPredecessor`). Met at attempt 1 as a run under way, such an
 * occurrence was lost: the claim found attempt 1's run handled, and the retry was skipped. The
 * next attempt names it under fence 0 and waits for it to end. `underWay` (that run) when the
 * latest attempt is still under way, null when there is none: the occurrence is filed at attempt
 * 1, by a write conditioned on that run still under way (`runStillUnderWay`). `occurrenceRan`: the
 * ending SUCCEEDED as an occurrence's run (`isOccurrenceRun`), so the occurrence has run and is
 * not filed again. One consistent query of one item, one read more for a QUEUED retry, and one for
 * a later attempt that succeeded.
 */
export async function givenUpAttemptAt(
  engine: Engine,
  jobId: string,
  at: string,
): Promise<GivenUpAttempt | { readonly underWay: Run } | null> {
  const latest = await latestAttemptOf(engine, jobId, at);
  if (latest === null) return null;
  const occurrenceRan = async (ended: Run) =>
    ended.status === "SUCCEEDED" && (await isOccurrenceRun(engine, ended));
  if (runGivenUp(latest)) {
    const retryOf = afterCancelledRun(latest);
    const ran = await occurrenceRan(latest);
    const skippedRetry =
      latest.status === "SKIPPED" && latest.retryOf ? { skippedRetry: latest } : {};
    return {
      latest,
      ended: latest,
      occurrenceRan: ran,
      ...(retryOf ? { retryOf } : {}),
      ...skippedRetry,
    };
  }
  const ended = await predecessorThatNeverFails(engine, latest);
  if (ended === null) return { underWay: latest };
  await takeBackRetry(engine, latest, ended);
  const retryOf: RetryOf = { runId: latest.runId, fence: 0, oneOff: true };
  return {
    latest,
    ended,
    occurrenceRan: await occurrenceRan(ended),
    retryOf,
    skippedRetry: latest,
  };
}

/**
 * Takes back a failure's next attempt that will not run (`retry`, its predecessor `ended`), as the
 * failure's worker does once its ending is refused (`retractNextAttempt`): SKIPPED, only as it was
 * put (QUEUED, never started). Its message is due at the failure's backoff (up to the retry
 * policy's longest delay), when its worker would skip it: the occurrence filed after it, which
 * waits for it to end, would wait that long. Best effort: a failed write is logged, and the
 * attempt is skipped at its time, as before.
 */
async function takeBackRetry(engine: Engine, retry: Run, ended: Run): Promise<void> {
  if (retry.retryOf === undefined) return;
  // A run asked to cancel ends CANCELLED (no other ending of it can be written).
  const status =
    ended.status === "QUEUED" || ended.status === "RUNNING" ? "CANCELLED" : ended.status;
  const reason = retryNotRunReason({ runId: ended.runId, status });
  await retractNextAttempt(
    engine,
    { runItem: runKeyOf(retry) },
    retry.retryOf.fence,
    reason,
    engine.clock(),
  ).catch((error: unknown) => {
    engine.obs.log.warn("could not take back a next attempt; its worker will skip it", {
      ...runLogKeys(retry),
      error: String(error),
    });
  });
}

/**
 * The predecessor of `run`, a failure's next attempt still QUEUED, when it will never say FAILED
 * (so `run` will not run); null otherwise, or when `run` is no such attempt.
 */
async function predecessorThatNeverFails(engine: Engine, run: Run): Promise<Run | null> {
  if (run.status !== "QUEUED" || run.retryOf === undefined || run.retryOf.fence === 0) return null;
  const predecessor = await getRetryPredecessor(engine, run);
  if (predecessor === null || predecessor.cancelledBy === "pause") return null;
  return runGivenUp(predecessor) ? predecessor : null;
}

/**
 * The attempt at which a one-off's occurrence at `runAt` is filed when an edit gives the job that
 * `runAt`. A run of that time may exist already: the occurrence's own, moved away and back, whose
 * run a pause cancelled or its worker skipped meanwhile, or a recurring job's run made a one-off at
 * its time. Filed at attempt 1, its claim would find that attempt's run handled and move the job on
 * with nothing pending, ACTIVE and never run: it is filed at the latest run's next attempt, as a
 * resume files a run a pause cancelled (`givenUpAttemptAt`, which also counts a failure's retry
 * still QUEUED that will not run). An occurrence's run still under way (a FAILED one too: its
 * retry is to come) is met by the claim at attempt 1, as before; it is returned (`underWay`), for
 * the edit's commit is conditioned on it still under way (`runStillUnderWay`): ended in between
 * (skipped by its worker as an occurrence the job no longer has, say), it was not seen, and the
 * claim at attempt 1 found it handled, the one-off ACTIVE with nothing pending. The latest run at
 * the last attempt a run can have leaves none: the edit is refused. So is one that SUCCEEDED as
 * an occurrence's run (its own, a failure's retry of it run at its old time after a move away, a
 * recurring job's): the next attempt would be that occurrence's second success, under the same
 * idempotency key. So is the time of a run that is no occurrence's, a triggered or a dependent's,
 * whatever its status (`refuseNoOccurrenceTime`): that time is the run's own. After a cancelled
 * run, the attempt names it (`retryOf`, `afterCancelledRun`): its worker may still hold it, and
 * the next attempt waits for it to end. One consistent read of one run item (more for a later
 * attempt, whose first says whether it was triggered, or a QUEUED retry), made by schedule edits
 * to a one-off only.
 */
export async function attemptForRunAt(
  engine: Engine,
  jobId: string,
  runAt: Date,
): Promise<{
  readonly attempt: number;
  readonly retryOf?: RetryOf | undefined;
  readonly underWay?: Run;
  readonly skippedRetry?: Run | undefined;
}> {
  const given = await givenUpAttemptAt(engine, jobId, runAt.toISOString());
  if (given === null) return { attempt: 1 };
  await refuseNoOccurrenceTime(engine, "underWay" in given ? given.underWay : given.latest);
  if ("underWay" in given) return { attempt: 1, underWay: given.underWay };
  const { latest, ended } = given;
  if (given.occurrenceRan)
    throw new ValidationError([
      {
        field: "schedule.runAt",
        message: `its run at ${ended.scheduledFor} succeeded (${ended.runId}): that occurrence has run, and would run a second time; give another runAt`,
      },
    ]);
  if (latest.attempt >= MAX_ATTEMPT)
    throw new ValidationError([
      {
        field: "schedule.runAt",
        message: `its run at ${latest.scheduledFor} has had attempt ${latest.attempt}, the last attempt a run can have: give another runAt`,
      },
    ]);
  return { attempt: latest.attempt + 1, retryOf: given.retryOf, skippedRetry: given.skippedRetry };
}

/**
 * Refuses a `runAt` at the time of `held`, a run there that is no occurrence's: a triggered run,
 * or a dependent's run queued after its upstream (`runOrigin`), whatever its status; or a later
 * attempt whose first attempt has expired, which cannot be told from an occurrence's. The
 * time is that run's identity (its `webhook-id` and `Idempotency-Key`): the one-off's occurrence
 * filed there would be that run's next attempt, delivered under its key (a receiver applying each
 * key once drops it), counted against its attempts, and would take the key a replay of it needs.
 */
async function refuseNoOccurrenceTime(engine: Engine, held: Run): Promise<void> {
  const origin = await runOrigin(engine, held);
  if (origin === "occurrence") return;
  const status = `${held.runId}, ${held.status.toLowerCase()}`;
  // A later attempt says nothing of its trigger: with its first attempt expired (a replay outlives
  // it), it may be a triggered run's, and is refused as one could be.
  if (origin === "firstGone")
    throw new ValidationError([
      {
        field: "schedule.runAt",
        message: `${held.scheduledFor} is the time of a run whose first attempt has expired, so it cannot be told whether it is an occurrence's or a triggered run (${status}) or a dependent's, which keeps that time as its own: give another runAt`,
      },
    ]);
  const run = held.trigger ? `the run queued after ${held.trigger.runId}` : "a triggered run";
  throw new ValidationError([
    {
      field: "schedule.runAt",
      message: `${held.scheduledFor} is the time of ${run} (${status}), which is no occurrence of the schedule and keeps that time as its own: give another runAt`,
    },
  ]);
}

/**
 * Whether an end (`endAt`, `maxRuns`) lets an occurrence at `atMs` run, with `queued` occurrences
 * counted before it: not after `endAt`, and fewer than `maxRuns` queued.
 */
function endLets(end: Pick<Job, "endAt" | "maxRuns">, atMs: number, queued: number): boolean {
  if (end.endAt && atMs > Date.parse(end.endAt)) return false;
  return end.maxRuns === undefined || end.maxRuns === null || queued < end.maxRuns;
}

/**
 * `at` when the job's end condition still lets an occurrence there run: not after `endAt`, and
 * fewer than `maxRuns` occurrences queued so far. Null when the job has ended before it.
 */
export function withinJobEnd(job: Job, at: Date | null): Date | null {
  return at !== null && endLets(job, at.getTime(), job.occurrencesQueued ?? 0) ? at : null;
}

/**
 * Whether the job's end condition, as `entry` carries it, lets the entry's occurrence run: not
 * after `endAt`, and fewer than `maxRuns` occurrences queued before it (an occurrence filed again
 * is not counted again, `occurrenceAgain`). Its claim would cut it so (`withinEnd`, plan-claim.ts).
 */
export function entryWithinEnd(entry: DueEntry): boolean {
  return endLets(entry.end ?? {}, Date.parse(entry.scheduledFor), entry.queuedBefore ?? 0);
}
