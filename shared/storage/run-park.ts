import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { runLogKeys } from "../observability.js";
import {
  conditionalWrite,
  failedConditionItem,
  isConditionalCheckFailed,
} from "./dynamo-errors.js";
import { decodeRun, jobKey } from "./items.js";
import { runExpiresAt } from "./retention.js";
import { fencedRunUpdate } from "./run-fence.js";
import { type RunRef, runKeyOf } from "./run-reads.js";

const PAUSED_REASON = "waiting: job paused";

/**
 * The most runs a paused job lists for its resume. The list lives on the job's item, which
 * DynamoDB holds to 400 KB: about 75 bytes a run, 2,000 take 150 KB, which leaves room for the
 * largest definition the API accepts (a 64 KiB payload, target headers filling an edit's 80 KiB
 * body), 1,000 dependents and the 200 runs it lists as under way (admission.ts). Runs keep coming
 * up while a job is paused (its queued occurrences, retries, replays of its dead letters);
 * unbounded, the list filled the item,
 * and each park after that failed on DynamoDB's limit and tried again at once, for as long as its
 * worker lived. A run that comes up once the list is full waits for the reaper instead.
 */
export const MAX_PARKED_RUNS = 2_000;

/**
 * How long a run that found its paused job's list full waits before the reaper sends it again (and
 * a worker parks it again, or runs it once the job is resumed): the reaper's longest interval
 * between re-sends (MAX_RESEND_INTERVAL_MS in shared/dispatch/reaper.ts).
 */
const UNLISTED_WAIT_MS = 15 * 60_000;

/** The job is still PAUSED: only then may it list a run for resume to send. */
const JOB_PAUSED = "#status = :paused";
/** The run is as parking left it: QUEUED under its fence, with the deadline parking gave it. */
const PARKED_UNCHANGED = "#status = :queued AND fence = :fence AND inflightSk = :deadline";
/** Resume's rearm is for a run still waiting; cancel may have ended it. */
const STILL_QUEUED = "#status = :queued";

/**
 * Parks a started run of a PAUSED job: the run goes back to QUEUED and the job
 * lists it in `parkedRuns`, for resume to send (or cancel to cancel). Returns
 * false when the job was no longer paused: the caller sends the run again and
 * its next delivery decides. The run keeps a reaper deadline until the job
 * lists it, so a worker that dies in between loses nothing; once listed, the
 * deadline goes (conditioned on being this one: resume may already have set
 * its own), so a long pause costs no resends, and so does its TTL: a pause
 * may outlast the run history's retention, and the run must still be there
 * for resume to send. Resume gives the TTL back, and so does an ending.
 * A run that finds the list full (MAX_PARKED_RUNS) is not listed: it keeps its
 * TTL and a reaper deadline UNLISTED_WAIT_MS on, and the reaper sends it again
 * then (parked again while the job is paused, run once it is resumed).
 * Throws FenceLostError once another worker has taken the run over.
 */
export async function parkRun(engine: Engine, run: Run, now: Date): Promise<boolean> {
  const deadline = new Date(now.getTime() + engine.settings.leaseMs).toISOString();
  await fencedRunUpdate(engine, run, {
    set: "#status = :queued, reason = :reason, inflightSk = :deadline, parkedFence = :fence",
    remove: "leaseUntil",
    values: { ":queued": "QUEUED", ":reason": PAUSED_REASON, ":deadline": deadline },
    // Its answer lost, taken for a lost fence, the run would not be listed on the job: resume would
    // not send it, and it would wait for the reaper, a lease on, to be delivered and parked again.
    applied: (old) =>
      old.status === "QUEUED" &&
      old.reason === PAUSED_REASON &&
      old.parkedFence === run.fence &&
      old.inflightSk === deadline,
  });
  const listed = await listParked(engine, run, now);
  if (listed === "not-paused") return false;
  const parkedAs = {
    TableName: engine.tables.runs,
    Key: runKeyOf(run),
    ConditionExpression: PARKED_UNCHANGED,
    ExpressionAttributeNames: { "#status": "status" },
  };
  const asParked = { ":queued": "QUEUED", ":fence": run.fence, ":deadline": deadline };
  await conditionalWrite(async () => {
    if (listed === "full") {
      engine.obs.log.warn("a paused job lists its most runs; this one waits for the reaper", {
        ...runLogKeys(run),
        maxParkedRuns: MAX_PARKED_RUNS,
      });
      await engine.doc.send(
        new UpdateCommand({
          ...parkedAs,
          UpdateExpression: "SET inflightSk = :later",
          ExpressionAttributeValues: {
            ...asParked,
            ":later": new Date(now.getTime() + UNLISTED_WAIT_MS).toISOString(),
          },
        }),
      );
    } else {
      await engine.doc.send(
        new UpdateCommand({
          ...parkedAs,
          UpdateExpression: "REMOVE inflightPk, inflightSk, expiresAt",
          ExpressionAttributeValues: asParked,
        }),
      );
    }
  });
  return true;
}

