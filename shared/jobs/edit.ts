import { dispatchAfterCommit, dispatchNow } from "../dispatch/fast-path.js";
import type { Engine } from "../engine.js";
import { IllegalTransitionError, SchedulerError, VersionMismatchError } from "../errors.js";
import {
  catchUpCountOf,
  type DueEntry,
  type HttpTarget,
  type Job,
  type JobPolicies,
  type Priority,
  type Run,
} from "../model.js";
import { giveBackJobQuotas, refusedUnwritten, reserveJobQuotas } from "../quotas/usage.js";
import {
  firstOccurrence,
  normalizeSchedule,
  type ScheduleSpec,
  sameSchedule,
} from "../schedule/index.js";
import { recordShardCount } from "../shard-count.js";
import { readDueEntry, writeEditedJob } from "../storage/job-edit.js";
import { oneOffAttemptAt } from "../storage/job-update.js";
import { type DependentLinks, detachAfterEdit, relinkDependent } from "./dependencies.js";
import {
  attemptForRunAt,
  dueEntryFor,
  occurrenceAgain,
  pendingEntryAgain,
  withinJobEnd,
} from "./due-entry.js";
import { recordRunsEndedBy } from "./ended-runs.js";
import { withOneOffEra, withOneOffFloor } from "./one-off-floor.js";
import { getTenantJob, listRuns } from "./queries.js";
import { retryLeftByMove } from "./retry-after-move.js";
import { withJob } from "./with-job.js";

export interface JobChanges {
  readonly name?: string;
  readonly schedule?: ScheduleSpec;
  readonly payload?: unknown;
  readonly target?: HttpTarget;
  readonly priority?: Priority;
  readonly timeoutSeconds?: number;
  readonly policies?: JobPolicies;
  /** null removes the end condition. */
  readonly endAt?: string | null;
  readonly maxRuns?: number | null;
  /** A new jitter window, or null to remove it: the pending due entry is refiled at its planned time. */
  readonly window?: string | null;
}

/**
 * Edits a job at the version the caller last saw. The version goes up and the
 * due entry is rewritten (it carries a copy of the schedule and version).
 * Runs already queued are not skipped: they run the job's definition as it is
 * when they start. An edit that keeps the schedule keeps the pending
 * occurrence. A new schedule starts now: its occurrences are claimed afresh
 * (a QUEUED run of the same occurrence is replaced, one already running is
 * kept), and queued first attempts of occurrences it does not have are
 * SKIPPED by their workers, unless the edit says `inFlight: "complete"`.
 * Occurrences the old schedule already had due are claimed before the edit.
 * A new `endAt` or `maxRuns` applies from the pending occurrence: when it
 * leaves nothing more to run, the job completes (runs already queued still
 * run, but first attempts of occurrences after `endAt`, which their workers skip).
 * A paused job's end applies at its resume: its pending occurrence is kept meanwhile.
 * A new `runAt` whose time has a run that ended or was cancelled runs as its next attempt.
 */
export async function editJob(
  engine: Engine,
  tenantId: string,
  jobId: string,
  expectedVersion: number,
  changes: JobChanges,
  { requestHash }: { readonly requestHash?: string } = {},
): Promise<Job> {
  try {
    return await editPlanned(engine, tenantId, jobId, expectedVersion, changes, requestHash);
  } catch (error) {
    if (error instanceof IllegalTransitionError && error.context.status === "COMPLETED") {
      throw await completedRefusal(engine, jobId);
    }
    throw error;
  }
}

/** How many of a completed job's newest runs its edit's 409 reads for its last occurrence. */
const COMPLETED_RUNS_READ = 100;

/**
 * The 409 of an edit of a completed job names how it completed: its newest run of an occurrence
 * (an edit after a dispatcher outage may have decided that occurrence itself, under the old
 * schedule's misfire policy, before finding the job complete). A triggered run is no occurrence
 * (a completed job may still be triggered) and did not complete it. A repeat of the edit reads
 * the same run; with no occurrence's run among the newest read, the 409 names none.
 */
