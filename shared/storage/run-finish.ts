import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { runDurationMs } from "../clock.js";
import type { Engine } from "../engine.js";
import { type FenceLostError, RunCancelledError } from "../errors.js";
import type { DueEntry, Run, RunStatus } from "../model.js";
import { runLogKeys } from "../observability.js";
import {
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
} from "./dynamo-errors.js";
import { deadLetterPk, encodeDueEntry } from "./items.js";
import {
  type NextAttemptWrite,
  putNextAttempt,
  retractNextAttempt,
  retryNotRunReason,
} from "./next-attempt.js";
import { deadRunExpiresAt } from "./retention.js";
import {
  fencedWrite,
  fenceFailure,
  type HeldRun,
  ownEndingWritten,
  ownStartWritten,
} from "./run-fence.js";
import { recordRunOnJob } from "./run-on-job.js";
import { runKeyOf } from "./run-reads.js";
import { boundedOrNull } from "./stored-text.js";
import { ConditionsFailedError, type TransactItem, writeTransaction } from "./transaction.js";

type UpdateInput = NonNullable<TransactItem["Update"]>;

export type FinalStatus = Extract<
  RunStatus,
  "SUCCEEDED" | "FAILED" | "DEAD" | "SKIPPED" | "CANCELLED"
>;

export interface RunEnding {
  readonly status: FinalStatus;
  readonly error?: string | null;
  readonly reason?: string | null;
  /** Whether the handler ran: only then are finishedAt − startedAt and lastRun meaningful. */
  readonly ran: boolean;
  /**
   * For FAILED: the next attempt, as a QUEUED run to send or a due entry for the dispatcher, put
   * before the run's ending (`putNextAttempt`).
   */
  readonly retry?: NextAttemptWrite;
  /** Whether the job item keeps an activeRuns entry for this run that must go. */
  readonly tracked: boolean;
  /**
   * A tracked ending whose job's next admission comes soon (`nextAdmissionSoon`) writes the run
   * alone: the entry stays, the job's next admission drops it and takes lastRun from the run, and
   * readers of the job read the run meanwhile (job-runs.ts).
   */
  readonly jobWriteDeferred?: boolean;
  /** The run was a one-off job's own occurrence and ended for good: the job is COMPLETED with it. */
  readonly completesJob?: boolean;
  /** The job version whose definition the handler ran (recorded as the run's executedVersion). */
  readonly executedVersion?: number;
  /**
   * The job has dependents and this ending may queue their runs: the `trigger` due entry is
   * written in one transaction with the run's ending, so a crash can neither lose nor double it.
   */
  readonly trigger?: DueEntry;
  /**
   * A CANCELLED ending that carries out a requested cancel: conditioned on the start alone (its
   * fence, worker and `startedAt`: `FENCE_HELD_CANCELLING`), since every other write fails once
   * the request is there.
   */
  readonly honoursCancel?: boolean;
  /** With `ran`: a later delivery's ending of a run an earlier worker ran and died holding. */
  readonly crashedRunning?: boolean;
}

/** The writes of an ending's transaction with its trigger entry, by the names their conditions fail under. */
type FinishWrite = "run" | "trigger";

/** A trigger entry is written once: its item must not exist yet. */
const NOT_WRITTEN_YET = "attribute_not_exists(pk)";
/**
 * Records how a run ended, conditioned on the run's fence: a worker that lost
 * the run writes nothing (FenceLostError), and one whose run has a cancel
 * requested writes nothing but the CANCELLED ending (RunCancelledError). Every ending is one
 * write of the run, then one of the job (lastRun, activeRuns, completion): a transaction would
 * bill both twice. A failure puts its next attempt first (`putNextAttempt`), so an attempt exists
 * whenever its predecessor says FAILED; the attempt names that predecessor (`retryOf`) and runs
 * only once it says FAILED, so an ending refused after the put (a lost fence, a cancel, a crash in
 * between) leaves an attempt its worker skips (or, for a cancel, that is taken back at once). The
 * job's write never sets lastRun back (`LAST_RUN_OLDER`): refused because a run that finished
 * later is the job's lastRun by then, it is made again without lastRun. If the worker dies between
 * the run's write and the job's, the message comes back and the job's write is made then
 * (`repairRunOnJob`). A recurring run whose job's next admission comes soon leaves that write to
 * the admission (`jobWriteDeferred`). An ending that writes a `trigger` entry for the job's
 * dependents writes it with the run in one transaction.
 */
