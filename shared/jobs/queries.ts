import { BatchGetCommand, QueryCommand, type QueryCommandInput } from "@aws-sdk/lib-dynamodb";
import { sleep } from "../clock.js";
import type { Engine } from "../engine.js";
import { JobNotFoundError, RunNotFoundError } from "../errors.js";
import { parseRunId } from "../keys.js";
import type { Job, JobStatus, Run } from "../model.js";
import { deadLetterPk, decodeJob, decodeRun, jobKey, jobPk, tenantPk } from "../storage/items.js";
import { getJob, getRun } from "../storage/run-reads.js";
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

/**
 * The tenant's jobs, newest first (job ids are ULIDs, so descending key order
 * is creation order). The index holds keys only, so the page's items are read
 * from the table and the status filter applies to them; like a DynamoDB
 * filter, it can leave a page short of the limit.
 */
export async function listJobs(
  engine: Engine,
  tenantId: string,
  options: { status?: JobStatus; limit: number; cursor?: string },
): Promise<Page<Job>> {
  const keys = await queryPage(
    engine,
    {
      TableName: engine.tables.jobs,
      IndexName: JOBS_BY_TENANT_INDEX,
      KeyConditionExpression: "tenantPk = :tenant",
      ExpressionAttributeValues: { ":tenant": tenantPk(tenantId) },
    },
    options,
    (item) => String(item.tenantSk),
  );
  const jobs = await getJobs(engine, keys.items);
  const { status } = options;
  return {
    items: jobs.filter((job) => job.tenantId === tenantId && (!status || job.status === status)),
    nextCursor: keys.nextCursor,
  };
}

const MAX_BATCH_GET_ROUNDS = 6;

/** The jobs with these ids that exist, in the order given. */
async function getJobs(engine: Engine, jobIds: readonly string[]): Promise<Job[]> {
  const found = new Map<string, Job>();
  for (let i = 0; i < jobIds.length; i += 100) {
    let keys: Record<string, unknown>[] = jobIds.slice(i, i + 100).map(jobKey);
    for (let round = 0; keys.length > 0; round++) {
      if (round === MAX_BATCH_GET_ROUNDS)
        throw new Error("jobs table kept throttling BatchGetItem");
      if (round > 0) await sleep(50 * 2 ** round);
      const result = await engine.doc.send(
        new BatchGetCommand({ RequestItems: { [engine.tables.jobs]: { Keys: keys } } }),
      );
      for (const item of result.Responses?.[engine.tables.jobs] ?? []) {
        const job = decodeJob(item);
        found.set(job.jobId, job);
      }
      keys = result.UnprocessedKeys?.[engine.tables.jobs]?.Keys ?? [];
    }
  }
  return jobIds.flatMap((id) => found.get(id) ?? []);
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
