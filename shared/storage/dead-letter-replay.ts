import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, IllegalTransitionError, NotReplayableError } from "../errors.js";
import type { Job, Run } from "../model.js";
import { isOneOffOccurrence, oneOffAttemptOf } from "../one-off.js";
import {
  decodeJob,
  floorLoweringFor,
  isBeingDeleted,
  jobNotCancelledCheck,
  jobNotCancelledLoweringFloor,
} from "./items.js";
import { runKey } from "./runs.js";
import { ConditionsFailedError, writeTransaction } from "./transaction.js";

/** Why a dead letter of a job deleted (or being deleted) cannot be replayed. */
export const JOB_DELETED = "its job was deleted";
/** How many times a replay below its one-off's floor is written on a job that keeps changing. */
export const REPLAY_TRIES = 3;

/**
 * The replay's key is free, or holds the retry a failure of the dead run put before that run's
 * ending (`retryOf` naming it) and which was skipped, unrun, because the run then ended DEAD, not
 * FAILED (a worker that died between the retry's put and the FAILED ending, the run's next start
 * dead). That retry was never run and never will be: the replay is the occurrence's next attempt
 * in its place. A retry of it still waiting (QUEUED) is not written over: its message is out.
 */
const REPLAY_KEY_FREE =
  "attribute_not_exists(pk) OR (#status = :skipped AND retryOf.runId = :deadRunId)";

/**
 * Why a replay at `attempt` of a dead run at `at` is refused when an edit back (or a resume) filed
 * the one-off's occurrence there past it (`oneOffAttempt`), unclaimed yet: that attempt runs the
 * occurrence (a completed job runs none). Null when it is not.
 */
export function filedPastReason(job: Job, at: string, attempt: number): string | null {
  const filed = oneOffAttemptOf(job, at);
  if (attempt >= filed || job.status === "COMPLETED" || !isOneOffOccurrence(job, at)) return null;
  return `its occurrence is filed to run again as attempt ${filed}, when an edit gave its job this runAt again: replayable once that run and its retries have ended, unless one succeeds`;
}

/**
 * The job write's condition that no edit back filed the occurrence past the replay's attempt
 * since the read (`filedPastReason` of the job as it stands): such an edit took the skipped retry
 * whose key the replay takes back, and its attempt would run beside the replay.
 */
function notFiledPast(
  write: ReturnType<typeof jobNotCancelledCheck> | ReturnType<typeof jobNotCancelledLoweringFloor>,
  at: string,
  attempt: number,
) {
  const [kind, inner] =
    "ConditionCheck" in write
      ? (["ConditionCheck", write.ConditionCheck] as const)
      : (["Update", write.Update] as const);
  return {
    [kind]: {
      ...inner,
      ConditionExpression: `${inner.ConditionExpression} AND NOT (#schedule.#runAt = :replayAt AND oneOffAttempt.#filedAt = :replayAt AND oneOffAttempt.#attempt > :replayAttempt AND #status <> :completed)`,
      ExpressionAttributeNames: {
        ...inner.ExpressionAttributeNames,
        "#schedule": "schedule",
        "#runAt": "runAt",
        "#filedAt": "at",
        "#attempt": "attempt",
      },
      ExpressionAttributeValues: {
        ...inner.ExpressionAttributeValues,
        ":replayAt": at,
        ":replayAttempt": attempt,
        ":completed": "COMPLETED",
      },
    },
  };
}

/**
 * Puts the QUEUED item of `replay`, a new attempt of the dead run `dead`, and
 * takes `dead` off the dead-letter list (it names its replay, and keeps the
 * hash of the replay's Idempotency-Key, if any), in one
 * transaction conditioned on `dead` being DEAD and not yet replayed, on the
 * replay's key being free but for a skipped retry of `dead` (`REPLAY_KEY_FREE`),
 * and on the job existing, not CANCELLED and not marked by a delete (`jobNotCancelledCheck`).
 * A cancellation is `NotReplayableError`: what it contends with on the dead
 * run's item is another replay of it; on the replay's key, a retry of the dead
 * run still waiting to be skipped; on the job, its delete (a cancel is
 * `IllegalTransitionError`, as when the replay reads the job cancelled). A replay below its
 * one-off's floor (`floorLoweringFor` of `job`, as read) has the same write keep its occurrence on
 * the job (or lower the floor to it), so that a pause, cancel or delete reads the replay
 * (`liveRunRanges`), conditioned on the floor and the occurrences below it as read; when those
 * changed since, the transaction goes again decided on the job as it then stands (with the check
 * alone once the job reaches the replay's occurrence), at most REPLAY_TRIES times in all: a job
 * that keeps changing that way is `ConcurrentUpdateError`, and nothing is written.
 */