/**
 * Lists the run on its job, conditioned on the job being PAUSED and its list having room (or the
 * run on it already): "not-paused" when the job is not, "full" when the list has MAX_PARKED_RUNS.
 */
async function listParked(
  engine: Engine,
  run: Run,
  now: Date,
  mapWritten = false,
): Promise<"listed" | "not-paused" | "full"> {
  const base = {
    TableName: engine.tables.jobs,
    Key: jobKey(run.jobId),
    ExpressionAttributeNames: { "#status": "status" },
    ReturnValuesOnConditionCheckFailure: "ALL_OLD" as const,
  };
  const refused = (error: unknown) =>
    failedConditionItem(error)?.status === "PAUSED" ? "full" : "not-paused";
  try {
    await engine.doc.send(
      new UpdateCommand({
        ...base,
        ConditionExpression: `${JOB_PAUSED} AND (attribute_not_exists(parkedRuns) OR size(parkedRuns) < :most OR attribute_exists(parkedRuns.#runId))`,
        UpdateExpression: "SET parkedRuns.#runId = :at",
        ExpressionAttributeNames: { ...base.ExpressionAttributeNames, "#runId": run.runId },
        ExpressionAttributeValues: {
          ":paused": "PAUSED",
          ":at": now.toISOString(),
          ":most": MAX_PARKED_RUNS,
        },
      }),
    );
    return "listed";
  } catch (error) {
    if (isConditionalCheckFailed(error)) return refused(error);
    // A job paused before jobs carried the map has no map to add to (once: another error, such
    // as the item's size, would only repeat).
    if (mapWritten || !(error instanceof Error && error.name === "ValidationException"))
      throw error;
  }
  try {
    await engine.doc.send(
      new UpdateCommand({
        ...base,
        ConditionExpression: `${JOB_PAUSED} AND attribute_not_exists(parkedRuns)`,
        UpdateExpression: "SET parkedRuns = :parked",
        ExpressionAttributeValues: {
          ":paused": "PAUSED",
          ":parked": { [run.runId]: now.toISOString() },
        },
      }),
    );
    return "listed";
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    // Another park wrote the map meanwhile: add to it.
    if (failedConditionItem(error)?.status === "PAUSED") return listParked(engine, run, now, true);
    return "not-paused";
  }
}

/**
 * Gives a parked run back its reaper deadline, before resume commits: should
 * resume die before sending it, the reaper sends it. Its TTL comes back too,
 * the retention counted from the resume that queues it again. Returns the run
 * when it is still QUEUED; "ended" when cancel has ended it; "expired" when it
 * is gone: parked before parking removed the TTL, and its TTL passed during a
 * pause longer than the retention.
 */
export async function rearmParkedRun(
  engine: Engine,
  ref: RunRef,
  shardPk: string,
  now: Date,
): Promise<Run | "ended" | "expired"> {
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(ref),
        ConditionExpression: STILL_QUEUED,
        UpdateExpression: "SET inflightPk = :pk, inflightSk = :deadline, expiresAt = :expiresAt",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":queued": "QUEUED",
          ":pk": shardPk,
          ":deadline": new Date(now.getTime() + engine.settings.leaseMs).toISOString(),
          ":expiresAt": runExpiresAt(now, engine.settings),
        },
        ReturnValues: "ALL_NEW",
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
    return decodeRun(result.Attributes ?? {});
  } catch (error) {
    if (isConditionalCheckFailed(error))
      return failedConditionItem(error) === null ? "expired" : "ended";
    throw error;
  }
}
