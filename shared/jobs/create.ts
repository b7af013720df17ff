import { createHash } from "node:crypto";
import { type ClaimBeforeCreate, claimBeforeCreate } from "../dispatch/claim.js";
import { dispatchAfterCommit, sendClaimed } from "../dispatch/fast-path.js";
import { fastPathHorizonEnd } from "../dispatch/fast-path-window.js";
import type { Engine } from "../engine.js";
import {
  IdempotencyConflictError,
  IdempotencyKeyTakenError,
  JobNotFoundError,
  SchedulerError,
} from "../errors.js";
import { isExactNumber } from "../exact-json.js";
import { newJobId } from "../keys.js";
import type { DueEntry, Job } from "../model.js";
import { QuotaExceededError } from "../quotas/limits.js";
import { giveBackJobQuotas, refusedUnwritten, reserveJobQuotas } from "../quotas/usage.js";
import { firstOccurrence, isAfterSchedule, normalizeSchedule } from "../schedule/index.js";
import { recordShardCount } from "../shard-count.js";
import {
  type IdempotencyRecord,
  type IdempotentRequest,
  readIdempotencyRecord,
  UpstreamChangedError,
  writeNewJob,
} from "../storage/job-create.js";
import { getJob } from "../storage/run-reads.js";
import type { UsageReservation } from "../storage/tenant-quotas.js";
import { linkNewDependent } from "./dependencies.js";
import { dueEntryFor, withinJobEnd } from "./due-entry.js";
import { withOneOffFloor } from "./one-off-floor.js";
import { getTenantJob } from "./queries.js";

/** A job as the API hands it over: validated, defaults applied. */
export type NewJob = Pick<
  Job,
  | "tenantId"
  | "name"
  | "type"
  | "schedule"
  | "payload"
  | "target"
  | "priority"
  | "timeoutSeconds"
  | "policies"
  | "endAt"
  | "maxRuns"
  | "window"
>;

interface CreateOptions {
  /** The caller's idempotency key and a hash of its request, so a repeat returns the same job. */
  readonly idempotency?: IdempotentRequest;
}

/**
 * The hash of a create's body as it was sent. Idempotency records hold this as `requestHash`,
 * which the version before normalizing (`idempotentCreate`) compares a repeat with.
 */
export function requestHash(body: unknown): string {
  return createHash("sha256").update(canonicalJson(body)).digest("hex");
}

/**
 * The idempotency of a create under `key`: the hash of the job it asks for (`job`, the request
 * with its defaults applied and its schedule normalized; the tenant left out, as keys are the
 * tenant's own), so a field given at its default is the same request as the field left out. A
 * deployment whose defaults differ (a lower `maxTimeoutSeconds`) asks for another job, and hashes
 * so. `earlierHash` is the hash of the body as sent: the record stores it as `requestHash`, which
 * the version before normalizing reads (a rollback, or its functions during a deploy), beside
 * `normalizedHash`, and records that version stored hold it (see `replayOf`).
 */
export function idempotentCreate(key: string, job: NewJob, body: unknown): IdempotentRequest {
  const { tenantId: _tenant, ...asked } = job;
  return {
    key,
    requestHash: createHash("sha256")
      .update(`normalized create\n${canonicalJson(asked)}`)
      .digest("hex"),
    earlierHash: requestHash(body),
  };
}

/**
 * JSON with object keys sorted, so two bodies that differ only in key order hash alike; a key
 * whose value is undefined is left out, as JSON would (a parsed body has none). A payload's
 * number a double would change is its digits as sent (others, as JSON.parse reads them, hash
 * as they always have), so a request that differs from another only there is another.
 */
function canonicalJson(value: unknown): string {
  if (isExactNumber(value)) return value.toString();
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/**
 * Creates a job: one transaction writes the job, its first due entry and the
 * idempotency record. A first occurrence inside the fast-path window (the
 * dispatcher has swept past it) is claimed first instead: its runs are written
 * QUEUED, then the job pointing at the entry after them, and the runs are
 * enqueued right away. A one-off claimed so has no entry left, and without an
 * idempotency key its job is a single plain write. The request is checked
 * (its upstreams) before the tenant's quotas are, and its share of them is
 * reserved before anything is written; a write refused after that gives the
 * share back. An `after` job whose chain changed between its check and its
 * write (`UpstreamChangedError`) is planned again from fresh reads.
 */
export async function createJob(
  engine: Engine,
  input: NewJob,
  options: CreateOptions = {},
): Promise<{ job: Job; created: boolean }> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await createJobOnce(engine, input, options);
    } catch (error) {
      // Nothing of it was written, and its reservation was given back.
      if (!(error instanceof UpstreamChangedError) || attempt >= CREATE_ATTEMPTS) throw error;
    }
  }
}