export async function writeReplay(
  engine: Engine,
  dead: Run,
  replay: {
    readonly runId: string;
    readonly attempt: number;
    readonly item: Record<string, unknown>;
    readonly keyHash: string | undefined;
    /** The job as read, or as the last try found it. */
    readonly job: Job;
  },
  tries = 1,
): Promise<void> {
  const lowering = floorLoweringFor(replay.job, dead.scheduledFor);
  const jobWrite = notFiledPast(
    lowering === undefined
      ? jobNotCancelledCheck(engine.tables.jobs, dead.jobId)
      : jobNotCancelledLoweringFloor(engine.tables.jobs, replay.job, lowering),
    dead.scheduledFor,
    replay.attempt,
  );
  try {
    await writeTransaction(engine, "replay", [
      {
        name: "replay",
        write: {
          Put: {
            TableName: engine.tables.runs,
            Item: replay.item,
            ConditionExpression: REPLAY_KEY_FREE,
            ExpressionAttributeNames: { "#status": "status" },
            ExpressionAttributeValues: { ":skipped": "SKIPPED", ":deadRunId": dead.runId },
            ReturnValuesOnConditionCheckFailure: "ALL_OLD",
          },
        },
      },
      // The job as the replay read it: a cancel or delete (of a completed job: its mark) between
      // that read and this write would otherwise be outrun, the dead letter taken off the list for
      // a run its worker can only cancel.
      { name: "job", write: jobWrite },
      {
        name: "deadRun",
        write: {
          Update: {
            TableName: engine.tables.runs,
            Key: runKey(dead.jobId, dead.scheduledFor, dead.attempt),
            ConditionExpression:
              "#status = :dead AND (attribute_not_exists(replayedBy) OR replayedBy = :null)",
            UpdateExpression: `SET replayedBy = :newRun${replay.keyHash === undefined ? "" : ", replayKeyHash = :keyHash"} REMOVE deadPk, deadSk`,
            ExpressionAttributeNames: { "#status": "status" },
            ExpressionAttributeValues: {
              ":dead": "DEAD",
              ":null": null,
              ":newRun": replay.runId,
              ...(replay.keyHash === undefined ? {} : { ":keyHash": replay.keyHash }),
            },
          },
        },
      },
    ]);
  } catch (error) {
    if (error instanceof ConditionsFailedError && error.has("job")) {
      const job = error.item("job");
      if (job === null || isBeingDeleted(job))
        throw new NotReplayableError(dead.runId, JOB_DELETED);
      if (job.status === "CANCELLED")
        throw new IllegalTransitionError("replay a run of", String(job.status));
      const filedPast = filedPastReason(decodeJob(job), dead.scheduledFor, replay.attempt);
      if (filedPast !== null) throw new NotReplayableError(dead.runId, filedPast);
      // The job stands, its floor or the occurrences below it changed since the read: decided again.
      if (lowering !== undefined) {
        if (tries >= REPLAY_TRIES)
          throw new ConcurrentUpdateError(
            `the job kept changing under the replay of ${dead.runId}; try again`,
            { cause: error },
          );
        return writeReplay(engine, dead, { ...replay, job: decodeJob(job) }, tries + 1);
      }
      throw new IllegalTransitionError("replay a run of", String(job.status));
    }
    if (error instanceof ConditionsFailedError && error.has("replay") && !error.has("deadRun")) {
      const taken = error.item("replay");
      if (taken !== null) throw new NotReplayableError(dead.runId, keyTakenReason(dead, taken));
    }
    // A cancellation without a failed condition (contention or throttling past the retries) wrote
    // nothing, and nobody replayed the run: it goes on as it came, answered busy.
    if (error instanceof ConditionsFailedError)
      throw new NotReplayableError(dead.runId, "it was replayed concurrently");
    throw error;
  }
}

/**
 * Why the replay's key (attempt n+1) is taken, the dead run still listed. A retry of the dead run
 * put before a crash and still QUEUED: skipped at its next look, the key is the replay's. Any
 * other run there is the occurrence's next attempt already, filed by an edit that gave the one-off
 * this time as its `runAt` again (`attemptForRunAt`, which files the attempt after a run that
 * ended): the occurrence ran again, or will, as that run, and the dead run has no attempt left to
 * be replayed as.
 */
function keyTakenReason(dead: Run, taken: Record<string, unknown>): string {
  const retryOf = taken.retryOf as { readonly runId?: unknown } | undefined;
  if (retryOf?.runId === dead.runId)
    return `its retry ${String(taken.runId)}, put before a crash, still waits for it to end: replayable once that retry is skipped, at its next look`;
  const status = String(taken.status).toLowerCase();
  return `its occurrence's next attempt is ${String(taken.runId)} already (${status}), filed when an edit gave its job this runAt again`;
}
