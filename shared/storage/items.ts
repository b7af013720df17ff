import { parseExact, stringifyExact } from "../exact-json.js";
import type { DueEntry, HttpTarget, Job, Run } from "../model.js";
import type { RunMessage } from "../queue/run-message.js";

/**
 * Item layouts of both tables and the codecs between items and the domain
 * types. Keys are built only here.
 */
type Item = Record<string, unknown>;

const JOB_SK = "JOB";
const LEASE_SK = "LEASE";
const REAPER_CURSOR_SK = "REAPER";
const IDEMPOTENCY_SK = "IDEMP";
const SHARD_HIGH_WATER_SK = "HIGH_WATER";
const REAPER_START_SK = "REAPER_START";

export const jobPk = (jobId: string) => `JOB#${jobId}`;
export const jobKey = (jobId: string) => ({ pk: jobPk(jobId), sk: JOB_SK });

/**
 * No delete has marked the job. A delete leaves a COMPLETED job's status as it is, so it marks one
 * (`deleteRequestedAt`) before it cancels the job's runs; any other job it makes CANCELLED first.
 */
const NOT_BEING_DELETED = "attribute_not_exists(deleteRequestedAt)";

/** Whether a delete has marked this COMPLETED job (`Job.deleteRequestedAt`): it is taken as gone. */
export const isBeingDeleted = (job: { readonly deleteRequestedAt?: unknown }) =>
  job.deleteRequestedAt !== undefined;

/**
 * A transaction's check that a job still exists, is not CANCELLED and no delete has marked it, for
 * writes made for the job as it was read (a fan-out of its run, a replay of its dead letter) that
 * its cancel or delete must not be outrun by. A failure returns the job as it stands (none: deleted).
 */
export const jobNotCancelledCheck = (jobsTable: string, jobId: string) => ({
  ConditionCheck: {
    TableName: jobsTable,
    Key: jobKey(jobId),
    ConditionExpression: `attribute_exists(pk) AND #status <> :cancelled AND ${NOT_BEING_DELETED}`,
    ExpressionAttributeNames: { "#status": "status" },
    ExpressionAttributeValues: { ":cancelled": "CANCELLED" },
    ReturnValuesOnConditionCheckFailure: "ALL_OLD" as const,
  },
});
/**
 * The most occurrences below a one-off's floor its job keeps (`oneOffBelow`), each read on its own
 * by a pause, cancel or delete: a run below the floor past them lowers the floor to its occurrence
 * instead, and those reads read every occurrence from there on.
 */
export const ONE_OFF_BELOW_MOST = 10;

/**
 * How a run of a one-off below its floor brings its job's reads to it: its occurrence added to
 * those the job keeps below the floor (`below`: the list as it then stands), or, with those full,
 * the floor lowered to it.
 */
export type FloorLowering = { readonly below: readonly string[] } | { readonly floor: string };

/**
 * What a run of the one-off `job` at `occurrence` writes to be read by a pause, cancel or delete,
 * when the one-off did not put it in reach: a replay of a dead run from before the job became a
 * one-off (the replay keeps its occurrence, below the floor the job was given then), or a retry or
 * replay queued before an edit made the job a one-off, or made it one again, that a worker is
 * about to run. Undefined when the job is not a one-off, its floor (its `runAt`, for one written
 * without a floor) already reaches that occurrence, or the job keeps that occurrence already.
 */
export function floorLoweringFor(job: Job, occurrence: string): FloorLowering | undefined {
  if (!("runAt" in job.schedule)) return undefined;
  const floor = Date.parse(job.oneOffFrom ?? job.schedule.runAt);
  const at = new Date(occurrence);
  const below = job.oneOffBelow ?? [];
  if (at.getTime() >= floor || below.includes(at.toISOString())) return undefined;
  if (below.length < ONE_OFF_BELOW_MOST) return { below: [...below, at.toISOString()] };
  return { floor: at.toISOString() };
}

/** The job's fields once `lowering` is written. */
export const loweredJob = (job: Job, lowering: FloorLowering): Job =>
  "below" in lowering
    ? { ...job, oneOffBelow: lowering.below }
    : { ...job, oneOffFrom: lowering.floor };

/** The update of `lowering`, its value set in `values`. */
function loweringUpdate(lowering: FloorLowering, values: Record<string, unknown>): string {
  if ("below" in lowering) {
    values[":below"] = lowering.below;
    return "SET oneOffBelow = :below";
  }
  values[":floor"] = lowering.floor;
  return "SET oneOffFrom = :floor";
}

/**
 * `jobNotCancelledCheck` that also writes `lowering` (`floorLoweringFor` of `job`, as read), for a
 * run written below the one-off's floor (a replay of a dead run from before the job became a
 * one-off), conditioned on the floor and the occurrences below it as read: a failure returns the
 * job as it stands, to decide the write again from.
 */