/** Plans of an `after` job's create, the first included, while jobs of its chain keep changing. */
const CREATE_ATTEMPTS = 5;

async function createJobOnce(
  engine: Engine,
  input: NewJob,
  options: CreateOptions,
): Promise<{ job: Job; created: boolean }> {
  const now = engine.clock();
  const { base, entry } = prepareNewJob(engine, input, now);
  const { jobId, schedule } = base;
  // Bad input is refused before anything is reserved: a 400 leaves the tenant's usage as it was.
  const links = await linkNewDependent(engine, input.tenantId, jobId, schedule);
  const idem = options.idempotency;
  const horizonEnd = fastPathHorizonEnd(now, engine.settings.lookaheadMs);
  const claimNow = entry !== null && new Date(entry.dueAt) < horizonEnd;
  if (claimNow && idem) {
    // A repeated request must not write runs for a job it will not create.
    const earlier = await idempotentReplay(engine, input.tenantId, idem);
    if (earlier) return { job: earlier, created: false };
  }
  // Before anything is filed in a shard: the tick passes over every shard the stage filed in.
  await recordShardCount(engine);
  let reservation: UsageReservation | null;
  try {
    reservation = await reserveJobQuotas(
      engine,
      input.tenantId,
      { priority: input.priority, jobs: 1, schedule, above: links.above },
      now,
    );
  } catch (error) {
    // A repeat of a request that created its job gets that job, whatever the quotas say now.
    if (idem && error instanceof QuotaExceededError) {
      const earlier = await idempotentReplay(engine, input.tenantId, idem);
      if (earlier) return { job: earlier, created: false };
    }
    throw error;
  }
  const claim = claimNow
    ? await claimBeforeCreate(engine, entry, now, horizonEnd).catch(async (error: unknown) => {
        // The job is not written: its claimed runs, if any, are cancelled by their workers.
        await giveBackJobQuotas(engine, reservation);
        throw error;
      })
    : null;
  const { job, pending } = jobAfterClaim(base, entry, claim);
  try {
    const unswept = pending !== null && new Date(pending.dueAt) >= horizonEnd;
    await writeNewJob(engine, job, pending, idem, links.writes, unswept);
  } catch (error) {
    if (!(await writtenAfterAll(engine, job, error))) {
      if (refusedUnwritten(error)) await giveBackJobQuotas(engine, reservation);
      if (idem && error instanceof IdempotencyKeyTakenError) {
        const earlier = await idempotentReplay(engine, input.tenantId, idem);
        if (earlier) return { job: earlier, created: false };
      }
      throw error;
    }
  }
  if (claim === null) return { job, created: true };
  await sendClaimed(engine, claim.runs);
  // A per-second schedule has more runs inside the window than one claim holds.
  const further = claim.next && new Date(claim.next.dueAt) < horizonEnd ? claim.next : null;
  const claimedMore = await dispatchAfterCommit(engine, further, "create");
  return { job: await answeredJob(engine, job, claimedMore), created: true };
}

/**
 * Whether a create's write that failed with `error` wrote its job all the same. An error that is
 * no refusal (a 500 or a timeout the SDK's retries did not get past, a transaction still in
 * progress when they ran out) leaves the outcome unclear, and a consistent read of the job tells:
 * its id is new, so a job found is this write's, committed whole (the job is the create's commit
 * and written last or in one transaction). Nothing found, or the read failing, leaves it unclear
 * (a transaction still being applied may yet land): the caller answers the error, and a retry
 * under the same Idempotency-Key finds the job if it was written.
 */
export async function writtenAfterAll(engine: Engine, job: Job, error: unknown): Promise<boolean> {
  if (error instanceof SchedulerError || refusedUnwritten(error)) return false;
  return (await getJob(engine, job.jobId).catch(() => null)) !== null;
}

/**
 * The committed job as its answer shows it: read again when the fast path claimed more of it
 * after the write. That read failing leaves the answer the job as written: the create stands, so
 * its answer is never a failure (a retry would create the job again).
 */
export async function answeredJob(
  engine: Engine,
  job: Job,
  claimedMore: readonly unknown[],
): Promise<Job> {
  if (claimedMore.length === 0) return job;
  try {
    return (await getJob(engine, job.jobId)) ?? job;
  } catch (error) {
    engine.obs.log.warn("could not read a created job again; answering it as written", {
      jobId: job.jobId,
      error: String(error),
    });
    return job;
  }
}

