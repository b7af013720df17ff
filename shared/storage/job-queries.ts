import { QueryCommand, type QueryCommandInput } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { MAX_ATTEMPT, runSortKey } from "../keys.js";
import type { Job, Run } from "../model.js";
import { batchGetItems } from "./batch-get.js";
import { deadLetterPk, decodeJob, decodeRun, jobKey, jobPk, tenantPk } from "./items.js";
import { hasExpired } from "./retention.js";
import { JOBS_BY_TENANT_INDEX, RUNS_DEAD_LETTER_INDEX } from "./tables.js";

type Key = Record<string, unknown>;

/** One page of a query, and the key to read the next one from (absent on the last page). */
export interface KeyPage<T> {
  readonly items: T[];
  readonly lastKey: Key | undefined;
}

export interface PageRequest {
  readonly limit: number;
  readonly startKey: Key | undefined;
}

/** One page of a newest-first query. */
async function queryPage<T>(
  engine: Engine,
  query: Omit<QueryCommandInput, "ScanIndexForward" | "Limit" | "ExclusiveStartKey">,
  page: PageRequest,
  decode: (item: Key) => T,
): Promise<KeyPage<T>> {
  const result = await engine.doc.send(
    new QueryCommand({
      ...query,
      ScanIndexForward: false,
      Limit: page.limit,
      ExclusiveStartKey: page.startKey,
    }),
  );
  return { items: (result.Items ?? []).map(decode), lastKey: result.LastEvaluatedKey };
}

/** The ids of a tenant's jobs, newest first (job ids are ULIDs: descending is creation order). */
export function tenantJobIds(
  engine: Engine,
  tenantId: string,
  page: PageRequest,
): Promise<KeyPage<string>> {
  return queryPage(
    engine,
    {
      TableName: engine.tables.jobs,
      IndexName: JOBS_BY_TENANT_INDEX,
      KeyConditionExpression: "tenantPk = :tenant",
      ExpressionAttributeValues: { ":tenant": tenantPk(tenantId) },
    },
    page,
    (item) => String(item.tenantSk),
  );
}

/**
 * The jobs with these ids that exist and have not expired (as `getJob`), in the order given;
 * `consistent` when they must show every write made before the read.
 */
export async function getJobs(
  engine: Engine,
  jobIds: readonly string[],
  { consistent = false }: { readonly consistent?: boolean } = {},
): Promise<Job[]> {
  const items = await batchGetItems(engine, engine.tables.jobs, jobIds.map(jobKey), {
    consistentRead: consistent,
  });
  const now = engine.clock();
  const live = items.filter((item) => !hasExpired(item, now));
  const found = new Map(live.map(decodeJob).map((job) => [job.jobId, job]));
  return jobIds.flatMap((id) => found.get(id) ?? []);
}

/** Which of a job's runs a listing reads: a sort-key range of occurrences and a status filter. */
export interface RunRange {
  /** The earliest occurrence, inclusive. */
  readonly from?: Date;
  /** The latest occurrence, inclusive (a range's exclusive end, less a millisecond). */
  readonly through?: Date;
  /** Stored statuses (upper case); empty or absent: every status. */
  readonly statuses?: readonly string[];
}

/** The sort keys a range reads, both inclusive: a query's start key must lie between them. */
export function runRangeKeys(range: RunRange): { readonly lo: string; readonly hi: string } {
  return {
    // "RUN#" sorts before and "RUN#~" after every run key: instants start with a digit.
    lo: range.from ? runSortKey(range.from, 1) : "RUN#",
    hi: range.through ? runSortKey(range.through, MAX_ATTEMPT) : "RUN#~",
  };
}

/**
 * A job's runs, newest occurrence first. The occurrence range is a sort-key
 * range, so runs outside it are not read at all; the status filter is a
 * DynamoDB filter: the items it drops are still read (and paid for), and
 * `page.limit` counts the items read, not the ones kept.
 */
