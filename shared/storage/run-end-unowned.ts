import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { runDurationMs } from "../clock.js";
import type { Engine } from "../engine.js";
import type { CancelSource, DueEntry, Run } from "../model.js";
import {
  conditionalWrite,
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
} from "./dynamo-errors.js";
import { deadLetterPk, decodeRun, encodeDueEntry, jobKey } from "./items.js";
import { deadRunExpiresAt, runExpiresAt } from "./retention.js";
import { runKeyOf } from "./run-reads.js";
import { boundedText } from "./stored-text.js";
import { ConditionsFailedError, writeTransaction } from "./transaction.js";

/** Unchanged since the caller read it: a worker that started it meanwhile keeps it. */
const AS_SEEN = "#status = :was AND fence = :fence";
/**
 * A DEAD ending also finds no cancel request: one accepted since the caller's read (it leaves the
 * status and fence as they were) is answered, and the run ends CANCELLED as asked instead.
 */
const AS_SEEN_UNCANCELLED = `${AS_SEEN} AND attribute_not_exists(cancelRequestedAt)`;
/** The job item is still there: removing an entry must not create it. */
const JOB_EXISTS = "attribute_exists(pk)";

/**
 * Ends a run that no worker holds, as DEAD (listed for replay) or CANCELLED,
 * conditioned on the run being as the caller saw it (and, for DEAD, on no cancel
 * request since). Returns the ended run, or null when it had changed. A RUNNING run's entry in its job's activeRuns
 * goes too (overlap would otherwise wait a lease for nothing), unless the caller's job write of
 * the run takes it out with its lastRun (`keepListed`). A cancel names
 * who asked (`cancelledBy`, with `cancelRequestedAt`) when `by` is given, and a run the redrive
 * DLQ ends is marked `crashedRunning` (its handler ran) when `crashedRunning` is. A RUNNING run
 * ran, handed over to its async target or started by a worker that died (its lease lapsed): a
 * cancel's ending measures its duration, as a worker's ending of a run that ran does (from its
 * start to now), so that it is its job's `lastRun` (`ranForLastRun`).
 */
export async function endRunAsSeen(
  engine: Engine,
  seen: Run,
  status: "DEAD" | "CANCELLED",
  reason: string,
  now: Date,
  {
    trigger,
    by,
    crashedRunning = false,
    keepListed = false,
  }: {
    /** A DEAD ending of a job with dependents: their trigger entry, written with the ending. */
    readonly trigger?: DueEntry | undefined;
    /** A CANCELLED ending: who cancelled it. */
    readonly by?: CancelSource | undefined;
    /**
     * The redrive DLQ's ending (every delivery started the run and crashed its worker), or a
     * cancel's of a QUEUED run its job lists under a lapsed lease (its worker ran it and died).
     */
    readonly crashedRunning?: boolean | undefined;
    /**
     * The run stays in its job's activeRuns: the caller's job write takes it out with its lastRun
     * (`tracked`), so a caller that dies between the two leaves it listed for its repeat to find.
     */
    readonly keepListed?: boolean | undefined;
  } = {},
): Promise<Run | null> {
  const finishedAt = now.toISOString();
  const dead = status === "DEAD";
  // A RUNNING run's handler ran (a sync run's worker wrote its start, an async one's target took
  // it over): its ending measures it, except the DLQ's, whose every delivery crashed its worker.
  const durationMs =
    seen.status === "RUNNING" && seen.startedAt && (seen.handedOverAt || !crashedRunning)
      ? runDurationMs(seen.startedAt, now)
      : null;
  const attributed = !dead && by !== undefined;
  const update = {
    TableName: engine.tables.runs,
    Key: runKeyOf(seen),
    ConditionExpression: dead ? AS_SEEN_UNCANCELLED : AS_SEEN,
    // A parked run has no TTL while its job is paused (run-park.ts): ended, it gets one back.
    UpdateExpression: `SET #status = :status, reason = :reason, finishedAt = :finishedAt${
      dead
        ? ", deadPk = :deadPk, deadSk = :deadSk, #error = :reason, expiresAt = :expiresAt"
        : ", expiresAt = if_not_exists(expiresAt, :expiresAt)"
    }${
      attributed
        ? ", cancelRequestedAt = if_not_exists(cancelRequestedAt, :finishedAt), cancelledBy = if_not_exists(cancelledBy, :by)"
        : ""
    }${crashedRunning ? ", crashedRunning = :crashedRunning" : ""}${
      durationMs === null ? "" : ", durationMs = :durationMs"
    } REMOVE leaseUntil, inflightPk, inflightSk`,
    ExpressionAttributeNames: { "#status": "status", ...(dead ? { "#error": "error" } : {}) },
    ExpressionAttributeValues: {
      ":was": seen.status,
      ":fence": seen.fence,
      ":status": status,
      ":reason": boundedText(reason),
      ":finishedAt": finishedAt,
      ...(attributed ? { ":by": by } : {}),
      ...(crashedRunning ? { ":crashedRunning": true } : {}),
      ...(durationMs === null ? {} : { ":durationMs": durationMs }),
      ...(dead
        ? {
            ":deadPk": deadLetterPk(seen.tenantId),
            ":deadSk": `${finishedAt}#${seen.runId}`,
            ":expiresAt": deadRunExpiresAt(now, engine.settings),
          }
        : { ":expiresAt": runExpiresAt(now, engine.settings) }),
    },
  };
  let run: Run;
  if (trigger) {
    try {
      await writeTransaction<"run" | "trigger">(engine, "end-unowned", [
        { name: "run", write: { Update: update } },
        {
          name: "trigger",
          write: {
            Put: {
              TableName: engine.tables.jobs,
              Item: encodeDueEntry(trigger),
              ConditionExpression: "attribute_not_exists(pk)",
            },
          },
        },
      ]);
    } catch (error) {
      if (error instanceof ConditionsFailedError && error.has("run")) return null;
      throw error;
    }
    run = {
      ...seen,
      status,
      reason: boundedText(reason),
      finishedAt,
      leaseUntil: null,
      ...(dead ? { error: boundedText(reason) } : {}),
      ...(crashedRunning ? { crashedRunning } : {}),
      ...(durationMs === null ? {} : { durationMs }),
    };
  } else {
    try {
      const result = await engine.doc.send(
        new UpdateCommand({
          ...update,
          ReturnValues: "ALL_NEW",
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
        }),
      );
      run = decodeRun(result.Attributes ?? {});
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
      // Sent again by the SDK after its answer was lost (a dropped connection, a 500 after
      // DynamoDB applied it), the write fails on its own ending: the run stands ended as this
      // ends it, under the fence it was seen with, at this instant. Taken for a change, a cancel
      // would answer 409 for the run it cancelled, and skip a one-off's completion.
      const old = failedConditionItem(error);
      const own =
        old !== null &&
        old.status === status &&
        old.fence === seen.fence &&
        old.finishedAt === finishedAt;
      if (!own) return null;
      run = decodeRun(old);
    }
  }
  if (seen.status === "RUNNING" && !keepListed) await forgetActiveRun(engine, run.jobId, run.runId);
  return run;
}

async function forgetActiveRun(engine: Engine, jobId: string, runId: string): Promise<void> {
  // The job item meets claims' transactions, as the worker's own run-end write does.
  await conditionalWrite(() =>
    retryOnContention(engine, "forget-active-run", () =>
      engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: jobKey(jobId),
          ConditionExpression: JOB_EXISTS,
          UpdateExpression: "REMOVE activeRuns.#runId",
          ExpressionAttributeNames: { "#runId": runId },
        }),
      ),
    ),
  );
}