export function jobNotCancelledLoweringFloor(jobsTable: string, job: Job, lowering: FloorLowering) {
  const values: Record<string, unknown> = { ":cancelled": "CANCELLED" };
  const sameFloor = sameFloorCondition(job, values);
  return {
    Update: {
      TableName: jobsTable,
      Key: jobKey(job.jobId),
      ConditionExpression: `attribute_exists(pk) AND #status <> :cancelled AND ${NOT_BEING_DELETED} AND ${sameFloor}`,
      UpdateExpression: loweringUpdate(lowering, values),
      ExpressionAttributeNames: { "#status": "status" },
      ExpressionAttributeValues: values,
      ReturnValuesOnConditionCheckFailure: "ALL_OLD" as const,
    },
  };
}
/**
 * A job write's condition that the one-off's floor (`oneOffFrom`) and the occurrences it keeps
 * below it (`oneOffBelow`) are as `job` was read with: a replay or a worker's run below the floor
 * changes them (`jobNotCancelledLoweringFloor`, `jobAsReadLoweringFloor`) without a new version,
 * and a pause, cancel or delete planned from the job read before that must read it again, or its
 * read of the one-off's runs (`liveRunRanges`) misses that run. Sets its values in `values`.
 */
export function sameFloorCondition(job: Job, values: Record<string, unknown>): string {
  let below = "attribute_not_exists(oneOffBelow)";
  if (job.oneOffBelow !== undefined) {
    values[":seenBelow"] = job.oneOffBelow;
    below = "oneOffBelow = :seenBelow";
  }
  if (job.oneOffFrom === undefined) return `attribute_not_exists(oneOffFrom) AND ${below}`;
  values[":seenFloor"] = job.oneOffFrom;
  return `oneOffFrom = :seenFloor AND ${below}`;
}
/**
 * An update that writes `lowering` (`floorLoweringFor`), for a run of a one-off below its floor
 * that a worker is about to run (a retry or replay queued before an edit made the job a one-off,
 * or made it one again), conditioned on the job being as `job` was read in all that a pause,
 * cancel, delete or edit writes: its status, its version (an edit bumps it), no delete's mark, and
 * its floor and the occurrences below it (a replay changes them). A failure means one of those
 * landed since the read: the worker reads the job again and decides again, and a pause, cancel or
 * delete planned from the job before this write fails its own (`sameFloorCondition`) and reads
 * the run.
 */
export function jobAsReadLoweringFloor(jobsTable: string, job: Job, lowering: FloorLowering) {
  const values: Record<string, unknown> = {
    ":seenStatus": job.status,
    ":seenVersion": job.version,
  };
  const sameFloor = sameFloorCondition(job, values);
  return {
    TableName: jobsTable,
    Key: jobKey(job.jobId),
    ConditionExpression: `#status = :seenStatus AND version = :seenVersion AND ${NOT_BEING_DELETED} AND ${sameFloor}`,
    UpdateExpression: loweringUpdate(lowering, values),
    ExpressionAttributeNames: { "#status": "status" },
    ExpressionAttributeValues: values,
  };
}
/**
 * A transaction's check that a job still has the status it was read with (a job gone has none)
 * and no delete has marked it, for a run written for the job as it was read (a trigger, a
 * dependent's fan-out) that a pause, cancel or delete between the read and the write must not be
 * outrun by. With `version`, that version too: a trigger chose its instant off the schedule read,
 * and an edit committed since may have made that instant its one-off's (`runAtStillFree`).
 */
export const jobStatusCheck = (
  jobsTable: string,
  jobId: string,
  status: string,
  version?: number,
) => ({
  ConditionCheck: {
    TableName: jobsTable,
    Key: jobKey(jobId),
    ConditionExpression: `#status = :seen AND ${NOT_BEING_DELETED}${version === undefined ? "" : " AND version = :seenVersion"}`,
    ExpressionAttributeNames: { "#status": "status" },
    ExpressionAttributeValues: {
      ":seen": status,
      ...(version === undefined ? {} : { ":seenVersion": version }),
    },
  },
});
export const tenantPk = (tenantId: string) => `TENANT#${tenantId}`;
export const shardLeaseKey = (shard: number) => ({ pk: `SHARD#${shard}`, sk: LEASE_SK });
export const reaperCursorKey = (shard: number) => ({ pk: `SHARD#${shard}`, sk: REAPER_CURSOR_SK });
/** One item per stage: the most shards its tick has passed over. */
export const shardHighWaterKey = { pk: "SHARDS", sk: SHARD_HIGH_WATER_SK } as const;
/** One item per stage: the shard the next tick's reaper starts at, after a tick out of time. */
export const reaperStartKey = { pk: "SHARDS", sk: REAPER_START_SK } as const;
export const idempotencyKey = (tenantId: string, key: string) => ({
  pk: `IDEMP#${tenantId}#${key}`,
  sk: IDEMPOTENCY_SK,
});
/** A trigger's idempotency record: the same key names one run per job. */
export const triggerIdempotencyKey = (tenantId: string, jobId: string, key: string) => ({
  pk: `IDEMP#${tenantId}#${key}`,
  sk: `TRIGGER#${jobId}`,
});
export const inflightPk = (shard: number) => `INFLIGHT#${shard}`;
/** Due entries of a shard that no claim could process, kept for operators. */
export const setAsidePk = (shard: number) => `ASIDE#${shard}`;
export const deadLetterPk = (tenantId: string) => `DEAD#${tenantId}`;

