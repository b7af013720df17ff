import { GetCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { MIN_RETENTION_DAYS } from "../config.js";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import { runId } from "../keys.js";
import type { DueEntry, Job, Run } from "../model.js";
import { isOneOffOccurrence } from "../one-off.js";
import { putOverOlderDueEntry } from "./due-entries.js";
import {
  conditionalWrite,
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
} from "./dynamo-errors.js";
import {
  decodeJob,
  type FloorLowering,
  jobAsReadLoweringFloor,
  jobKey,
  sameFloorCondition,
} from "./items.js";
import {
  deletePendingDueEntry,
  oneOffAttemptAt,
  runStillUnderWay,
  stillARetry,
  updateJobFrom,
  writeJobChange,
} from "./job-update.js";
import {
  attemptsSpanMs,
  cancelledJobExpiresAt,
  completedJobExpiresAt,
  deadRunExpiresAt,
  epochSeconds,
  hasExpired,
  MAX_RESEND_INTERVAL_MS,
  runsOnAfterEndMs,
} from "./retention.js";

/**
 * The status changes of a job as read (`ConcurrentUpdateError` when it has
 * changed since): each returns the job as it now stands.
 */

/**
 * PAUSED, with its pending due entry deleted. nextRunAt stays: resume puts the
 * pending occurrence back. parkedRuns starts empty: workers add the runs they
 * park while it is paused.
 */
export async function writePausedJob(engine: Engine, job: Job, now: Date): Promise<Job> {
  const set = {
    status: "PAUSED",
    nextDueKey: null,
    parkedRuns: {},
    updatedAt: now.toISOString(),
  } as const;
  await writeJobChange(engine, job, [
    updateJobFrom(engine, job, set),
    ...deletePendingDueEntry(engine, job),
  ]);
  return { ...job, ...set };
}

/**
 * ACTIVE, with `due` (its pending occurrence) as its due entry, conditioned on
 * the parked runs being the ones read: a run parked meanwhile would be left
 * unsent. COMPLETED instead when `completes` (its end condition left it
 * nothing to run), expiring at its retention. Conditioned too on the one-off's
 * runs `read` as the plan read them (`runStillUnderWay`, `stillARetry`).
 */
export async function writeResumedJob(
  engine: Engine,
  job: Job,
  due: DueEntry | null,
  now: Date,
  completes = false,
  read: {
    /** The run at the one-off's time read under way, its occurrence filed at attempt 1. */
    readonly underWay?: Run | undefined;
    /** A failure's retry taken back or read SKIPPED, its occurrence filed after it. */
    readonly skippedRetry?: Run | undefined;
  } = {},
): Promise<Job> {
  const set = {
    status: completes ? "COMPLETED" : "ACTIVE",
    nextRunAt: due?.scheduledFor ?? null,
    nextDueKey: due?.key ?? null,
    parkedRuns: {},
    updatedAt: now.toISOString(),
    // A one-off's occurrence filed at its next attempt: an earlier attempt's ending leaves it be.
    ...(due !== null && isOneOffOccurrence(job, due.scheduledFor)
      ? oneOffAttemptAt(job, due.scheduledFor, due.attempt)
      : {}),
  } as const;
  // Its parked runs, sent now, still run and retry.
  const expiry = completes
    ? { expiresAt: completedJobExpiresAt(now, runsOnAfterEndMs(job), engine.settings) }
    : {};
  await writeJobChange(engine, job, [
    updateJobFrom(engine, job, { ...set, ...expiry }, { sameParkedRuns: true }),
    // Over a one-off's entry left by a dead plain claimer, of an older version (putOverOlderDueEntry).
    ...(due ? [{ name: "dueEntry" as const, write: putOverOlderDueEntry(engine, due) }] : []),
    ...(read.underWay ? [runStillUnderWay(engine, read.underWay)] : []),
    // A replay of its dead predecessor put over it since would run beside the attempt filed.
    ...(read.skippedRetry ? [stillARetry(engine, read.skippedRetry)] : []),
  ]);
  return { ...job, ...set };
}

/**
 * CANCELLED, with no next run and its pending due entry deleted, conditioned on
 * the parked runs being the ones read (the caller cancels those). The job
 * expires at its retention.
 */
export async function writeCancelledJob(engine: Engine, job: Job, now: Date): Promise<Job> {
  const set = {
    status: "CANCELLED",
    nextRunAt: null,
    nextDueKey: null,
    updatedAt: now.toISOString(),
  } as const;
  await writeJobChange(engine, job, [
    updateJobFrom(
      engine,
      job,
      { ...set, expiresAt: cancelledJobExpiresAt(now, engine.settings) },
      {
        sameParkedRuns: true,
      },
    ),
    ...deletePendingDueEntry(engine, job),
  ]);
  return { ...job, ...set };
}

/**
 * Marks a COMPLETED job as being deleted (`deleteRequestedAt`), before its delete cancels its runs:
 * from this write on no trigger, replay or fan-out of its runs writes a run for it (items.ts,
 * `jobStatusCheck` and `jobNotCancelledCheck`), so none lands after the cancel has passed. Its
 * status stays COMPLETED. `ConcurrentUpdateError` when the job is no longer COMPLETED as read
 * (gone: a concurrent delete removed it), for the caller to read it again.
 */
export async function writeDeletingJob(engine: Engine, job: Job, now: Date): Promise<Job> {
  const deleteRequestedAt = now.toISOString();
  const values: Record<string, unknown> = { ":completed": "COMPLETED", ":at": deleteRequestedAt };
  try {
    await retryOnContention(engine, "delete", () =>
      engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: jobKey(job.jobId),
          ConditionExpression: `#status = :completed AND ${sameFloorCondition(job, values)}`,
          UpdateExpression: "SET deleteRequestedAt = :at",
          ExpressionAttributeNames: { "#status": "status" },
          ExpressionAttributeValues: values,
        }),
      ),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    throw new ConcurrentUpdateError(`job ${job.jobId} changed under its delete`);
  }
  return { ...job, deleteRequestedAt };
}

