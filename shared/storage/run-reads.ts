import { GetCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import type { Job, Run } from "../model.js";
import type { RunMessage } from "../queue/run-message.js";
import { batchGetItems } from "./batch-get.js";
import { decodeJob, decodeRun, jobKey } from "./items.js";
import { hasExpired } from "./retention.js";
import { runKey } from "./runs.js";

type Item = Record<string, unknown>;

/** A run's identity as messages and run ids carry it. */
export type RunRef = Pick<RunMessage, "jobId" | "scheduledFor" | "attempt">;

/** The run's table key. */
export const runKeyOf = (ref: RunRef) => runKey(ref.jobId, ref.scheduledFor, ref.attempt);

/**
 * The job as it stands (a consistent read), or null when there is none or it has expired: TTL
 * deletes an ended job's item some time after its retention (within days), and until then every
 * reader takes it as gone already, so what a request gets does not hang on when TTL comes round.
 */
export async function getJob(engine: Engine, jobId: string): Promise<Job | null> {
  const result = await engine.doc.send(
    new GetCommand({ TableName: engine.tables.jobs, Key: jobKey(jobId), ConsistentRead: true }),
  );
  return result.Item && !hasExpired(result.Item, engine.clock()) ? decodeJob(result.Item) : null;
}

/** The run as it stands (a consistent read), or null when there is none. */
export async function getRun(engine: Engine, ref: RunRef): Promise<Run | null> {
  const item = await getRunItem(engine, runKeyOf(ref));
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

/**
 * The run as it stands (a consistent read), or null when there is none: a BatchGetItem of one
 * key, the way the worker reads runs (its role grants no GetItem on the runs table).
 */
export async function readRun(engine: Engine, ref: RunRef): Promise<Run | null> {
  const [item] = await batchGetItems(engine, engine.tables.runs, [runKeyOf(ref)], {
    consistentRead: true,
  });
  return item === undefined ? null : decodeRun(item);
}

/**
 * The attempt a failure's next attempt follows (`run.retryOf`: the same occurrence, one attempt
 * before), read consistently; null once its TTL has removed it.
 */
export function getRetryPredecessor(engine: Engine, run: Run): Promise<Run | null> {
  return readRun(engine, { ...run, attempt: run.attempt - 1 });
}

/**
 * What the run is of: a schedule's occurrence, or not one (a triggered run, or its retry or
 * replay, or a dependent's run); `firstGone` for a later attempt whose first attempt TTL has
 * removed, which cannot be told. A later attempt does not say it was triggered: its first attempt
 * does (one consistent read).
 */
export async function runOrigin(
  engine: Engine,
  run: Run,
): Promise<"occurrence" | "notOccurrence" | "firstGone"> {
  if (run.trigger !== undefined || run.triggered === true) return "notOccurrence";
  if (run.attempt === 1) return "occurrence";
  const first = await readRun(engine, { ...run, attempt: 1 });
  if (first === null) return "firstGone";
  return first.triggered === true ? "notOccurrence" : "occurrence";
}

/**
 * Whether the run is of a schedule's occurrence (`runOrigin`); a later attempt whose first is gone
 * with its TTL is taken for an occurrence's.
 */
export async function isOccurrenceRun(engine: Engine, run: Run): Promise<boolean> {
  return (await runOrigin(engine, run)) !== "notOccurrence";
}