export function runsOfJob(
  engine: Engine,
  jobId: string,
  page: PageRequest,
  range: RunRange = {},
): Promise<KeyPage<Run>> {
  const statuses = range.statuses ?? [];
  const statusValues = Object.fromEntries(statuses.map((status, i) => [`:s${i}`, status]));
  const { lo, hi } = runRangeKeys(range);
  return queryPage(
    engine,
    {
      TableName: engine.tables.runs,
      KeyConditionExpression: "pk = :pk AND sk BETWEEN :lo AND :hi",
      ...(statuses.length > 0
        ? {
            FilterExpression: `#status IN (${Object.keys(statusValues).join(", ")})`,
            ExpressionAttributeNames: { "#status": "status" },
          }
        : {}),
      ExpressionAttributeValues: {
        ":pk": jobPk(jobId),
        ":lo": lo,
        ":hi": hi,
        ...statusValues,
      },
    },
    page,
    decodeRun,
  );
}

/** A tenant's DEAD runs not yet replayed, newest first. */
export function deadRunsOfTenant(
  engine: Engine,
  tenantId: string,
  page: PageRequest,
): Promise<KeyPage<Run>> {
  return queryPage(
    engine,
    {
      TableName: engine.tables.runs,
      IndexName: RUNS_DEAD_LETTER_INDEX,
      KeyConditionExpression: "deadPk = :pk",
      ExpressionAttributeValues: { ":pk": deadLetterPk(tenantId) },
    },
    page,
    decodeRun,
  );
}

/**
 * A job's runs in `statuses` (QUEUED and RUNNING: the runs not yet ended; a repeated cancel's
 * CANCELLED too) scheduled from `from` to `to` (every attempt), page by page, oldest first, read
 * strongly consistent. The status filter reads the same items whatever it keeps.
 */
export async function* liveRunsOfJob(
  engine: Engine,
  jobId: string,
  from: Date,
  to: Date,
  statuses: readonly ("QUEUED" | "RUNNING" | "CANCELLED")[],
): AsyncGenerator<Run[]> {
  const statusValues = Object.fromEntries(statuses.map((status, i) => [`:s${i}`, status]));
  yield* consistentRunPages(engine, {
    KeyConditionExpression: "pk = :pk AND sk BETWEEN :from AND :to",
    FilterExpression: `#status IN (${Object.keys(statusValues).join(", ")})`,
    ExpressionAttributeNames: { "#status": "status" },
    ExpressionAttributeValues: {
      ":pk": jobPk(jobId),
      ":from": runSortKey(from, 1),
      ":to": runSortKey(to, MAX_ATTEMPT),
      ...statusValues,
    },
  });
}

/** Every page of a strongly consistent query of the runs table, in key order. */
async function* consistentRunPages(
  engine: Engine,
  query: Omit<QueryCommandInput, "TableName" | "ConsistentRead" | "ExclusiveStartKey">,
): AsyncGenerator<Run[]> {
  let startKey: Key | undefined;
  do {
    const page = await engine.doc.send(
      new QueryCommand({
        ...query,
        TableName: engine.tables.runs,
        ConsistentRead: true,
        ExclusiveStartKey: startKey,
      }),
    );
    yield (page.Items ?? []).map(decodeRun);
    startKey = page.LastEvaluatedKey;
  } while (startKey);
}

/** The latest attempt of one occurrence of the job (a consistent read), or null when it has none. */
export async function latestAttemptOf(
  engine: Engine,
  jobId: string,
  scheduledFor: string,
): Promise<Run | null> {
  const page = await engine.doc.send(
    new QueryCommand({
      TableName: engine.tables.runs,
      KeyConditionExpression: "pk = :pk AND sk BETWEEN :first AND :last",
      ExpressionAttributeValues: {
        ":pk": jobPk(jobId),
        ":first": runSortKey(scheduledFor, 1),
        ":last": runSortKey(scheduledFor, MAX_ATTEMPT),
      },
      ScanIndexForward: false,
      Limit: 1,
      ConsistentRead: true,
    }),
  );
  const [item] = page.Items ?? [];
  return item ? decodeRun(item) : null;
}

/** An occurrence's latest attempt, and whether its attempt 1 (when still there) was a trigger's. */
export interface OccurrenceLatest {
  readonly latest: Run;
  readonly triggered: boolean;
}

/**
 * The latest attempt of each occurrence of the job from `from` on, and of each of `alsoAt` before
 * it, oldest occurrence first: one consistent query, page by page (and one more of each of
 * `alsoAt`), for a one-off's alone (from its floor: its occurrences across moves, their retries,
 * replays and triggers; and those it keeps below it). A later attempt does not say it was
 * triggered: its attempt 1 does (`triggered`).
 */
