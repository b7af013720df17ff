import type { TransactWriteCommandInput } from "@aws-sdk/lib-dynamodb";
import { TransactWriteCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { FenceLostError } from "../errors.js";
import type { DueEntry, Job, Run, RunMessage, RunStatus, RunSummary } from "../model.js";
import {
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
  transactionCancellationCodes,
} from "../storage/dynamo-errors.js";
import { deadLetterPk, decodeRun, encodeDueEntry, jobKey } from "../storage/items.js";
import { getRun, runKeyOf } from "../storage/run-reads.js";
import { boundedOrNull, boundedText } from "../storage/stored-text.js";

type TransactItem = NonNullable<TransactWriteCommandInput["TransactItems"]>[number];
type Item = Record<string, unknown>;

export type StartResult =
  | { readonly kind: "started"; readonly run: Run }
  /** Already finished: a duplicate or late delivery. */
  | { readonly kind: "finished"; readonly run: Run }
  /** Another worker holds a live lease on it. */
  | { readonly kind: "busy"; readonly run: Run }
  | { readonly kind: "missing" };

/**
 * Takes the run: QUEUED, or RUNNING whose lease has lapsed (its worker died),
 * becomes RUNNING under a fence one higher than before. Every later write by
 * this worker is conditioned on that fence.
 */
export async function startRun(
  engine: Engine,
  message: RunMessage,
  workerId: string,
  now: Date,
): Promise<StartResult> {
  const leaseUntil = new Date(now.getTime() + engine.settings.leaseMs);
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(message),
        ConditionExpression:
          "attribute_exists(pk) AND (#status = :queued OR (#status = :running AND leaseUntil < :now))",
        UpdateExpression:
          "SET #status = :running, fence = fence + :one, leaseUntil = :leaseUntil, workerId = :workerId, startedAt = :now REMOVE reason",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":queued": "QUEUED",
          ":running": "RUNNING",
          ":now": now.toISOString(),
          ":one": 1,
          ":leaseUntil": leaseUntil.toISOString(),
          ":workerId": workerId,
        },
        ReturnValues: "ALL_NEW",
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
    return { kind: "started", run: decodeRun(result.Attributes ?? {}) };
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const old = failedConditionItem(error);
    if (old === null) return { kind: "missing" };
    const run = decodeRun(old);
    return run.status === "RUNNING" ? { kind: "busy", run } : { kind: "finished", run };
  }
}

/** Extends the run's lease; throws FenceLostError once another worker has taken it over. */
export async function extendLease(engine: Engine, run: Run, now: Date): Promise<Date> {
  const leaseUntil = new Date(now.getTime() + engine.settings.leaseMs);
  await fencedRunUpdate(engine, run, {
    update: "SET leaseUntil = :leaseUntil",
    values: { ":leaseUntil": leaseUntil.toISOString() },
  });
  return leaseUntil;
}

/** Puts a started run back to QUEUED (overlap made it wait); its new message is sent by the caller. */
export async function requeueRun(
  engine: Engine,
  run: Run,
  reason: string,
  dueAt: Date,
): Promise<void> {
  await fencedRunUpdate(engine, run, {
    update:
      "SET #status = :queued, reason = :reason, dueAt = :dueAt, inflightSk = :deadline REMOVE leaseUntil",
    values: {
      ":queued": "QUEUED",
      ":reason": boundedText(reason),
      ":dueAt": dueAt.toISOString(),
      ":deadline": new Date(dueAt.getTime() + engine.settings.leaseMs).toISOString(),
    },
  });
}

async function fencedRunUpdate(
  engine: Engine,
  run: Run,
  expression: { update: string; values: Record<string, unknown> },
): Promise<void> {
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(run),
        ConditionExpression: "fence = :fence AND #status = :running",
        UpdateExpression: expression.update,
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ...expression.values,
          ":fence": run.fence,
          ":running": "RUNNING",
        },
      }),
    );
  } catch (error) {
    if (isConditionalCheckFailed(error))
      throw new FenceLostError(`run ${run.runId}`, run.fence, { cause: error });
    throw error;
  }
}

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
  /** For FAILED: the next attempt, as a QUEUED run to send or a due entry for the dispatcher. */
  readonly retry?: { readonly runItem: Item } | { readonly dueEntry: DueEntry };
  /** Whether the job item keeps an activeRuns entry for this run that must go. */
  readonly tracked: boolean;
  /** The run was a one-off job's own occurrence and ended for good: the job is COMPLETED with it. */
  readonly completesJob?: boolean;
  /** The job version whose definition the handler ran (recorded as the run's executedVersion). */
  readonly executedVersion?: number;
}

