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
 * The floor a run of the one-off `job` at `occurrence` lowers its own to, when the one-off did not
 * put it there: a replay of a dead run from before the job became a one-off (the replay keeps its
 * occurrence, below the floor the job was given then), or a retry or replay queued before an edit
 * made the job a one-off, or made it one again, that a worker is about to run. Undefined when the
 * job is not a one-off, or its floor (its `runAt`, for one written without a floor) already
 * reaches that occurrence.
 */
export function floorLoweredTo(job: Job, occurrence: string): string | undefined {
  if (!("runAt" in job.schedule)) return undefined;
  const floor = Date.parse(job.oneOffFrom ?? job.schedule.runAt);
  const at = Date.parse(occurrence);
  return at < floor ? new Date(at).toISOString() : undefined;
}
/**
 * `jobNotCancelledCheck` that also lowers the one-off's floor (`oneOffFrom`) to `floor`, for a run
 * written below it (a replay of a dead run from before the job became a one-off). A floor already
 * at or below `floor` fails it too: the job as it stands is returned, to write with the check alone.
 */
export const jobNotCancelledLoweringFloor = (jobsTable: string, jobId: string, floor: string) => ({
  Update: {
    TableName: jobsTable,
    Key: jobKey(jobId),
    ConditionExpression: `attribute_exists(pk) AND #status <> :cancelled AND ${NOT_BEING_DELETED} AND (attribute_not_exists(oneOffFrom) OR oneOffFrom > :floor)`,
    UpdateExpression: "SET oneOffFrom = :floor",
    ExpressionAttributeNames: { "#status": "status" },
    ExpressionAttributeValues: { ":cancelled": "CANCELLED", ":floor": floor },
    ReturnValuesOnConditionCheckFailure: "ALL_OLD" as const,
  },
});
/**
 * A job write's condition that the one-off's floor (`oneOffFrom`) is as `job` was read with: a
 * replay lowers it (`jobNotCancelledLoweringFloor`) without a new version, and a pause, cancel or
 * delete planned from the job read before that must read it again, or its read of the one-off's
 * runs (`oneOffRunsFrom`) starts above the replay. Sets its value in `values`.
 */
export function sameFloorCondition(job: Job, values: Record<string, unknown>): string {
  if (job.oneOffFrom === undefined) return "attribute_not_exists(oneOffFrom)";
  values[":seenFloor"] = job.oneOffFrom;
  return "oneOffFrom = :seenFloor";
}
/**
 * An update that lowers the one-off's floor (`oneOffFrom`) to `floor`, for a run of it below the
 * floor that a worker is about to run (a retry or replay queued before an edit made the job a
 * one-off, or made it one again), conditioned on the job being as `job` was read in all that a
 * pause, cancel, delete or edit writes: its status, its version (an edit bumps it), no delete's
 * mark, and its floor (a replay lowers it). A failure means one of those landed since the read: the
 * worker reads the job again and decides again, and a pause, cancel or delete planned from the
 * job before this write fails its own (`sameFloorCondition`) and reads the run.
 */
export function jobAsReadLoweringFloor(jobsTable: string, job: Job, floor: string) {
  const values: Record<string, unknown> = {
    ":seenStatus": job.status,
    ":seenVersion": job.version,
    ":floor": floor,
  };
  const sameFloor = sameFloorCondition(job, values);
  return {
    TableName: jobsTable,
    Key: jobKey(job.jobId),
    ConditionExpression: `#status = :seenStatus AND version = :seenVersion AND ${NOT_BEING_DELETED} AND ${sameFloor}`,
    UpdateExpression: "SET oneOffFrom = :floor",
    ExpressionAttributeNames: { "#status": "status" },
    ExpressionAttributeValues: values,
  };
}
/**
 * A transaction's check that a job still has the status it was read with (a job gone has none)
 * and no delete has marked it, for a run written for the job as it was read (a trigger, a
 * dependent's fan-out) that a pause, cancel or delete between the read and the write must not be
 * outrun by.
 */
export const jobStatusCheck = (jobsTable: string, jobId: string, status: string) => ({
  ConditionCheck: {
    TableName: jobsTable,
    Key: jobKey(jobId),
    ConditionExpression: `#status = :seen AND ${NOT_BEING_DELETED}`,
    ExpressionAttributeNames: { "#status": "status" },
    ExpressionAttributeValues: { ":seen": status },
  },
});
export const tenantPk = (tenantId: string) => `TENANT#${tenantId}`;
export const shardLeaseKey = (shard: number) => ({ pk: `SHARD#${shard}`, sk: LEASE_SK });
export const reaperCursorKey = (shard: number) => ({ pk: `SHARD#${shard}`, sk: REAPER_CURSOR_SK });
/** One item per stage: the most shards its tick has passed over. */
export const shardHighWaterKey = { pk: "SHARDS", sk: SHARD_HIGH_WATER_SK } as const;
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
    // Stored as text so any JSON (floats, big numbers, empty strings) round-trips exactly.
    payloadJson: JSON.stringify(payload ?? null),
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
    payload: typeof payloadJson === "string" ? JSON.parse(payloadJson) : null,
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