async function completedRefusal(engine: Engine, jobId: string): Promise<IllegalTransitionError> {
  const ofOccurrence = (runs: readonly Run[]) =>
    runs.find((run) => run.triggered !== true && run.trigger === undefined);
  // The newest run alone first: a completed job is seldom triggered.
  const newest = (await listRuns(engine, jobId, { limit: 1 })).items;
  const last =
    newest.length === 0
      ? undefined
      : (ofOccurrence(newest) ??
        ofOccurrence((await listRuns(engine, jobId, { limit: COMPLETED_RUNS_READ })).items));
  if (last === undefined) return new IllegalTransitionError("edit", "COMPLETED");
  const status = last.status.toLowerCase();
  const how = last.reason ? `${status} (${last.reason})` : status;
  return new IllegalTransitionError(
    "edit",
    "COMPLETED",
    `it is completed: its last occurrence, due at ${last.scheduledFor}, was ${how}`,
  );
}

async function editPlanned(
  engine: Engine,
  tenantId: string,
  jobId: string,
  expectedVersion: number,
  changes: JobChanges,
  requestHash: string | undefined,
): Promise<Job> {
  const {
    entry: moved,
    links: committed,
    written,
  } = await withJob<{
    entry: DueEntry | null;
    links: DependentLinks | null;
    written: Job;
  }>(engine, tenantId, jobId, async (read, now) => {
    const checked = (job: Job) => {
      if (job.version !== expectedVersion)
        throw new VersionMismatchError(expectedVersion, job.version);
      if (job.status === "CANCELLED" || job.status === "COMPLETED")
        throw new IllegalTransitionError("edit", job.status);
      return job;
    };
    const normalized = changes.schedule
      ? { ...changes, schedule: normalizeSchedule(changes.schedule, now) }
      : changes;
    const current = checked(read);
    const changesSchedule =
      normalized.schedule !== undefined && !sameSchedule(normalized.schedule, current.schedule);
    // Bad input (an upstream not the tenant's, a cycle) and a quota refusal come before anything
    // is written, the claim below included. Neither reads what a claim changes (the job's next
    // occurrence): the links and the quota share depend on its schedule and its upstreams alone.
    const links =
      changesSchedule && normalized.schedule
        ? await relinkDependent(engine, current, normalized.schedule)
        : null;
    // Before the entry is filed in a shard, and before the share is reserved: its failure then
    // leaves the tenant's usage as it was.
    await recordShardCount(engine);
    const reservation =
      normalized.priority !== undefined || changesSchedule
        ? await reserveJobQuotas(
            engine,
            tenantId,
            {
              ...(normalized.priority !== undefined ? { priority: normalized.priority } : {}),
              jobs: 0,
              schedule: normalized.schedule ?? current.schedule,
              above: links?.above ?? new Map(),
              replaces: current,
            },
            now,
          )
        : null;
    // Occurrences already due were due under the old schedule: claim them first, as a dispatcher
    // would, so the misfire policy decides them rather than the edit dropping them unrecorded.
    // A claim leaves the version alone, so the caller's version is still the one checked.
    let job: Job;
    // A new runAt whose run ended or was cancelled is filed at that run's next attempt.
    let runAtFiled: Awaited<ReturnType<typeof attemptForRunAt>> = { attempt: 1 };
    // A paused one-off moved away from a retry a pause cancelled: that retry, filed beside.
    let retryEntry: DueEntry | null = null;
    const runAt =
      changesSchedule && normalized.schedule && "runAt" in normalized.schedule
        ? new Date(normalized.schedule.runAt)
        : null;
    try {
      // Read again for what the claim moved; still conditioned on the linkRevision the path check
      // and the share above read jobs below at: a job linked in below since then sends the edit
      // back to plan again (its claim done), else the re-read's revision would let it commit.
      // A runAt refused (its run succeeded, or has no attempt left) is refused before the claim,
      // so the 400 writes nothing. The claim puts QUEUED runs only, over no run that ended, so it
      // turns no runAt accepted here into one refused.
      if (runAt) runAtFiled = await attemptForRunAt(engine, jobId, runAt);
      const claimed = changesSchedule && (await claimDueBeforeEdit(engine, current, now));
      job = claimed
        ? {
            ...checked(await getTenantJob(engine, tenantId, jobId)),
            linkRevision: current.linkRevision ?? 0,
          }
        : current;
      if (changesSchedule && normalized.endAt === undefined) refuseKeptEndPassed(job, now);
      // Read again after a claim: a run it queued at that time is the occurrence's, under way.
      if (runAt && claimed) runAtFiled = await attemptForRunAt(engine, jobId, runAt);
      if (changesSchedule && normalized.schedule)
        retryEntry = await retryLeftByMove(engine, job, normalized.schedule, now);
    } catch (error) {
      await giveBackJobQuotas(engine, reservation);
      throw error;
    }
    const lastEdit = requestHash === undefined ? undefined : { from: job.version, requestHash };
    // A one-off's floor moves down to every occurrence it has as one (its reads start there); a
    // one-off made recurring keeps its occurrences as its era (its runs there are not listed).
    const floor =
      changesSchedule && normalized.schedule
        ? {
            ...withOneOffFloor(engine, job, normalized.schedule, now),
            ...withOneOffEra(engine, job, normalized.schedule, now),
            // A one-off's occurrence: its runs from the attempt filed complete it.
            ...("runAt" in normalized.schedule
              ? oneOffAttemptAt(job, normalized.schedule.runAt, runAtFiled.attempt)
              : {}),
          }
        : {};
    const edited: Job = {
      ...job,
      ...normalized,
      ...floor,
      ...(lastEdit ? { lastEdit } : {}),
      version: job.version + 1,
      updatedAt: now.toISOString(),
      // A fire_all catch-up of the old schedule was run out above (to its cap): the new schedule
      // starts now with none under way. An edit that keeps the schedule keeps the count, and the
      // rewritten entry carries it, so the catch-up goes on towards the same cap.
      catchUpCount: changesSchedule ? 0 : catchUpCountOf(job),
    };
    const unbounded = nextAfterEdit(job, edited, now);
    // A paused job keeps its pending occurrence whatever its end: the resume applies the end in
    // force then (a later edit may lift it), as its claim would. Nothing claims while it is paused.
    const next = job.status === "PAUSED" ? unbounded : withinJobEnd(edited, unbounded);
    // The new endAt or maxRuns leaves nothing more to run: the job is complete.
    const completes = unbounded !== null && next === null && job.status === "ACTIVE";
    // An occurrence kept is filed again at the attempt its entry names (a one-off's next attempt).
    const kept = next !== null && unbounded !== null && !changesSchedule;
    const entry =
      next && job.status === "ACTIVE"
        ? kept
          ? await pendingEntryAgain(engine, edited, next, now)
          : runAtFiled.attempt > 1
            ? occurrenceAgain(engine, edited, next.toISOString(), runAtFiled.attempt, now, {
                retryOf: runAtFiled.retryOf,
              })
            : dueEntryFor(engine, edited, next, now)
        : null;
    return {
      write: async () => {
        try {
          await writeEditedJob(
            engine,
            job,
            { ...normalized, ...floor },
            {
              nextRunAt: next,
              entry,
              now,
              completes,
              catchUpCount: edited.catchUpCount ?? 0,
              ...(lastEdit ? { lastEdit } : {}),
              retryEntry,
              runUnderWay: runAtFiled.underWay,
              // Filed where the edit read no run: conditioned on none put there since.
              runAtFiled:
                entry && runAt
                  ? { scheduledFor: runAt.toISOString(), attempt: runAtFiled.attempt }
                  : undefined,
              skippedRetry: runAtFiled.skippedRetry,
            },
            links?.writes ?? [],
          );
        } catch (error) {
          // Refused (the job changed since it was read, and is planned again): its share with it.
          if (refusedUnwritten(error)) await giveBackJobQuotas(engine, reservation);
          throw error;
        }
        const written: Job = {
          ...edited,
          nextRunAt: next?.toISOString() ?? null,
          nextDueKey: entry?.key ?? null,
          ...(completes ? { status: "COMPLETED" } : {}),
        };
        return { entry, links, written };
      },
    };
  });
  await detachAfterEdit(engine, jobId, committed);
  await dispatchAfterCommit(engine, moved, "edit");
  return jobAfterEdit(engine, tenantId, written);
}