type UpdateInput = NonNullable<TransactItem["Update"]>;

/**
 * Records how a run ended, conditioned on the run's fence: a worker that lost
 * the run writes nothing. A failed run and its next attempt are written in one
 * transaction, so an attempt exists exactly when its predecessor says FAILED.
 * Any other ending is one write of the run, then one of the job (lastRun,
 * activeRuns, completion): a transaction would bill both twice. If the worker
 * dies between the two, the message comes back and `repairJobAfterRun` makes
 * the job's write then.
 */
export async function finishRun(
  engine: Engine,
  run: Run,
  ending: RunEnding,
  now: Date,
): Promise<Run> {
  const finishedAt = now.toISOString();
  const durationMs = ending.ran && run.startedAt ? now.getTime() - Date.parse(run.startedAt) : null;
  const error = boundedOrNull(ending.error);
  const reason = boundedOrNull(ending.reason);
  const names: Record<string, string> = { "#status": "status", "#error": "error" };
  const values: Record<string, unknown> = {
    ":fence": run.fence,
    ":running": "RUNNING",
    ":status": ending.status,
    ":finishedAt": finishedAt,
    ":durationMs": durationMs,
    ":error": error,
    ":reason": reason,
  };
  let set =
    "SET #status = :status, finishedAt = :finishedAt, durationMs = :durationMs, #error = :error, reason = :reason";
  if (ending.executedVersion !== undefined) {
    set += ", executedVersion = :executedVersion";
    values[":executedVersion"] = ending.executedVersion;
  }
  if (ending.status === "DEAD") {
    set += ", deadPk = :deadPk, deadSk = :deadSk";
    values[":deadPk"] = deadLetterPk(run.tenantId);
    values[":deadSk"] = `${finishedAt}#${run.runId}`;
  }
  const runUpdate: UpdateInput = {
    TableName: engine.tables.runs,
    Key: runKeyOf(run),
    ConditionExpression: "fence = :fence AND #status = :running",
    UpdateExpression: `${set} REMOVE leaseUntil, inflightPk, inflightSk`,
    ExpressionAttributeNames: names,
    ExpressionAttributeValues: values,
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
  };
  if (!ending.retry) {
    try {
      await retryOnContention(engine, "finish", () =>
        engine.doc.send(new UpdateCommand(runUpdate)),
      );
    } catch (error) {
      if (isConditionalCheckFailed(error))
        throw new FenceLostError(`run ${run.runId}`, run.fence, { cause: error });
      throw error;
    }
    await updateJobAfterRun(engine, finished, ending);
    return finished;
  }

  const items: TransactItem[] = [{ Update: runUpdate }];
  const jobUpdate = jobAfterRun(engine.tables.jobs, finished, ending);
  if (jobUpdate) items.push({ Update: jobUpdate });
  items.push(
    "runItem" in ending.retry
      ? {
          Put: {
            TableName: engine.tables.runs,
            Item: ending.retry.runItem,
            ConditionExpression: "attribute_not_exists(pk)",
          },
        }
      : {
          Put: {
            TableName: engine.tables.jobs,
            Item: encodeDueEntry(ending.retry.dueEntry),
            ConditionExpression: "attribute_not_exists(pk)",
          },
        },
  );
  try {
    await retryOnContention(engine, "finish", () =>
      engine.doc.send(new TransactWriteCommand({ TransactItems: items })),
    );
  } catch (error) {
    const codes = transactionCancellationCodes(error);
    if (codes?.[0] === "ConditionalCheckFailed") {
      throw new FenceLostError(`run ${run.runId}`, run.fence, { cause: error });
    }
    throw error;
  }
  return finished;
}

/**
 * A delivery of a run that already ended: if its worker died after recording
 * the run and before the job's write (lastRun, activeRuns, completion), that
 * write is made now. Both conditions hold only until the job's write lands,
 * so a repeat changes nothing.
 */
