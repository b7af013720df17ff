import type { Engine } from "../engine.js";
import { stringifyExact } from "../exact-json.js";
import { boundCursor, decodeCursor, type Page } from "../jobs/cursor.js";
import { listDeadLetters, listJobs, listRuns, type RunFilter } from "../jobs/queries.js";
import { isRunSortKey, isStorageIso, JOB_ID_PATTERN, parseRunId } from "../keys.js";
import type { Job, JobStatus, Run } from "../model.js";
import { deadLetterPk, jobKey, jobPk, tenantPk } from "../storage/items.js";
import { runKey } from "../storage/runs.js";
import { ValidationError } from "../validation.js";
import { jobDto } from "./dto.js";

/**
 * Cursors are DynamoDB start keys, so a forged or foreign one would reach
 * DynamoDB and fail there (a 500), or start another tenant's partition. Each
 * listing accepts only a key of its own shape inside the caller's partition;
 * an index's start key is an index key the listing's items carry (a job id, a
 * dead letter's `<finishedAt>#<runId>`) and the table key of the item it names
 * (`namesOneItem`), and a job's runs' start key is a run's sort key: what DynamoDB
 * makes of a pair that disagrees, or of a key no item can carry (a lone surrogate),
 * is not for the caller to find out.
 */
function checkCursor(
  cursor: string | undefined,
  partition: Readonly<Record<string, string>>,
  otherKeys: readonly string[],
  { namesOneItem }: CursorChecks = {},
): string | undefined {
  if (cursor === undefined || cursor === "") return undefined;
  const key = decodeCursor(cursor);
  const expected = [...Object.keys(partition), ...otherKeys].sort();
  const actual = Object.keys(key ?? {}).sort();
  const sameShape =
    key !== undefined &&
    actual.length === expected.length &&
    actual.every((name, i) => name === expected[i]) &&
    // DynamoDB's bound on a key is in bytes (a sort key's 1,024), not characters.
    Object.values(key).every((v) => v.length > 0 && Buffer.byteLength(v, "utf8") <= 1024) &&
    Object.entries(partition).every(([name, value]) => key[name] === value) &&
    (namesOneItem === undefined || namesOneItem(key));
  if (!sameShape) {
    throw new ValidationError([
      { field: "cursor", message: "is not a cursor returned by this listing" },
    ]);
  }
  return cursor;
}

interface CursorChecks {
  readonly namesOneItem?: (key: Readonly<Record<string, string>>) => boolean;
}

/** A key's `pk` and `sk` are `expected`'s (null: no item has that index key). */
const tableKeyIs = (
  key: Readonly<Record<string, string>>,
  expected: { readonly pk: string; readonly sk: string } | null,
) => expected !== null && key.pk === expected.pk && key.sk === expected.sk;

/** The table key of the job a byTenant index key names: its `tenantSk` is the job's id. */
function jobKeyOfTenantSk(tenantSk: string | undefined) {
  return tenantSk !== undefined && JOB_ID_PATTERN.test(tenantSk) ? jobKey(tenantSk) : null;
}

/**
 * The table key of the run a dead letter's index sort key names: `<finishedAt>#<runId>`, the
 * instant in storage form (neither part holds a '#').
 */
function runKeyOfDeadSk(deadSk: string | undefined) {
  const [finishedAt = "", id = "", ...more] = (deadSk ?? "").split("#");
  const ref = more.length === 0 && isStorageIso(finishedAt) ? parseRunId(id) : null;
  return ref && runKey(ref.jobId, ref.scheduledFor, ref.attempt);
}

/**
 * A binding as the caller writes its filters: it holds statuses as stored (`status=SUCCEEDED`),
 * which cursors already issued carry, so only the message shows them as the API does.
 */
const filtersShown = (binding: string | undefined) =>
  binding?.replace(
    /(^|&)status=([^&]*)/,
    (_, start: string, names: string) => `${start}status=${names.toLowerCase()}`,
  ) ?? "none";

/**
 * A listing's cursor carries the filter it was made under (`filter`, none unfiltered): under other
 * filters its start key would resume another listing somewhere in the middle, so it is refused.
 */
function checkBinding(cursor: string | undefined, binding: string | undefined): void {
  if (cursor === undefined || cursor === "") return;
  const issued = decodeCursor(cursor)?.filter;
  if (issued !== binding) {
    throw new ValidationError([
      {
        field: "cursor",
        message: `was returned for other filters (${filtersShown(issued)}) than these (${filtersShown(binding)}); start again without it`,
      },
    ]);
  }
}

/** A status filter can leave a DynamoDB page short; a few more reads fill it, each resuming exactly. */
const MAX_READS_PER_PAGE = 10;

/**
 * The most jobs one page reads, filtered or not: an unfiltered page of the largest limit reads as
 * many. A filter drops jobs only after their items are read (the tenant index holds keys only), and
 * reads that went on filling a page read up to ten times its limit, up to 1,000 items of up to
 * 80 KiB and more each, from the table every tenant shares; a page short of its limit has a cursor.
 */