/**
 * The committed edit as it stands, read again (the fast path may have claimed since), with the
 * ended runs a new schedule or end may leave to a later admission recorded now. The edit stands,
 * so storage failing here (throttled, a timeout) is logged, not answered: the caller would send
 * again an edit that stands. The answer is then the job as written, its ended runs left to its
 * next admission.
 */
async function jobAfterEdit(engine: Engine, tenantId: string, written: Job): Promise<Job> {
  try {
    return await recordRunsEndedBy(engine, await getTenantJob(engine, tenantId, written.jobId));
  } catch (error) {
    if (error instanceof SchedulerError) throw error;
    engine.obs.log.warn("could not read an edited job again; answering it as written", {
      tenantId,
      jobId: written.jobId,
      error: String(error),
    });
    return written;
  }
}

/**
 * Claims the job's pending due entry when it is already due (a dispatcher
 * outage left it unclaimed), up to `now`: the chain and each claim's reach end
 * there, so nothing not yet due is queued or recorded under the old schedule,
 * and the entry is moved on to the first occurrence after `now`. True when it
 * claimed anything (or a dispatcher did meanwhile).
 */
async function claimDueBeforeEdit(engine: Engine, job: Job, now: Date): Promise<boolean> {
  if (job.status !== "ACTIVE" || job.nextDueKey === null || job.nextRunAt === null) return false;
  if (Date.parse(job.nextRunAt) > now.getTime()) return false;
  const entry = await readDueEntry(engine, job.nextDueKey);
  // Gone: a dispatcher claimed it meanwhile, and the job no longer points at it.
  if (entry === null) return true;
  // Its occurrence has come, but its planned time (jitter) has not: nothing is due yet.
  if (Date.parse(entry.dueAt) > now.getTime()) return false;
  await dispatchNow(engine, entry, now, new Date(now.getTime() + 1));
  return true;
}