export async function repairJobAfterRun(engine: Engine, job: Job, run: Run): Promise<void> {
  if (run.status === "QUEUED" || run.status === "RUNNING") return;
  const recurring = !("runAt" in job.schedule);
  if (recurring) {
    if (run.durationMs === null || job.activeRuns[run.runId] === undefined) return;
  } else if (!(job.status === "ACTIVE" && endsOneOff(job, run, run.status))) {
    return;
  }
  await updateJobAfterRun(
    engine,
    run,
    {
      status: run.status,
      ran: run.durationMs !== null,
      tracked: recurring,
      completesJob: !recurring,
    },
    { repair: true },
  );
}

/** Whether this run is the one occurrence of a one-off job (a replay of an older run is not). */
export function completesOneOff(job: Job, run: Pick<Run, "scheduledFor">): boolean {
  return "runAt" in job.schedule && Date.parse(job.schedule.runAt) === Date.parse(run.scheduledFor);
}

/**
 * Whether ending this run so leaves its one-off job nothing pending: its occurrence succeeded,
 * went dead (a replay can still run it) or was skipped. A FAILED run has its next attempt.
 */
export function endsOneOff(job: Job, run: Pick<Run, "scheduledFor">, status: FinalStatus): boolean {
  return (
    completesOneOff(job, run) &&
    (status === "SUCCEEDED" || status === "DEAD" || status === "SKIPPED")
  );
}

async function updateJobAfterRun(
  engine: Engine,
  run: Run,
  ending: RunEnding,
  options: { repair?: boolean } = {},
): Promise<void> {
  const update = jobAfterRun(engine.tables.jobs, run, ending, options);
  if (update === null) return;
  try {
    await retryOnContention(engine, "finish", () => engine.doc.send(new UpdateCommand(update)));
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    // Paused or cancelled meanwhile: that status stands, the rest of the bookkeeping still applies.
    if (ending.completesJob && !options.repair)
      await updateJobAfterRun(engine, run, { ...ending, completesJob: false });
  }
}

function jobAfterRun(
  jobsTable: string,
  run: Run,
  ending: RunEnding,
  options: { repair?: boolean } = {},
): UpdateInput | null {
  if (!ending.ran && !ending.tracked && !ending.completesJob) return null;
  const sets = ["activeRevision = if_not_exists(activeRevision, :zero) + :one"];
  const values: Record<string, unknown> = { ":zero": 0, ":one": 1 };
  const names: Record<string, string> = {};
  const conditions = ["attribute_exists(pk)"];
  if (ending.ran) {
    const summary: RunSummary = {
      runId: run.runId,
      status: ending.status,
      scheduledFor: run.scheduledFor,
      attempt: run.attempt,
      finishedAt: run.finishedAt ?? "",
    };
    sets.push("lastRun = :lastRun");
    values[":lastRun"] = summary;
  }
  if (ending.completesJob) {
    sets.push("#status = :completed", "nextRunAt = :null", "nextDueKey = :null");
    conditions.push("#status = :active");
    names["#status"] = "status";
    Object.assign(values, { ":completed": "COMPLETED", ":active": "ACTIVE", ":null": null });
  }
  if (ending.tracked) {
    names["#runId"] = run.runId;
    if (options.repair) conditions.push("attribute_exists(activeRuns.#runId)");
  }
  return {
    TableName: jobsTable,
    Key: jobKey(run.jobId),
    ConditionExpression: conditions.join(" AND "),
    UpdateExpression: `SET ${sets.join(", ")}${ending.tracked ? " REMOVE activeRuns.#runId" : ""}`,
    ...(Object.keys(names).length > 0 ? { ExpressionAttributeNames: names } : {}),
    ExpressionAttributeValues: values,
  };
}

/**
 * Ends a run that no worker holds (its message reached the DLQ, or its job is
 * gone): only a run not already finished is changed. Returns null when it was.
 */