/**
 * Writes `lowering` (`floorLoweringFor`) for a run below the one-off's floor that a worker has
 * decided to run: its occurrence kept on the job, or the floor lowered to it, so that a pause with
 * `running: "cancel"`, a job cancel and a delete read that run (`liveRunRanges`). False when the
 * job is no longer as read (`jobAsReadLoweringFloor`): the worker reads it again and decides again.
 */
export async function lowerOneOffFloorForRun(
  engine: Engine,
  job: Job,
  lowering: FloorLowering,
): Promise<boolean> {
  return conditionalWrite(() =>
    retryOnContention(engine, "lower floor", () =>
      engine.doc.send(new UpdateCommand(jobAsReadLoweringFloor(engine.tables.jobs, job, lowering))),
    ),
  );
}

/**
 * A run added to a COMPLETED job (a trigger, a replay) needs the job while it runs and retries:
 * without it, a retry's claim drops the retry as an orphan. Pushes the job's TTL out to a retention
 * after the run's last attempt can have run (`startsWithinMs` from now at the latest), never in.
 * Nothing for a job no longer COMPLETED. "gone" when the job has expired by `now`, or is deleted:
 * every reader takes it as gone from its `expiresAt` on, so a request that read it just before
 * that instant must not push it out and bring it back; the caller reads it again and finds it gone.
 */
export async function keepCompletedJobForRun(
  engine: Engine,
  job: Job,
  now: Date,
  startsWithinMs = 0,
): Promise<"kept" | "gone"> {
  if (job.status !== "COMPLETED") return "kept";
  const runsOnMs = startsWithinMs + attemptsSpanMs(job);
  return pushCompletedJobExpiry(
    engine,
    job.jobId,
    completedJobExpiresAt(now, runsOnMs, engine.settings),
    now,
  );
}

/**
 * Pushes a COMPLETED job's `expiresAt` out to `expiresAt`, never in, while it has not passed at
 * `now`: "gone" when it has, or the job is no longer there (`keepCompletedJobForRun`).
 */
async function pushCompletedJobExpiry(
  engine: Engine,
  jobId: string,
  expiresAt: number,
  now: Date,
): Promise<"kept" | "gone"> {
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: jobKey(jobId),
        ConditionExpression: "#status = :completed AND expiresAt < :expiresAt AND expiresAt > :now",
        UpdateExpression: "SET expiresAt = :expiresAt",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":completed": "COMPLETED",
          ":expiresAt": expiresAt,
          ":now": epochSeconds(now),
        },
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const current = failedConditionItem(error);
    if (current === null || hasExpired(current, now)) return "gone";
    // Kept as long already: a dead letter's retention, another run's push.
  }
  return "kept";
}