/**
 * A schedule edit that keeps an `endAt` which has passed, of a job not ended after the claim above.
 * Active: its pending occurrence (up to `endAt`) was not yet due at its planned time (jitter), so
 * no claim decided it. A dispatcher decides it then and ends the job; the edit would drop it and
 * end the job itself, so it is refused (409), writing nothing, until that time decides it.
 * Paused: no claim decides anything; the new schedule would have nothing to run, and its pending
 * occurrence, which the resume decides, would be dropped. Refused too, for a new `endAt` or null.
 */
function refuseKeptEndPassed(job: Job, now: Date): void {
  if (!job.endAt || Date.parse(job.endAt) > now.getTime()) return;
  if (job.status !== "ACTIVE" && job.status !== "PAUSED") return;
  const why =
    job.status === "PAUSED"
      ? ": send a new endAt, or null, with the new schedule"
      : job.nextRunAt === null
        ? ""
        : `: its pending occurrence, due at ${job.nextRunAt}, is decided at its planned time, and the job ends with it`;
  throw new IllegalTransitionError("edit", job.status, `its endAt, ${job.endAt}, has passed${why}`);
}

function nextAfterEdit(job: Job, edited: Job, now: Date): Date | null {
  if (sameSchedule(edited.schedule, job.schedule)) {
    return job.nextRunAt ? new Date(job.nextRunAt) : null;
  }
  // A one-off that has not completed runs at its new time, even a past one (the misfire policy judges it).
  if ("runAt" in edited.schedule) return new Date(edited.schedule.runAt);
  return firstOccurrence(edited.schedule, now);
}
