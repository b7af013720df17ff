import type { Engine } from "../engine.js";
import { JobNotFoundError, RunNotFoundError } from "../errors.js";
import { parseRunId } from "../keys.js";
import type { Job, JobStatus, Run, RunStatus } from "../model.js";
import {
  deadRunsOfTenant,
  getJobs,
  type KeyPage,
  type PageRequest,
  type RunRange,
  runRangeKeys,
  runsOfJob,
  tenantJobIds,
} from "../storage/job-queries.js";
import { readListedRuns } from "../storage/job-runs.js";
import { getJob, getRun } from "../storage/run-reads.js";
import { runKey } from "../storage/runs.js";
import { ValidationError } from "../validation.js";
import { boundCursor, type Page, startKeyOf } from "./cursor.js";

/** Reads scoped to a tenant: another tenant's job is reported as not found, so existence does not leak. */
export async function getTenantJob(engine: Engine, tenantId: string, jobId: string): Promise<Job> {
  const job = await getJob(engine, jobId);
  if (job === null || job.tenantId !== tenantId) throw new JobNotFoundError(jobId);
  return job;
}

/**
 * Checks that the tenant may read job `jobId`'s run history: the job is
 * theirs, or it was deleted and its remaining runs (one read of one) are
 * theirs. A deleted job's history answers until its runs expire; another
 * tenant's, or a job with neither item nor runs, is not found. Another
 * tenant's job takes the same two reads as a job that does not exist, so the
 * time the answer takes does not tell the caller that it exists.
 */
export async function assertTenantHistory(
  engine: Engine,
  tenantId: string,
  jobId: string,
): Promise<void> {
  const job = await getJob(engine, jobId);
  if (job?.tenantId === tenantId) return;
  const [anyRun] = (await runsOfJob(engine, jobId, { limit: 1, startKey: undefined })).items;
  if (job !== null || anyRun?.tenantId !== tenantId) throw new JobNotFoundError(jobId);
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
  startKey: startKeyOf(options.cursor),
});

const pageOf = <T>(page: KeyPage<T>, binding?: string): Page<T> => ({
  items: page.items,
  nextCursor: boundCursor(page.lastKey, binding),
});

/**
 * The tenant's jobs, newest first. The index holds keys only, so the page's
 * items are read from the table and the status filter applies to them; like a
 * DynamoDB filter, it can leave a page short of the limit. `jobsRead` counts the
 * jobs read, kept or not.
 */
export async function listJobs(
  engine: Engine,
  tenantId: string,
  options: PageOptions & { status?: JobStatus; readonly binding?: string | undefined },
): Promise<Page<Job> & { readonly jobsRead: number }> {
  const ids = await tenantJobIds(engine, tenantId, pageRequest(options));
  const { status } = options;
  const jobs = (await getJobs(engine, ids.items)).filter(
    (job) => job.tenantId === tenantId && (!status || job.status === status),
  );
  const page = pageOf(
    { items: await jobsAsTheyStand(engine, jobs), lastKey: ids.lastKey },
    options.binding,
  );
  // The jobs read, whatever the filter kept: what the page cost.
  return { ...page, jobsRead: ids.items.length };
}

/**
 * The jobs as a reader sees them: a recurring run's ending leaves the job's
 * lastRun to be brought up to it later, so the runs the jobs list are read
 * with them (one request for all, none when none is listed; job-runs.ts).
 */
async function jobsAsTheyStand(engine: Engine, jobs: readonly Job[]): Promise<Job[]> {
  return (await readListedRuns(engine, jobs)).map((listed) => listed.job);
}

export async function jobAsItStands(engine: Engine, job: Job): Promise<Job> {
  const [listed] = await readListedRuns(engine, [job]);
  return listed?.job ?? job;
}

/**
 * Jobs a request has just written or answers beside what it wrote (a create, a batch's jobs, an
 * edit, a pause, resume or cancel), as a reader sees them (`jobsAsTheyStand`). The writes stand,
 * so storage failing this read (throttled, a timeout) answers the jobs as written rather than an
 * error: a caller told its request failed sends it again, and a create or a batch's job without a
 * key is made twice. Their runs under way then show as the jobs list them.
 */
export async function committedJobsAsTheyStand(
  engine: Engine,
  jobs: readonly Job[],
): Promise<Job[]> {
  try {
    return await jobsAsTheyStand(engine, jobs);
  } catch (error) {
    engine.obs.log.warn("could not read written jobs' runs under way; answering them as written", {
      // One request's jobs are all its caller's.
      tenantId: jobs[0]?.tenantId ?? null,
      jobIds: jobs.map((job) => job.jobId),
      error: String(error),
    });
    return [...jobs];
  }
}