export async function latestAttemptsOfJob(
  engine: Engine,
  jobId: string,
  from: Date,
  /** Occurrences before `from` read too, each on its own (a one-off's `oneOffBelow`). */
  alsoAt: readonly Date[] = [],
): Promise<OccurrenceLatest[]> {
  const byOccurrence = new Map<string, OccurrenceLatest>();
  const ranges = [
    ...alsoAt.filter((at) => at < from).map((at) => runRangeKeys({ from: at, through: at })),
    runRangeKeys({ from }),
  ];
  for (const { lo, hi } of ranges)
    for await (const runs of consistentRunPages(engine, {
      KeyConditionExpression: "pk = :pk AND sk BETWEEN :lo AND :hi",
      ExpressionAttributeValues: { ":pk": jobPk(jobId), ":lo": lo, ":hi": hi },
    })) {
      // Sort keys order attempts within an occurrence: each later one read replaces the latest.
      for (const run of runs) {
        const seen = byOccurrence.get(run.scheduledFor);
        const triggered = seen ? seen.triggered : run.attempt === 1 && run.triggered === true;
        byOccurrence.set(run.scheduledFor, { latest: run, triggered });
      }
    }
  return [...byOccurrence.values()];
}

/**
 * The items of a job's runs scheduled from `from` through `through`, with the attributes
 * `projection` names (`#name` for a reserved word), read a page at a time as they are asked for.
 */
async function* runItemsOf(
  engine: Engine,
  jobId: string,
  range: { readonly from: Date; readonly through: Date; readonly newestFirst?: boolean },
  projection: string,
  names?: Record<string, string>,
): AsyncGenerator<Record<string, unknown>> {
  const { lo, hi } = runRangeKeys(range);
  let startKey: Key | undefined;
  do {
    const page = await engine.doc.send(
      new QueryCommand({
        TableName: engine.tables.runs,
        KeyConditionExpression: "pk = :pk AND sk BETWEEN :lo AND :hi",
        ProjectionExpression: projection,
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: { ":pk": jobPk(jobId), ":lo": lo, ":hi": hi },
        ScanIndexForward: range.newestFirst !== true,
        // Newest first is read to the first run started: a small page, as few runs are queued.
        Limit: range.newestFirst === true ? 25 : undefined,
        ExclusiveStartKey: startKey,
      }),
    );
    yield* page.Items ?? [];
    startKey = page.LastEvaluatedKey;
  } while (startKey);
}

/**
 * The planned time (`plannedFor`, or the occurrence itself when it has none) of each occurrence
 * of the job that has a run scheduled from `from` through `through`, by occurrence (ISO). Every
 * attempt of an occurrence keeps its planned time, so any of them tells it.
 */
export async function plannedTimesOfRuns(
  engine: Engine,
  jobId: string,
  from: Date,
  through: Date,
): Promise<Map<string, string>> {
  const planned = new Map<string, string>();
  for await (const item of runItemsOf(
    engine,
    jobId,
    { from, through },
    "scheduledFor, plannedFor",
  )) {
    const scheduledFor = item.scheduledFor;
    if (typeof scheduledFor !== "string") continue;
    const plannedFor = typeof item.plannedFor === "string" ? item.plannedFor : scheduledFor;
    planned.set(scheduledFor, plannedFor);
  }
  return planned;
}

/**
 * The earliest occurrence in [from, before) whose run is QUEUED and not started, read newest first
 * and stopping at the first run that has started or ended: occurrences run in order, so what lies
 * behind a started run has run too, and the read costs the queued runs it finds, not the job's
 * history since `from`. Null when the newest run in the range has started (or there is none).
 */
export async function earliestUnstartedRun(
  engine: Engine,
  jobId: string,
  from: Date,
  before: Date,
): Promise<Date | null> {
  const range = { from, through: new Date(before.getTime() - 1), newestFirst: true };
  let earliest: Date | null = null;
  for await (const item of runItemsOf(engine, jobId, range, "scheduledFor, #status", {
    "#status": "status",
  })) {
    if (item.status !== "QUEUED" || typeof item.scheduledFor !== "string") return earliest;
    earliest = new Date(item.scheduledFor);
  }
  return earliest;
}
