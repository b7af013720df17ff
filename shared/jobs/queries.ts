import { QueryCommand } from "@aws-sdk/lib-dynamodb";
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

export async function listJobs(
  engine: Engine,
  tenantId: string,
  options: { status?: JobStatus; limit: number; cursor?: string },
): Promise<Page<Job>> {
  const page = await engine.doc.send(
    new QueryCommand({
      TableName: engine.tables.jobs,
      IndexName: JOBS_BY_TENANT_INDEX,
      KeyConditionExpression: "tenantPk = :tenant",
      ...(options.status
        ? {
            FilterExpression: "#status = :status",
            ExpressionAttributeNames: { "#status": "status" },
          }
        : {}),
      ExpressionAttributeValues: {
        ":tenant": tenantPk(tenantId),
        ...(options.status ? { ":status": options.status } : {}),
      },
      // Job ids are ULIDs, so descending key order is newest first.
      ScanIndexForward: false,
      Limit: options.limit,
      ExclusiveStartKey: decodeCursor(options.cursor),
    }),
  );
  return {
    items: (page.Items ?? []).map(decodeJob),
    nextCursor: encodeCursor(page.LastEvaluatedKey),
  };
}

/** A job's runs, newest occurrence first. */
export async function listRuns(
  engine: Engine,
  jobId: string,
  options: { limit: number; cursor?: string },
): Promise<Page<Run>> {
  const page = await engine.doc.send(
    new QueryCommand({
      TableName: engine.tables.runs,
      KeyConditionExpression: "pk = :pk AND begins_with(sk, :run)",
      ExpressionAttributeValues: { ":pk": jobPk(jobId), ":run": "RUN#" },
      ScanIndexForward: false,
      Limit: options.limit,
      ExclusiveStartKey: decodeCursor(options.cursor),
    }),
  );
  return {
    items: (page.Items ?? []).map(decodeRun),
    nextCursor: encodeCursor(page.LastEvaluatedKey),
  };
}

/** DEAD runs not yet replayed, newest first. */
export async function listDeadLetters(
  engine: Engine,
  tenantId: string,
  options: { limit: number; cursor?: string },
): Promise<Page<Run>> {
  const page = await engine.doc.send(
    new QueryCommand({
      TableName: engine.tables.runs,
      IndexName: RUNS_DEAD_LETTER_INDEX,
      KeyConditionExpression: "deadPk = :pk",
      ExpressionAttributeValues: { ":pk": deadLetterPk(tenantId) },
      ScanIndexForward: false,
      Limit: options.limit,
      ExclusiveStartKey: decodeCursor(options.cursor),
    }),
  );
  return {
    items: (page.Items ?? []).map(decodeRun),
    nextCursor: encodeCursor(page.LastEvaluatedKey),
  };
}
