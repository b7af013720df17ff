import type { Engine } from "../engine.js";
import { JobNotFoundError, RunNotFoundError } from "../errors.js";
import { parseRunId } from "../keys.js";
import type { Job, JobStatus, Run } from "../model.js";
import {
  deadRunsOfTenant,
  getJobs,
  type KeyPage,
  type PageRequest,
  runsOfJob,
  tenantJobIds,
} from "../storage/job-queries.js";
import { getJob, getRun } from "../storage/run-reads.js";
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

interface PageOptions {
  readonly limit: number;
  readonly cursor?: string;
}

/** The page a cursor (opaque to callers) asks for. */
const pageRequest = (options: PageOptions): PageRequest => ({
  limit: options.limit,
  startKey: decodeCursor(options.cursor),
});

const pageOf = <T>(page: KeyPage<T>): Page<T> => ({
  items: page.items,
  nextCursor: encodeCursor(page.lastKey),
});

/**
 * The tenant's jobs, newest first. The index holds keys only, so the page's
 * items are read from the table and the status filter applies to them; like a
 * DynamoDB filter, it can leave a page short of the limit.
 */
export async function listJobs(
  engine: Engine,
  tenantId: string,
  options: PageOptions & { status?: JobStatus },
): Promise<Page<Job>> {
  const ids = await tenantJobIds(engine, tenantId, pageRequest(options));
  const jobs = await getJobs(engine, ids.items);
  const { status } = options;
  return pageOf({
    items: jobs.filter((job) => job.tenantId === tenantId && (!status || job.status === status)),
    lastKey: ids.lastKey,
  });
}

/** A job's runs, newest occurrence first. */
export async function listRuns(
  engine: Engine,
  jobId: string,
  options: PageOptions,
): Promise<Page<Run>> {
  return pageOf(await runsOfJob(engine, jobId, pageRequest(options)));
}

/** DEAD runs not yet replayed, newest first. */
export async function listDeadLetters(
  engine: Engine,
  tenantId: string,
  options: PageOptions,
): Promise<Page<Run>> {
  return pageOf(await deadRunsOfTenant(engine, tenantId, pageRequest(options)));
}