/** One job a request has just written, as `committedJobsAsTheyStand` answers it. */
export async function committedJobAsItStands(engine: Engine, job: Job): Promise<Job> {
  const [standing] = await committedJobsAsTheyStand(engine, [job]);
  return standing ?? job;
}

/** What a runs listing reads: an occurrence range and statuses. */
export interface RunFilter {
  /** The earliest occurrence, inclusive. */
  readonly from?: Date;
  /** The end of the occurrence range, exclusive. */
  readonly to?: Date;
  /** Any of these statuses; empty: all. */
  readonly statuses: readonly RunStatus[];
}

/**
 * A run reaches these statuses only once a worker started it, and a worker
 * starts no run before its occurrence (it waits out an early message), so a
 * listing of only these statuses reads no occurrence after now: the future
 * QUEUED runs the lookahead writes are not read.
 */
const STARTED_STATUSES: ReadonlySet<RunStatus> = new Set([
  "RUNNING",
  "SUCCEEDED",
  "FAILED",
  "DEAD",
]);

/** A status filter drops items DynamoDB has read; a few more reads fill the page. */
const MAX_READS_PER_PAGE = 10;
/** The most items one filtered read asks for. */
const MAX_ITEMS_PER_READ = 1000;

function runRangeOf(engine: Engine, filter: RunFilter): RunRange {
  const ends = filter.to ? [filter.to.getTime() - 1] : [];
  const startedOnly =
    filter.statuses.length > 0 && filter.statuses.every((s) => STARTED_STATUSES.has(s));
  if (startedOnly) ends.push(engine.clock().getTime());
  return {
    ...(filter.from ? { from: filter.from } : {}),
    ...(ends.length > 0 ? { through: new Date(Math.min(...ends)) } : {}),
    statuses: filter.statuses,
  };
}

/**
 * A job's runs, newest occurrence first, of an occurrence range and statuses.
 * A filtered page may come back short of the limit, with a cursor, when its
 * reads ran out before enough runs matched. `binding` names the filter in each
 * cursor, so a cursor is not taken up again under another filter.
 */
export async function listRuns(
  engine: Engine,
  jobId: string,
  options: PageOptions & { readonly filter?: RunFilter; readonly binding?: string },
): Promise<Page<Run>> {
  const range = runRangeOf(engine, options.filter ?? { statuses: [] });
  if (range.from && range.through && range.through < range.from) {
    return { items: [], nextCursor: null };
  }
  const start = startKeyOf(options.cursor);
  let startKey: Record<string, unknown> | undefined = start;
  // A cursor is the caller's text: DynamoDB refuses a start key outside the range (a 500 here).
  const { lo, hi } = runRangeKeys(range);
  if (start !== undefined && !(start.sk !== undefined && start.sk >= lo && start.sk <= hi)) {
    throw new ValidationError([
      {
        field: "cursor",
        message: "lies outside the runs these filters read; start again without it",
      },
    ]);
  }
  const cursorOf = (key: Record<string, unknown> | undefined) => boundCursor(key, options.binding);
  const items: Run[] = [];
  for (let read = 0; read < MAX_READS_PER_PAGE; read++) {
    // Newest first, nothing lies past the range's oldest key (nor may DynamoDB take it to start).
    if (startKey?.sk === lo) {
      startKey = undefined;
      break;
    }
    const wanted = options.limit - items.length;
    // Unfiltered, every item read is kept. Filtered, each read asks for twice as many items per
    // run still wanted as the one before: a common status fills the page in two reads, a rare
    // one reaches deep into the partition in a few.
    const readLimit = Math.min(MAX_ITEMS_PER_READ, wanted * 2 ** read);
    const page = await runsOfJob(engine, jobId, { limit: readLimit, startKey }, range);
    if (page.items.length >= wanted) {
      const kept = page.items.slice(0, wanted);
      items.push(...kept);
      const last = kept.at(-1);
      const resumeAt =
        page.items.length > wanted && last
          ? runKey(last.jobId, last.scheduledFor, last.attempt)
          : page.lastKey;
      return { items, nextCursor: cursorOf(resumeAt) };
    }
    items.push(...page.items);
    startKey = page.lastKey;
    if (startKey === undefined) break;
  }
  return { items, nextCursor: cursorOf(startKey) };
}

/** DEAD runs not yet replayed, newest first. */
export async function listDeadLetters(
  engine: Engine,
  tenantId: string,
  options: PageOptions,
): Promise<Page<Run>> {
  return pageOf(await deadRunsOfTenant(engine, tenantId, pageRequest(options)));
}
