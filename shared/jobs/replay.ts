import type { Engine } from "../engine.js";
import { IllegalTransitionError, NotReplayableError } from "../errors.js";
import { idempotencyKeyHash, MAX_ATTEMPT, parseRunId } from "../keys.js";
import type { Run } from "../model.js";
import { recordShardCount } from "../shard-count.js";
import { filedPastReason, JOB_DELETED, writeReplay } from "../storage/dead-letter-replay.js";
import { isBeingDeleted } from "../storage/items.js";
import { latestAttemptOf } from "../storage/job-queries.js";
import { keepCompletedJobForRun } from "../storage/job-status.js";
import { getJob, getRun } from "../storage/run-reads.js";
import { getTenantRun } from "./queries.js";
import { runDueNow, sendRunDueNow, sendRunIfUnsent } from "./run-now.js";

/** The replay's run, and whether this request queued it or an earlier one with its key did. */
export interface Replayed {
  readonly run: Run;
  readonly earlier: boolean;
}

/**
 * Replays a dead run as a new attempt of the same occurrence (the next, or the one after the
 * attempts an edit gave the occurrence since: `replayAttempt`), at the job's current version. The dead run leaves the dead-letter list in the same
 * transaction, so a second replay of it is refused; but a repeat with the
 * Idempotency-Key of the replay that was made (a retry after a lost answer,
 * or concurrent sends of one request) answers that replay's run, queueing
 * nothing, for as long as the dead run and that run are kept.
 */
export async function replayDeadLetter(
  engine: Engine,
  tenantId: string,
  runId: string,
  idempotencyKey?: string,
): Promise<Replayed> {
  const keyHash = idempotencyKey === undefined ? undefined : idempotencyKeyHash(idempotencyKey);
  const dead = await getTenantRun(engine, tenantId, runId);
  const earlier = await replayWithKey(engine, dead, keyHash);
  if (earlier) {
    // The request that replayed it may have died before its send (its answer lost, then its
    // read back failed): the run waits for the reaper unless sent here.
    await sendRunIfUnsent(engine, earlier, engine.clock());
    return { run: earlier, earlier: true };
  }
  if (dead.status !== "DEAD")
    throw new NotReplayableError(runId, `it is ${dead.status.toLowerCase()}, not dead`);
  if (dead.replayedBy)
    throw new NotReplayableError(runId, `it was already replayed as ${dead.replayedBy}`);
  // Each replay is the next attempt; attempts are stored as four digits.
  if (dead.attempt >= MAX_ATTEMPT)
    throw new NotReplayableError(
      runId,
      `it is attempt ${dead.attempt}, the last attempt a run can have`,
    );
  const attempt = await replayAttempt(engine, dead).catch(async (error: unknown) => {
    // The later attempt it met may be a concurrent replay of this dead run: answered as such.
    const again = await getTenantRun(engine, tenantId, runId);
    const replayed = await replayWithKey(engine, again, keyHash);
    if (replayed !== null) return replayed;
    if (again.replayedBy)
      throw new NotReplayableError(runId, `it was already replayed as ${again.replayedBy}`);
    throw error;
  });
  if (typeof attempt !== "number") return { run: attempt, earlier: true };
  const job = await getJob(engine, dead.jobId);
  // A dead run outlives its job when the job is deleted, or cancelled or completed and expired:
  // there is nothing to run it as.
  if (job === null) throw new NotReplayableError(runId, goneJobReason(engine, dead));
  if (isBeingDeleted(job)) throw new NotReplayableError(runId, JOB_DELETED);
  if (job.status === "CANCELLED") throw new IllegalTransitionError("replay a run of", job.status);
  const filedPast = filedPastReason(job, dead.scheduledFor, attempt);
  if (filedPast !== null) throw new NotReplayableError(runId, filedPast);
  await recordShardCount(engine);
  // Before the run is written: a run left without its job's TTL pushed could outlive the job. One
  // that expired since the read (or was deleted) is gone.
  if ((await keepCompletedJobForRun(engine, job, engine.clock())) === "gone")
    throw new NotReplayableError(runId, goneJobReason(engine, dead));
  const { run, item, now } = runDueNow(engine, {
    jobId: dead.jobId,
    tenantId,
    scheduledFor: new Date(dead.scheduledFor),
    ...(dead.plannedFor ? { plannedFor: new Date(dead.plannedFor) } : {}),
    attempt,
    priority: job.priority,
    jobVersion: job.version,
    ...(dead.trigger ? { trigger: dead.trigger } : {}),
  });
  try {
    // A one-off replaying a dead run from before it became one: its reads come down to the replay.
    await writeReplay(engine, dead, { runId: run.runId, attempt, item, keyHash, job });
  } catch (error) {
    const replayed = await replayWithKey(
      engine,
      await getTenantRun(engine, tenantId, runId),
      keyHash,
    );
    if (replayed === null) throw error;
    // Refused (on the dead run, or on a job cancelled or deleted since): it wrote nothing; another
    // send of this request (same key) replayed it first, and sends its run.
    if (error instanceof NotReplayableError || error instanceof IllegalTransitionError)
      return { run: replayed, earlier: true };
    // Not refused but failed, and yet replayed with this key: this request's own write, applied
    // with its answer lost, whose run nobody else sends.
    await sendRunIfUnsent(engine, replayed, now);
    return { run: replayed, earlier: false };
  }
  await sendRunDueNow(engine, run, now);
  return { run, earlier: false };
}