/**
 * A run of a COMPLETED job about to end DEAD at `now` is listed as a dead letter until
 * `deadRunExpiresAt`, and its replay needs the job. The job's expiry counted on the
 * `deadLetterRetentionDays` of the deploy that wrote it; a later deploy that raised the setting
 * lists the dead letter longer. Pushes the job out to the dead letter's expiry, never in, before
 * the run's DEAD write, so that whenever the dead letter is listed its job is there to replay it.
 * One conditional write at each death (a run's death is rare), whatever status the job was read
 * with, and no read: the condition finds a job COMPLETED since the run's start read it ACTIVE (a
 * claim reached its end, a one-off's own run succeeded). A job that completes with this death (a
 * one-off's run) is written COMPLETED by the ending itself, kept as long. A failed write is logged, not
 * thrown: the run's ending stands, and a crash here must not run the handler again.
 */
export async function keepCompletedJobForDeadLetter(
  engine: Engine,
  job: Pick<Job, "jobId">,
  run: Pick<Run, "tenantId" | "jobId" | "runId" | "attempt">,
  now: Date,
): Promise<void> {
  // Not decided from `job.status`: the job the ending holds was read at the run's start, and a
  // claim or another run may have completed it since. The push's condition decides (COMPLETED).
  try {
    await pushCompletedJobExpiry(engine, job.jobId, deadRunExpiresAt(now, engine.settings), now);
  } catch (error) {
    engine.obs.log.warn("could not keep a completed job for its dead letter", {
      tenantId: run.tenantId,
      jobId: run.jobId,
      runId: run.runId,
      attempt: run.attempt,
      error: String(error),
    });
  }
}

/**
 * The least a waiting run's occurrence lies before its COMPLETED job's expiry: the job is kept a
 * retention after any run it has could have run, and no deploy sets one under MIN_RETENTION_DAYS.
 * The retention counted is the one in force when the expiry was written, which a later deploy may
 * have raised: not the settings of the process that looks.
 */
const KEPT_PAST_OCCURRENCE_MS = MIN_RETENTION_DAYS * 24 * 3_600_000;

/**
 * A run that waits to start (the workers down, its tenant at its quota) may outwait its COMPLETED
 * job's retention, which counts from when its runs could have run, and a job taken as gone ends
 * it unrun. Each look at such a run (a re-send, a requeue, a hold) keeps the job, never in, until
 * it expires, as a trigger's run is kept: a retention (of dead letters, when longer) after the
 * run, started by the next look at the latest, can have run and retried, so that its retries find
 * the job and its dead letter stays replayable while listed. A COMPLETED job expires no sooner
 * than a day (`KEPT_PAST_OCCURRENCE_MS`) after the occurrence of any run it has, so a run that has
 * waited less than half of that since its occurrence is let be: a run that waits as runs do costs
 * its job no read and no write. One that waits longer has its job read at each look (every 15
 * minutes at most), and the job is pushed out only when its stored expiry falls within half a
 * retention of what this look would give it: a write every half retention at most, and every
 * look before the job expires leaves it at least half a day ahead. The wait counts from the
 * occurrence, which a retry or replay keeps: one of an occurrence older than half a day pays a
 * read of its job at each look, every few seconds while it is requeued at its tenant's quota
 * (architecture.md, Known limits). A failed read or write is logged, not thrown.
 */
export async function keepCompletedJobForWaitingRun(
  engine: Engine,
  run: Pick<Run, "tenantId" | "jobId" | "scheduledFor" | "attempt">,
  now: Date,
): Promise<void> {
  if (now.getTime() - Date.parse(run.scheduledFor) < KEPT_PAST_OCCURRENCE_MS / 2) return;
  try {
    const read = await engine.doc.send(
      new GetCommand({
        TableName: engine.tables.jobs,
        Key: jobKey(run.jobId),
        ConsistentRead: true,
      }),
    );
    // Gone, expired or no longer COMPLETED: nothing to keep.
    const item = read.Item;
    if (item === undefined || hasExpired(item, now) || item.status !== "COMPLETED") return;
    const job = decodeJob(item);
    const nextLookMs = Math.max(engine.settings.leaseMs, MAX_RESEND_INTERVAL_MS);
    const wanted = completedJobExpiresAt(now, nextLookMs + attemptsSpanMs(job), engine.settings);
    const halfRetention = (completedJobExpiresAt(now, 0, engine.settings) - epochSeconds(now)) / 2;
    if (typeof item.expiresAt === "number" && item.expiresAt > wanted - halfRetention) return;
    await keepCompletedJobForRun(engine, job, now, nextLookMs);
  } catch (error) {
    // Not failed for it: the run's own write stands, and the next look keeps the job again.
    engine.obs.log.warn("could not keep a completed job for its waiting run", {
      tenantId: run.tenantId,
      jobId: run.jobId,
      runId: runId(run.jobId, run.scheduledFor, run.attempt),
      attempt: run.attempt,
      error: String(error),
    });
  }
}
