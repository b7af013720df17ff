import { QueryCommand, type QueryCommandInput } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { JobNotFoundError, RunNotFoundError } from "../errors.js";
import { getJob, getRun } from "../execution/run-store.js";
import { parseRunId } from "../keys.js";
import type { Job, JobStatus, Run } from "../model.js";
import { deadLetterPk, decodeJob, decodeRun, jobPk, tenantPk } from "../storage/items.js";
import { JOBS_BY_TENANT_INDEX, RUNS_DEAD_LETTER_INDEX } from "../storage/tables.js";
import { decodeCursor, encodeCursor, type Page } from "./cursor.js";

/** Reads scoped to a tenant: another tenant's job is reported as not found, so existence does not leak. */
export async function getTenantJob(engine: Engine, tenantId: string, jobId: string): Promise<Job> {
  const job = await getJob(engine, jobId);
  if (job === null || job.tenantId !== tenantId) throw new JobNotFoundError(jobId);
  return job;
}

export async function getTenantRun(engine: Engine, tenantId: string, runId: string): Promise<Run> {
  const ref = parseRunId(runId);
  if (ref === null) throw new RunNotFoundError(runId);
  const run = await getRun(engine, ref);
  if (run === null || run.tenantId !== tenantId) throw new RunNotFoundError(runId);
  return run;
}

/** One page of a newest-first query, its cursor opaque to callers. */
async function queryPage<T>(
  engine: Engine,
  query: Omit<QueryCommandInput, "ScanIndexForward" | "Limit" | "ExclusiveStartKey">,
  options: { limit: number; cursor?: string },
  decode: (item: Record<string, unknown>) => T,
): Promise<Page<T>> {
  const page = await engine.doc.send(
    new QueryCommand({
      ...query,
      ScanIndexForward: false,
      Limit: options.limit,
      ExclusiveStartKey: decodeCursor(options.cursor),
    }),
  );
  return { items: (page.Items ?? []).map(decode), nextCursor: encodeCursor(page.LastEvaluatedKey) };
}

/** The tenant's jobs, newest first (job ids are ULIDs, so descending key order is creation order). */
export function listJobs(
  engine: Engine,
  tenantId: string,
  options: { status?: JobStatus; limit: number; cursor?: string },
): Promise<Page<Job>> {
  const { status } = options;
  return queryPage(
    engine,
    {
      TableName: engine.tables.jobs,
      IndexName: JOBS_BY_TENANT_INDEX,
      KeyConditionExpression: "tenantPk = :tenant",
      ...(status
        ? {
            FilterExpression: "#status = :status",
            ExpressionAttributeNames: { "#status": "status" },
          }
        : {}),
      ExpressionAttributeValues: {
        ":tenant": tenantPk(tenantId),
        ...(status ? { ":status": status } : {}),
      },
    },
    options,
    decodeJob,
  );
}

/** A job's runs, newest occurrence first. */
export function listRuns(
  engine: Engine,
  jobId: string,
  options: { limit: number; cursor?: string },
): Promise<Page<Run>> {
  return queryPage(
    engine,
    {
      TableName: engine.tables.runs,
      KeyConditionExpression: "pk = :pk AND begins_with(sk, :run)",
      ExpressionAttributeValues: { ":pk": jobPk(jobId), ":run": "RUN#" },
    },
    options,
    decodeRun,
  );
}

/** DEAD runs not yet replayed, newest first. */
export function listDeadLetters(
  engine: Engine,
  tenantId: string,
  options: { limit: number; cursor?: string },
): Promise<Page<Run>> {
  return queryPage(
    engine,
    {
      TableName: engine.tables.runs,
      IndexName: RUNS_DEAD_LETTER_INDEX,
      KeyConditionExpression: "deadPk = :pk",
      ExpressionAttributeValues: { ":pk": deadLetterPk(tenantId) },
    },
    options,
    decodeRun,
  );
}
