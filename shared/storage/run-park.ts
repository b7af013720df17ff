import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Run } from "../model.js";
import { failedConditionItem, isConditionalCheckFailed } from "./dynamo-errors.js";
import { decodeRun, jobKey } from "./items.js";
import { runExpiresAt } from "./retention.js";
import { fencedRunUpdate } from "./run-fence.js";
import { type RunRef, runKeyOf } from "./run-reads.js";

const PAUSED_REASON = "waiting: job paused";

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
  if (!(await listParked(engine, run, now))) return false;
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(run),
        ConditionExpression: PARKED_UNCHANGED,
        UpdateExpression: "REMOVE inflightPk, inflightSk, expiresAt",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":queued": "QUEUED",
          ":fence": run.fence,
          ":deadline": deadline,
        },
      }),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
  }
  return true;
}

async function listParked(engine: Engine, run: Run, now: Date): Promise<boolean> {
  const base = {
    TableName: engine.tables.jobs,
    Key: jobKey(run.jobId),
    ExpressionAttributeNames: { "#status": "status" },
  };
  try {
    await engine.doc.send(
      new UpdateCommand({
        ...base,
        ConditionExpression: JOB_PAUSED,
        UpdateExpression: "SET parkedRuns.#runId = :at",
        ExpressionAttributeNames: { ...base.ExpressionAttributeNames, "#runId": run.runId },
        ExpressionAttributeValues: { ":paused": "PAUSED", ":at": now.toISOString() },
      }),
    );
    return true;
  } catch (error) {
    if (isConditionalCheckFailed(error)) return false;
    // A job paused before jobs carried the map has no map to add to.
    if (!(error instanceof Error && error.name === "ValidationException")) throw error;
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
    return true;
  } catch (error) {
    if (isConditionalCheckFailed(error)) return listParked(engine, run, now);
    throw error;
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