export async function finishRun(
  engine: Engine,
  run: HeldRun,
  ending: RunEnding,
  now: Date,
): Promise<Run> {
  const finishedAt = now.toISOString();
  const durationMs =
    ending.ran && ending.crashedRunning !== true && run.startedAt
      ? runDurationMs(run.startedAt, now)
      : null;
  const error = boundedOrNull(ending.error);
  const reason = boundedOrNull(ending.reason);
  const held = fencedWrite(run, { cancelling: ending.honoursCancel === true });
  const values: Record<string, unknown> = {
    ...held.values,
    ":status": ending.status,
    ":finishedAt": finishedAt,
    ":durationMs": durationMs,
    ":error": error,
    ":reason": reason,
  };
  let set = [
    "SET #status = :status, finishedAt = :finishedAt, durationMs = :durationMs, #error = :error, reason = :reason",
    ...held.startSets,
  ].join(", ");
  if (ending.crashedRunning === true) {
    set += ", crashedRunning = :crashedRunning";
    values[":crashedRunning"] = true;
  }
  if (ending.executedVersion !== undefined) {
    set += ", executedVersion = :executedVersion";
    values[":executedVersion"] = ending.executedVersion;
  }
  if (ending.status === "DEAD") {
    // Listed as a dead letter for its own retention, which the run's TTL must not cut short.
    set += ", deadPk = :deadPk, deadSk = :deadSk, expiresAt = :expiresAt";
    values[":deadPk"] = deadLetterPk(run.tenantId);
    values[":deadSk"] = `${finishedAt}#${run.runId}`;
    values[":expiresAt"] = deadRunExpiresAt(now, engine.settings);
  }
  const runUpdate: UpdateInput = {
    TableName: engine.tables.runs,
    Key: runKeyOf(run),
    ConditionExpression: held.condition,
    // The run keeps its reaper index entry: the reaper reads it once, at its deadline, and passes
    // it; removing it here would be one more index write on every run.
    UpdateExpression: `${set} REMOVE leaseUntil`,
    ExpressionAttributeNames: { ...held.names, "#error": "error" },
    ExpressionAttributeValues: values,
    ReturnValuesOnConditionCheckFailure: "ALL_OLD",
  };
  const finished: Run = {
    ...run,
    status: ending.status,
    finishedAt,
    durationMs,
    error,
    reason,
    leaseUntil: null,
    executedVersion: ending.executedVersion ?? run.executedVersion,
    ...(ending.crashedRunning === true ? { crashedRunning: true } : {}),
  };
  if (!ending.retry && ending.trigger) {
    try {
      await writeTransaction<FinishWrite>(engine, "finish", [
        { name: "run", write: { Update: runUpdate } },
        {
          name: "trigger",
          write: {
            Put: {
              TableName: engine.tables.jobs,
              Item: encodeDueEntry(ending.trigger),
              ConditionExpression: NOT_WRITTEN_YET,
            },
          },
        },
      ]);
    } catch (error) {
      if (!(error instanceof ConditionsFailedError && error.has("run"))) throw error;
      if (ownStartWritten(run, error.item("run"))) return finishRun(engine, run, ending, now);
      throw fenceFailure(run, error.item("run"), error);
    }
    held.written();
    if (!ending.jobWriteDeferred) await recordRunOnJob(engine, finished, ending);
    return finished;
  }
  // A failure's next attempt comes first, so that an attempt exists whenever its predecessor says
  // FAILED; the attempt runs only once it does (`retryOf`, retry-predecessor.ts).
  if (ending.retry) await putNextAttempt(engine, ending.retry);
  try {
    await retryOnContention(engine, "finish", () => engine.doc.send(new UpdateCommand(runUpdate)));
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const old = failedConditionItem(error);
    if (ownStartWritten(run, old)) return finishRun(engine, run, ending, now);
    if (!ownEndingWritten(run, old, ending.status, finishedAt)) {
      const refused = fenceFailure(run, old, error);
      if (ending.retry) await retractIfNeverFailed(engine, run, ending.retry, old, refused, now);
      throw refused;
    }
  }
  held.written();
  if (!ending.jobWriteDeferred) await recordRunOnJob(engine, finished, ending);
  return finished;
}

/**
 * A failure's ending refused after its next attempt was put: the attempt is taken back when the run
 * will never say FAILED: a cancel was asked of it (it ends CANCELLED), or it has ended otherwise.
 * Not for a cancel by a pause (a one-off's occurrence gets its next attempt from it, see
 * `decideOnPredecessor`), nor while another start holds the run (it may fail again, and its
 * ending then lets this attempt run), nor when another start's FAILED ending stands.
 */
async function retractIfNeverFailed(
  engine: Engine,
  run: HeldRun,
  next: NextAttemptWrite,
  old: Record<string, unknown> | null,
  refused: FenceLostError | RunCancelledError,
  now: Date,
): Promise<void> {
  const status = typeof old?.status === "string" ? (old.status as RunStatus) : null;
  const cancelledBy = refused instanceof RunCancelledError ? refused.context.cancelledBy : null;
  const endedOtherwise =
    status !== null &&
    status !== "QUEUED" &&
    status !== "RUNNING" &&
    status !== "FAILED" &&
    !(status === "CANCELLED" && old?.cancelledBy === "pause");
  const cancelled = cancelledBy !== null && cancelledBy !== "pause";
  if (!endedOtherwise && !cancelled) return;
  const reason = retryNotRunReason({
    runId: run.runId,
    status: cancelled ? "CANCELLED" : (status ?? "CANCELLED"),
  });
  await retractNextAttempt(engine, next, run.fence, reason, now).catch((error: unknown) => {
    // Its worker decides the same once the reaper sends it.
    engine.obs.log.warn("could not take back a next attempt; its worker will skip it", {
      ...runLogKeys(run),
      error: String(error),
    });
  });
}