/**
 * A job's target as its item holds it: the headers as a Map, written as the same map attribute.
 * The Document client writes a plain object as a map only while its `constructor` is Object's, so
 * a header named `constructor` (a tenant's to choose) made it refuse the whole item.
 */
export function encodeTarget(target: HttpTarget): Item {
  const { headers, ...rest } = target;
  return { ...rest, ...(headers ? { headers: new Map(Object.entries(headers)) } : {}) };
}

export function encodeJob(job: Job): Item {
  const { payload, dependents, target, ...rest } = job;
  return {
    ...jobKey(job.jobId),
    tenantPk: tenantPk(job.tenantId),
    tenantSk: job.jobId,
    ...rest,
    ...(target ? { target: encodeTarget(target) } : {}),
    // A string set (ADD and DELETE keep it without a read); DynamoDB stores no empty set.
    ...(dependents.length > 0 ? { dependents: new Set(dependents) } : {}),
    // Stored as text so any JSON (floats, big numbers, empty strings) round-trips exactly: its
    // numbers as the caller wrote them (a 64-bit id past 2^53 too), which a double would change.
    payloadJson: stringifyExact(payload ?? null),
  };
}

export function decodeJob(item: Item): Job {
  const {
    pk,
    sk,
    tenantPk: _t,
    tenantSk: _s,
    payloadJson,
    expiresAt: _e,
    // What the last plain claim committed (storage/claim-plain.ts): for claimers, not the job's.
    claimedEntry: _c,
    dependents,
    ...rest
  } = item;
  const job = rest as unknown as Omit<Job, "payload" | "dependents">;
  return {
    ...job,
    dependents: dependents instanceof Set ? [...dependents].map(String).sort() : [],
    activeRuns: job.activeRuns ?? {},
    activeRevision: job.activeRevision ?? 0,
    bufferedRunId: job.bufferedRunId ?? null,
    parkedRuns: job.parkedRuns ?? {},
    lastRun: job.lastRun ?? null,
    nextDueKey: job.nextDueKey ?? null,
    nextRunAt: job.nextRunAt ?? null,
    payload: typeof payloadJson === "string" ? parseExact(payloadJson) : null,
  };
}

export function encodeDueEntry(entry: DueEntry): Item {
  const { key, ...rest } = entry;
  return { ...key, ...rest };
}

export function decodeDueEntry(item: Item): DueEntry {
  const { pk, sk, ...rest } = item;
  return { key: { pk: String(pk), sk: String(sk) }, ...(rest as unknown as Omit<DueEntry, "key">) };
}

export interface RunItemExtras {
  /** Sparse reaper index: present only while QUEUED or RUNNING. */
  readonly inflight?: { readonly shard: number; readonly deadline: string };
  readonly expiresAt: number;
}

export function encodeRun(run: Run, runSortKey: string, extras: RunItemExtras): Item {
  return {
    pk: jobPk(run.jobId),
    sk: runSortKey,
    ...run,
    ...(extras.inflight
      ? { inflightPk: inflightPk(extras.inflight.shard), inflightSk: extras.inflight.deadline }
      : {}),
    expiresAt: extras.expiresAt,
  };
}

export function decodeRun(item: Item): Run {
  const {
    pk,
    sk,
    inflightPk: _ip,
    inflightSk: _is,
    deadPk: _dp,
    deadSk: _ds,
    expiresAt: _e,
    claimToken: _c,
    ...rest
  } = item;
  const run = rest as unknown as Run;
  return {
    ...run,
    replayedBy: run.replayedBy ?? null,
    executedVersion: run.executedVersion ?? null,
    misfireFrom: run.misfireFrom ?? null,
    cancelRequestedAt: run.cancelRequestedAt ?? null,
    cancelledBy: run.cancelledBy ?? null,
  };
}

export function runMessageOf(run: Run): RunMessage {
  return {
    jobId: run.jobId,
    scheduledFor: run.scheduledFor,
    dueAt: run.dueAt,
    attempt: run.attempt,
    jobVersion: run.jobVersion,
    priority: run.priority,
    ...(run.fence > 0 ? { fence: run.fence } : {}),
    tenantId: run.tenantId,
  };
}