/**
 * The attempt a replay of `dead` is: the next one, unless the occurrence has later attempts that
 * are not `dead`'s own retry (put before a crash, which `writeReplay` takes the place of). Those
 * an edit filed: it gave the one-off this time again as its `runAt` (`attemptForRunAt`), and the
 * occurrence ran again, or was recorded skipped (the misfire policy), as the attempt after `dead`.
 * Once that run and its retries have ended without success, the replay is the attempt after the
 * latest of them; while they are under way (queued, running, or failed with a retry to come) it is
 * refused, as it would run the occurrence beside them, and once one succeeded, as it would run
 * the occurrence twice.
 */
async function replayAttempt(engine: Engine, dead: Run): Promise<number> {
  const latest = await latestAttemptOf(engine, dead.jobId, dead.scheduledFor);
  if (latest === null || latest.attempt <= dead.attempt || latest.retryOf?.runId === dead.runId)
    return dead.attempt + 1;
  const status = latest.status.toLowerCase();
  if (latest.status === "QUEUED" || latest.status === "RUNNING" || latest.status === "FAILED")
    throw new NotReplayableError(
      dead.runId,
      `its occurrence runs again as ${latest.runId} (${status}), filed when an edit gave its job this runAt again: replayable once that run and its retries have ended, unless one succeeds`,
    );
  // A replay would be a second success of one occurrence, which the scheduler never records.
  if (latest.status === "SUCCEEDED")
    throw new NotReplayableError(
      dead.runId,
      `its occurrence ran again as ${latest.runId} and succeeded, filed when an edit gave its job this runAt again: a replay would run it a second time`,
    );
  if (latest.attempt >= MAX_ATTEMPT)
    throw new NotReplayableError(
      dead.runId,
      `its occurrence's latest attempt, ${latest.runId} (${status}), is the last attempt a run can have`,
    );
  return latest.attempt + 1;
}

/** The run a replay of `dead` made with the key hashed as `keyHash`, or null. */
async function replayWithKey(
  engine: Engine,
  dead: Run,
  keyHash: string | undefined,
): Promise<Run | null> {
  if (keyHash === undefined || dead.replayedBy === null || dead.replayKeyHash !== keyHash)
    return null;
  const ref = parseRunId(dead.replayedBy);
  return ref === null ? null : getRun(engine, ref);
}

const DAY_MS = 86_400_000;

/**
 * Why a dead run's job is gone, as far as it can be known. A delete removes the job at once; a
 * cancelled job expires `retentionDays` after its cancel, which came after the run was queued (a
 * cancelled job queues nothing). So until `retentionDays` after the run was queued the job can only
 * have been deleted; after that, its item is gone either way and nothing tells the two apart. A
 * completed job expires too (at least a retention after its runs' end), and a run that waited to
 * start can die later than its retention counted on: its dead letter then outlives it.
 */
function goneJobReason(engine: Engine, dead: Run): string {
  const { retentionDays } = engine.settings;
  const queuedAt = Date.parse(dead.enqueuedAt ?? dead.scheduledFor);
  if (engine.clock().getTime() < queuedAt + retentionDays * DAY_MS) return JOB_DELETED;
  return `its job no longer exists: it was deleted, or it was cancelled (it expires ${retentionDays} days later) or completed, and expired`;
}