const MAX_JOBS_READ_PER_PAGE = 100;

/**
 * The most a page of jobs may take in the API Lambda's response, whose limit is 6 MB (6,291,456
 * bytes) with its envelope and headers. There the body travels as a JSON string, so its quotes and
 * backslashes count twice: a job's JSON is measured as that string. A job holds up to 80 KiB from
 * its create (more after edits, and up to 1,000 dependents), so a page of 100, or 50 whose payloads
 * are full of quotes, would pass the limit, and API Gateway would answer 500 for the whole page.
 */
const MAX_JOBS_PAGE_BYTES = 5 * 1024 * 1024;

/** What a job adds to a page as the Lambda response carries it (see MAX_JOBS_PAGE_BYTES). */
const responseBytesOf = (job: Job) =>
  Buffer.byteLength(JSON.stringify(stringifyExact(jobDto(job))), "utf8");

/** The cursor that resumes a tenant's jobs after `job`: its byTenant index key, and its binding. */
const cursorAfter = (tenantId: string, job: Job, binding: string | undefined) =>
  boundCursor({ tenantPk: tenantPk(tenantId), tenantSk: job.jobId, ...jobKey(job.jobId) }, binding);

/**
 * The tenant's jobs, newest first, up to `limit` and MAX_JOBS_PAGE_BYTES: a page that reaches the
 * bytes first ends at the last job that fits (at least one), its cursor resuming after it. A
 * filtered page stops reading at MAX_JOBS_READ_PER_PAGE jobs, short of `limit` if need be, its
 * cursor resuming after the last job read. The cursor is bound to the status filter (see
 * checkBinding).
 */
export async function jobsPage(
  engine: Engine,
  tenantId: string,
  options: { status?: JobStatus; limit: number; cursor?: string },
): Promise<Page<Job>> {
  const binding = options.status === undefined ? undefined : `status=${options.status}`;
  checkBinding(options.cursor, binding);
  let cursor = checkCursor(
    options.cursor,
    { tenantPk: tenantPk(tenantId), ...(binding ? { filter: binding } : {}) },
    ["tenantSk", "pk", "sk"],
    { namesOneItem: (key) => tableKeyIs(key, jobKeyOfTenantSk(key.tenantSk)) },
  );
  const items: Job[] = [];
  let bytes = 0;
  // Each read takes up to its limit of job ids from the index (a Query may answer fewer), and reads
  // each job they name.
  let jobsRead = 0;
  for (
    let read = 0;
    read < MAX_READS_PER_PAGE && items.length < options.limit && jobsRead < MAX_JOBS_READ_PER_PAGE;
    read++
  ) {
    const page = await listJobs(engine, tenantId, {
      ...(options.status ? { status: options.status } : {}),
      binding,
      limit: Math.min(options.limit - items.length, MAX_JOBS_READ_PER_PAGE - jobsRead),
      ...(cursor ? { cursor } : {}),
    });
    jobsRead += page.jobsRead;
    for (const job of page.items) {
      bytes += responseBytesOf(job);
      const last = items.at(-1);
      if (bytes > MAX_JOBS_PAGE_BYTES && last !== undefined) {
        return { items, nextCursor: cursorAfter(tenantId, last, binding) };
      }
      items.push(job);
    }
    cursor = page.nextCursor ?? undefined;
    if (cursor === undefined) break;
  }
  return { items, nextCursor: cursor ?? null };
}

/** `binding` names the listing's filter; a cursor carries it and is refused under another. */
export function runsPage(
  engine: Engine,
  jobId: string,
  options: { limit: number; cursor?: string; filter: RunFilter; binding: string | undefined },
): Promise<Page<Run>> {
  const { binding } = options;
  checkBinding(options.cursor, binding);
  const cursor = checkCursor(
    options.cursor,
    { pk: jobPk(jobId), ...(binding ? { filter: binding } : {}) },
    ["sk"],
    // A run's key as the listing hands it out: DynamoDB takes any sort key in the partition as a
    // start, a lone surrogate too, and a listing resumed from a made-up one is no listing's page.
    { namesOneItem: (key) => isRunSortKey(key.sk ?? "") },
  );
  return listRuns(engine, jobId, {
    limit: options.limit,
    filter: options.filter,
    ...(binding ? { binding } : {}),
    ...(cursor ? { cursor } : {}),
  });
}

export function deadLettersPage(
  engine: Engine,
  tenantId: string,
  options: { limit: number; cursor?: string },
): Promise<Page<Run>> {
  const cursor = checkCursor(
    options.cursor,
    { deadPk: deadLetterPk(tenantId) },
    ["deadSk", "pk", "sk"],
    { namesOneItem: (key) => tableKeyIs(key, runKeyOfDeadSk(key.deadSk)) },
  );
  return listDeadLetters(engine, tenantId, { limit: options.limit, ...(cursor ? { cursor } : {}) });
}
