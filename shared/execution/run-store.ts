import type { TransactWriteCommandInput } from "@aws-sdk/lib-dynamodb";
import { GetCommand, TransactWriteCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { FenceLostError } from "../errors.js";
import type { DueEntry, Job, Run, RunMessage, RunStatus, RunSummary } from "../model.js";
import {
  failedConditionItem,
  isConditionalCheckFailed,
  transactionCancellationCodes,
} from "../storage/dynamo-errors.js";
import { deadLetterPk, decodeJob, decodeRun, encodeDueEntry, jobKey } from "../storage/items.js";
import { runKey } from "../storage/runs.js";

type TransactItem = NonNullable<TransactWriteCommandInput["TransactItems"]>[number];
type Item = Record<string, unknown>;

const keyOfMessage = (m: Pick<RunMessage, "jobId" | "scheduledFor" | "attempt">) =>
  runKey(m.jobId, m.scheduledFor, m.attempt);

export async function getJob(engine: Engine, jobId: string): Promise<Job | null> {
  const result = await engine.doc.send(
    new GetCommand({ TableName: engine.tables.jobs, Key: jobKey(jobId), ConsistentRead: true }),
  );
  return result.Item ? decodeJob(result.Item) : null;
}

export async function getRun(
  engine: Engine,
  ref: Pick<RunMessage, "jobId" | "scheduledFor" | "attempt">,
): Promise<Run | null> {
  const item = await getRunItem(engine, keyOfMessage(ref));
  return item ? decodeRun(item) : null;
}

/** A run's stored item, by its table key (as an index of keys gives it). */
export async function getRunItem(
  engine: Engine,
  key: { readonly pk: string; readonly sk: string },
): Promise<Item | null> {
  const result = await engine.doc.send(
    new GetCommand({ TableName: engine.tables.runs, Key: key, ConsistentRead: true }),
  );
  return result.Item ?? null;
}

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
        Key: keyOfMessage(message),
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
      ":reason": reason,
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
        Key: keyOfMessage(run),
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
}

/**
 * Records how a run ended, in one transaction with its side effects on the
 * job (activeRuns, lastRun) and the next attempt, all conditioned on the
 * run's fence: a worker that lost the run writes nothing.
 */
export async function finishRun(
  engine: Engine,
  run: Run,
  ending: RunEnding,
  now: Date,
): Promise<Run> {
  const finishedAt = now.toISOString();
  const durationMs = ending.ran && run.startedAt ? now.getTime() - Date.parse(run.startedAt) : null;
  const names: Record<string, string> = { "#status": "status" };
  const values: Record<string, unknown> = {
    ":fence": run.fence,
    ":running": "RUNNING",
    ":status": ending.status,
    ":finishedAt": finishedAt,
    ":durationMs": durationMs,
    ":error": ending.error ?? null,
    ":reason": ending.reason ?? null,
  };
  let set =
    "SET #status = :status, finishedAt = :finishedAt, durationMs = :durationMs, #error = :error, reason = :reason";
  names["#error"] = "error";
  if (ending.status === "DEAD") {
    set += ", deadPk = :deadPk, deadSk = :deadSk";
    values[":deadPk"] = deadLetterPk(run.tenantId);
    values[":deadSk"] = `${finishedAt}#${run.runId}`;
  }
  const items: TransactItem[] = [
    {
      Update: {
        TableName: engine.tables.runs,
        Key: keyOfMessage(run),
        ConditionExpression: "fence = :fence AND #status = :running",
        UpdateExpression: `${set} REMOVE leaseUntil, inflightPk, inflightSk`,
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
      },
    },
  ];
  const jobUpdate = jobAfterRun(engine.tables.jobs, run, ending, finishedAt);
  if (jobUpdate) items.push(jobUpdate);
  if (ending.retry && "runItem" in ending.retry) {
    items.push({
      Put: {
        TableName: engine.tables.runs,
        Item: ending.retry.runItem,
        ConditionExpression: "attribute_not_exists(pk)",
      },
    });
  } else if (ending.retry) {
    items.push({
      Put: {
        TableName: engine.tables.jobs,
        Item: encodeDueEntry(ending.retry.dueEntry),
        ConditionExpression: "attribute_not_exists(pk)",
      },
    });
  }
  try {
    await engine.doc.send(new TransactWriteCommand({ TransactItems: items }));
  } catch (error) {
    const codes = transactionCancellationCodes(error);
    if (codes?.[0] === "ConditionalCheckFailed") {
      throw new FenceLostError(`run ${run.runId}`, run.fence, { cause: error });
    }
    throw error;
  }
  return {
    ...run,
    status: ending.status,
    finishedAt,
    durationMs,
    error: ending.error ?? null,
    reason: ending.reason ?? null,
    leaseUntil: null,
  };
}

function jobAfterRun(
  jobsTable: string,
  run: Run,
  ending: RunEnding,
  finishedAt: string,
): TransactItem | null {
  if (!ending.ran && !ending.tracked) return null;
  const sets = ["activeRevision = if_not_exists(activeRevision, :zero) + :one"];
  const values: Record<string, unknown> = { ":zero": 0, ":one": 1 };
  if (ending.ran) {
    const summary: RunSummary = {
      runId: run.runId,
      status: ending.status,
      scheduledFor: run.scheduledFor,
      attempt: run.attempt,
      finishedAt,
    };
    sets.push("lastRun = :lastRun");
    values[":lastRun"] = summary;
  }
  return {
    Update: {
      TableName: jobsTable,
      Key: jobKey(run.jobId),
      ConditionExpression: "attribute_exists(pk)",
      UpdateExpression: `SET ${sets.join(", ")}${ending.tracked ? " REMOVE activeRuns.#runId" : ""}`,
      ...(ending.tracked ? { ExpressionAttributeNames: { "#runId": run.runId } } : {}),
      ExpressionAttributeValues: values,
    },
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
        Key: keyOfMessage(ref),
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
          ":reason": reason,
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