/** A new job as it is before its first claim, and its first due entry (null when it has none). */
export function prepareNewJob(
  engine: Engine,
  input: NewJob,
  now: Date,
): { base: Job; entry: DueEntry | null } {
  const jobId = newJobId(now, engine.random);
  // Stored normalized (an `every` gets its startAt), so occurrences never depend on when they are computed.
  const schedule = normalizeSchedule(input.schedule, now);
  const base0: Job = {
    ...input,
    schedule,
    jobId,
    status: "ACTIVE",
    version: 1,
    nextRunAt: null,
    nextDueKey: null,
    createdAt: now.toISOString(),
    updatedAt: now.toISOString(),
    ...withOneOffFloor(engine, null, schedule, now),
    activeRuns: {},
    activeRevision: 0,
    bufferedRunId: null,
    parkedRuns: {},
    lastRun: null,
    occurrencesQueued: 0,
    dependents: [],
  };
  const first = withinJobEnd(base0, firstOccurrence(schedule, now));
  // An `after` job has no times of its own: it waits for its upstreams' runs.
  const base: Job =
    first === null && !isAfterSchedule(schedule) ? { ...base0, status: "COMPLETED" } : base0;
  return { base, entry: first ? dueEntryFor(engine, base, first, now) : null };
}

/** The new job as it is written: pointing at its pending entry, counting what the claim queued. */
export function jobAfterClaim(
  base: Job,
  entry: DueEntry | null,
  claim: Pick<ClaimBeforeCreate, "runs" | "next" | "occurrencesQueued" | "ended"> | null,
): { job: Job; pending: DueEntry | null } {
  const pending = claim ? claim.next : entry;
  // A one-off past its grace under `skip` was only recorded SKIPPED: nothing is left to run.
  const leavesNothing = claim !== null && claim.runs.length === 0 && claim.next === null;
  const counted: Job = claim
    ? {
        ...base,
        occurrencesQueued: claim.occurrencesQueued,
        ...(claim.next?.catchUpCount
          ? { catchUpCount: claim.next.catchUpCount, catchUpOf: claim.next.scheduledFor }
          : {}),
      }
    : base;
  const job: Job = pending
    ? { ...counted, nextRunAt: pending.scheduledFor, nextDueKey: pending.key }
    : leavesNothing || claim?.ended
      ? { ...counted, status: "COMPLETED" }
      : counted;
  return { job, pending };
}

/**
 * A create under this idempotency key judged as of the create that made its job (`createdAt`):
 * `ask` gives the request as it was then (null when it was refused then too). Checks that hold
 * only for a while (an `endAt` in the future and not before the schedule's next occurrence) held
 * then, and the repeat answers that job as any repeat does, or 409 for another body. Null when
 * the key made no job still there (nothing is written either way).
 */
export async function repeatAsOfCreate(
  engine: Engine,
  tenantId: string,
  key: string,
  ask: (asOf: Date) => IdempotentRequest | null,
): Promise<Job | null> {
  const record = await readIdempotencyRecord(engine, tenantId, key);
  if (record === null) return null;
  const made = await getTenantJob(engine, tenantId, record.jobId).catch((error: unknown) => {
    if (error instanceof JobNotFoundError) return null;
    throw error;
  });
  const idem = made === null ? null : ask(new Date(made.createdAt));
  return idem === null ? null : replayOf(engine, tenantId, idem, record);
}

/** The job an earlier request with this idempotency key created, or null when there was none. */
export async function idempotentReplay(
  engine: Engine,
  tenantId: string,
  idem: IdempotentRequest,
): Promise<Job | null> {
  const record = await readIdempotencyRecord(engine, tenantId, idem.key);
  return record ? replayOf(engine, tenantId, idem, record) : null;
}

/**
 * The job `record` names, when the request is the same as the one that made it (its normalized
 * hash, or the hash of its body as sent, which every record holds in `requestHash` but those
 * written between normalizing and `normalizedHash`); else 409.
 */
export async function replayOf(
  engine: Engine,
  tenantId: string,
  idem: IdempotentRequest,
  record: IdempotencyRecord,
): Promise<Job> {
  const same =
    record.normalizedHash === idem.requestHash ||
    record.requestHash === idem.requestHash ||
    (idem.earlierHash !== undefined && record.requestHash === idem.earlierHash);
  if (!same) throw new IdempotencyConflictError(idem.key);
  try {
    return await getTenantJob(engine, tenantId, record.jobId);
  } catch (error) {
    if (!(error instanceof JobNotFoundError)) throw error;
    // The record outlives a deleted job: the key's one result is gone, and is not made again.
    throw new IdempotencyConflictError(idem.key, `created job ${record.jobId}, which was deleted`);
  }
}