export async function endUnownedRun(
  engine: Engine,
  ref: Pick<RunMessage, "jobId" | "scheduledFor" | "attempt">,
  status: "DEAD" | "CANCELLED",
  reason: string,
  now: Date,
  /** The run as the caller already read it; the write is conditioned on it being unchanged. */
  seen?: Run,
): Promise<Run | null> {
  const current = seen ?? (await getRun(engine, ref));
  if (current === null || (current.status !== "QUEUED" && current.status !== "RUNNING"))
    return null;
  // A worker still holding a live lease will record the outcome itself.
  if (current.status === "RUNNING" && (current.leaseUntil ?? "") > now.toISOString()) return null;
  const finishedAt = now.toISOString();
  const dead = status === "DEAD";
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(ref),
        // Unchanged since the read: a worker that started it meanwhile keeps it.
        ConditionExpression: "#status = :was AND fence = :fence",
        UpdateExpression: `SET #status = :status, reason = :reason, finishedAt = :finishedAt${
          dead ? ", deadPk = :deadPk, deadSk = :deadSk, #error = :reason" : ""
        } REMOVE leaseUntil, inflightPk, inflightSk`,
        ExpressionAttributeNames: { "#status": "status", ...(dead ? { "#error": "error" } : {}) },
        ExpressionAttributeValues: {
          ":was": current.status,
          ":fence": current.fence,
          ":status": status,
          ":reason": boundedText(reason),
          ":finishedAt": finishedAt,
          ...(dead
            ? {
                ":deadPk": deadLetterPk(current.tenantId),
                ":deadSk": `${finishedAt}#${current.runId}`,
              }
            : {}),
        },
        ReturnValues: "ALL_NEW",
      }),
    );
    const run = decodeRun(result.Attributes ?? {});
    if (current.status === "QUEUED") return run;
    // A RUNNING run may still count as active on its job; overlap would wait a lease for nothing.
    await engine.doc
      .send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: jobKey(ref.jobId),
          ConditionExpression: "attribute_exists(pk)",
          UpdateExpression: "REMOVE activeRuns.#runId",
          ExpressionAttributeNames: { "#runId": run.runId },
        }),
      )
      .catch((error: unknown) => {
        if (!isConditionalCheckFailed(error)) throw error;
      });
    return run;
  } catch (error) {
    if (isConditionalCheckFailed(error)) return null;
    throw error;
  }
}

const PAUSED_REASON = "waiting: job paused";

/**
 * Parks a started run of a PAUSED job: the run goes back to QUEUED and the job
 * lists it in `parkedRuns`, for resume to send (or cancel to cancel). Returns
 * false when the job was no longer paused: the caller sends the run again and
 * its next delivery decides. The run keeps a reaper deadline until the job
 * lists it, so a worker that dies in between loses nothing; once listed, the
 * deadline goes (conditioned on being this one: resume may already have set
 * its own), so a long pause costs no resends.
 */
export async function parkRun(engine: Engine, run: Run, now: Date): Promise<boolean> {
  const deadline = new Date(now.getTime() + engine.settings.leaseMs).toISOString();
  await fencedRunUpdate(engine, run, {
    update:
      "SET #status = :queued, reason = :reason, inflightSk = :deadline, parkedFence = :fence REMOVE leaseUntil",
    values: { ":queued": "QUEUED", ":reason": PAUSED_REASON, ":deadline": deadline },
  });
  if (!(await listParked(engine, run, now))) return false;
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(run),
        ConditionExpression: "#status = :queued AND fence = :fence AND inflightSk = :deadline",
        UpdateExpression: "REMOVE inflightPk, inflightSk",
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
        ConditionExpression: "#status = :paused",
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
        ConditionExpression: "#status = :paused AND attribute_not_exists(parkedRuns)",
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
 * resume die before sending it, the reaper sends it. Returns the run when it
 * is still QUEUED (cancel may have ended it).
 */
export async function rearmParkedRun(
  engine: Engine,
  ref: Pick<RunMessage, "jobId" | "scheduledFor" | "attempt">,
  shardPk: string,
  now: Date,
): Promise<Run | null> {
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(ref),
        ConditionExpression: "#status = :queued",
        UpdateExpression: "SET inflightPk = :pk, inflightSk = :deadline",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":queued": "QUEUED",
          ":pk": shardPk,
          ":deadline": new Date(now.getTime() + engine.settings.leaseMs).toISOString(),
        },
        ReturnValues: "ALL_NEW",
      }),
    );
    return decodeRun(result.Attributes ?? {});
  } catch (error) {
    if (isConditionalCheckFailed(error)) return null;
    throw error;
  }
}
