import { createHash } from "node:crypto";
import type { TransactWriteCommandInput } from "@aws-sdk/lib-dynamodb";
import { GetCommand, PutCommand, QueryCommand, TransactWriteCommand } from "@aws-sdk/lib-dynamodb";
import { forEachConcurrently } from "../concurrency.js";
import { claimBeforeCreate, dueEntryKey } from "../dispatch/claim.js";
import {
  dispatchAfterCommit,
  dispatchNow,
  fastPathHorizonEnd,
  sendClaimed,
} from "../dispatch/fast-path.js";
import type { Engine } from "../engine.js";
import {
  ConcurrentUpdateError,
  IdempotencyConflictError,
  IllegalTransitionError,
  JobNotFoundError,
  NotReplayableError,
  VersionMismatchError,
} from "../errors.js";
import { endUnownedRun, rearmParkedRun } from "../execution/run-store.js";
import { newJobId, parseRunId, runSortKey, shardOf } from "../keys.js";
import type { DueEntry, HttpTarget, Job, JobPolicies, Priority, Run } from "../model.js";
import { sendRuns } from "../queue/work-queue.js";
import {
  firstOccurrence,
  LAST_STORABLE_MS,
  normalizeSchedule,
  type ScheduleSpec,
} from "../schedule/index.js";
import { retryOnContention, transactionCancellationCodes } from "../storage/dynamo-errors.js";
import {
  decodeDueEntry,
  decodeRun,
  encodeDueEntry,
  encodeJob,
  idempotencyKey,
  inflightPk,
  jobKey,
  jobPk,
  runMessageOf,
} from "../storage/items.js";
import { getJob, getRun } from "../storage/run-reads.js";
import { queuedRun, runKey } from "../storage/runs.js";
import { getTenantJob, getTenantRun } from "./queries.js";

/** Attempts are stored as four digits. */
const MAX_ATTEMPT = 9999;

type TransactItem = NonNullable<TransactWriteCommandInput["TransactItems"]>[number];

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
>;

export interface CreateOptions {
  /** The caller's idempotency key and a hash of its request, so a repeat returns the same job. */
  readonly idempotency?: { readonly key: string; readonly requestHash: string };
}

export function requestHash(body: unknown): string {
  return createHash("sha256").update(canonicalJson(body)).digest("hex");
}

/** JSON with object keys sorted, so two bodies that differ only in key order hash alike. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) =>
      a < b ? -1 : 1,
    );
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

function dueEntryFor(engine: Engine, job: Job, at: Date, now: Date): DueEntry {
  return {
    key: dueEntryKey(job.jobId, at, 1, now, engine.settings.shardCount),
    kind: "occurrence",
    jobId: job.jobId,
    tenantId: job.tenantId,
    dueAt: at.toISOString(),
    scheduledFor: at.toISOString(),
    attempt: 1,
    jobVersion: job.version,
    priority: job.priority,
    schedule: job.schedule,
    misfire: job.policies.misfire,
  };
}

const putDue = (engine: Engine, entry: DueEntry): TransactItem => ({
  Put: {
    TableName: engine.tables.jobs,
    Item: encodeDueEntry(entry),
    ConditionExpression: "attribute_not_exists(pk)",
  },
});

/**
 * Creates a job: one transaction writes the job, its first due entry and the
 * idempotency record. A first occurrence inside the fast-path window (the
 * dispatcher has swept past it) is claimed first instead: its runs are written
 * QUEUED, then the job pointing at the entry after them, and the runs are
 * enqueued right away. A one-off claimed so has no entry left, and without an
 * idempotency key its job is a single plain write.
 */
export async function createJob(
  engine: Engine,
  input: NewJob,
  options: CreateOptions = {},
): Promise<{ job: Job; created: boolean }> {
  const now = engine.clock();
  const jobId = newJobId(now, engine.random);
  // Stored normalized (an `every` gets its startAt), so occurrences never depend on when they are computed.
  const schedule = normalizeSchedule(input.schedule, now);
  const first = firstOccurrence(schedule, now);
  const base: Job = {
    ...input,
    schedule,
    jobId,
    status: first === null ? "COMPLETED" : "ACTIVE",
    version: 1,
    nextRunAt: null,
    nextDueKey: null,
    createdAt: now.toISOString(),
    updatedAt: now.toISOString(),
    activeRuns: {},
    activeRevision: 0,
    bufferedRunId: null,
    parkedRuns: {},
    lastRun: null,
  };
  const entry = first ? dueEntryFor(engine, base, first, now) : null;
  const idem = options.idempotency;
  const horizonEnd = fastPathHorizonEnd(now, engine.settings.lookaheadMs);
  const claimNow = entry !== null && new Date(entry.dueAt) < horizonEnd;
  if (claimNow && idem) {
    // A repeated request must not write runs for a job it will not create.
    const earlier = await idempotentReplay(engine, input.tenantId, idem);
    if (earlier) return { job: earlier, created: false };
  }
  const claim = claimNow ? await claimBeforeCreate(engine, entry, now, horizonEnd) : null;
  const pending = claim ? claim.next : entry;
  // A one-off past its grace under `skip` was only recorded SKIPPED: nothing is left to run.
  const leavesNothing = claim !== null && claim.runs.length === 0 && claim.next === null;
  const job: Job = pending
    ? { ...base, nextRunAt: pending.scheduledFor, nextDueKey: pending.key }
    : leavesNothing
      ? { ...base, status: "COMPLETED" }
      : base;
  const putJob = {
    TableName: engine.tables.jobs,
    Item: encodeJob(job),
    ConditionExpression: "attribute_not_exists(pk)",
  };
  const companions: TransactItem[] = [];
  if (pending) companions.push(putDue(engine, pending));
  if (idem) {
    companions.push({
      Put: {
        TableName: engine.tables.jobs,
        Item: {
          ...idempotencyKey(input.tenantId, idem.key),
          jobId,
          requestHash: idem.requestHash,
          createdAt: job.createdAt,
        },
        ConditionExpression: "attribute_not_exists(pk)",
      },
    });
  }
  try {
    // Alone (a one-off claimed above) the job is one plain write; a transaction would bill it twice.
    if (companions.length === 0) await engine.doc.send(new PutCommand(putJob));
    else
      await retryOnContention(engine, "create", () =>
        engine.doc.send(
          new TransactWriteCommand({ TransactItems: [{ Put: putJob }, ...companions] }),
        ),
      );
  } catch (error) {
    const codes = transactionCancellationCodes(error);
    if (idem && codes?.at(-1) === "ConditionalCheckFailed") {
      const earlier = await idempotentReplay(engine, input.tenantId, idem);
      if (earlier) return { job: earlier, created: false };
    }
    throw error;
  }
  if (claim === null) return { job, created: true };
  await sendClaimed(engine, claim.runs);
  // A per-second schedule has more runs inside the window than one claim holds.
  const further = claim.next && new Date(claim.next.dueAt) < horizonEnd ? claim.next : null;
  const claimedMore = await dispatchAfterCommit(engine, further, "create");
  return {
    job: claimedMore.length > 0 ? ((await getJob(engine, jobId)) ?? job) : job,
    created: true,
  };
}

/** The job an earlier request with this idempotency key created, or null when there was none. */
async function idempotentReplay(
  engine: Engine,
  tenantId: string,
  idem: { key: string; requestHash: string },
): Promise<Job | null> {
  const found = await engine.doc.send(
    new GetCommand({
      TableName: engine.tables.jobs,
      Key: idempotencyKey(tenantId, idem.key),
      ConsistentRead: true,
    }),
  );
  const record = found.Item;
  if (!record) return null;
  if (record.requestHash !== idem.requestHash) throw new IdempotencyConflictError(idem.key);
  return getTenantJob(engine, tenantId, String(record.jobId));
}

type JobStep<T> = { items: TransactItem[]; result: (job: Job) => T } | { done: T };

/** Reads the job, lets `plan` build a transaction from it, retries when a claim moved the job meanwhile. */
async function withJob<T>(
  engine: Engine,
  tenantId: string,
  jobId: string,
  plan: (job: Job, now: Date) => Promise<JobStep<T>> | JobStep<T>,
): Promise<T> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const job = await getTenantJob(engine, tenantId, jobId);
    const now = engine.clock();
    const step = await plan(job, now);
    if ("done" in step) return step.done;
    try {
      await retryOnContention(engine, "lifecycle", () =>
        engine.doc.send(new TransactWriteCommand({ TransactItems: step.items })),
      );
      return step.result(job);
    } catch (error) {
      if (transactionCancellationCodes(error)?.[0] !== "ConditionalCheckFailed") throw error;
    }
  }
  throw new ConcurrentUpdateError(`job ${jobId} kept changing; try again`);
}

/** The job update shared by lifecycle changes: conditioned on the state the change was planned from. */
function updateJobFrom(
  engine: Engine,
  job: Job,
  set: Record<string, unknown>,
  extra: { bumpVersion?: boolean; sameParkedRuns?: boolean } = {},
): TransactItem {
  const names: Record<string, string> = { "#status": "status" };
  const values: Record<string, unknown> = {
    ":seenStatus": job.status,
    ":seenVersion": job.version,
  };
  const assignments = Object.entries(set).map(([field, value], i) => {
    names[`#f${i}`] = field;
    values[`:v${i}`] = value;
    return `#f${i} = :v${i}`;
  });
  if (extra.bumpVersion) assignments.push("version = version + :one");
  if (extra.bumpVersion) values[":one"] = 1;
  // nextDueKey moves with every claim: the transaction must delete the entry the job points at now.
  const dueCondition = job.nextDueKey
    ? "nextDueKey.pk = :duePk AND nextDueKey.sk = :dueSk"
    : "(attribute_not_exists(nextDueKey) OR nextDueKey = :null)";
  if (job.nextDueKey) {
    values[":duePk"] = job.nextDueKey.pk;
    values[":dueSk"] = job.nextDueKey.sk;
  } else {
    values[":null"] = null;
  }
  // Workers only add to parkedRuns (while PAUSED), so the same size means the same runs.
  let parkedCondition = "";
  if (extra.sameParkedRuns) {
    names["#parked"] = "parkedRuns";
    values[":parkedCount"] = Object.keys(job.parkedRuns).length;
    parkedCondition = ` AND (attribute_not_exists(#parked) OR size(#parked) = :parkedCount)`;
  }
  return {
    Update: {
      TableName: engine.tables.jobs,
      Key: jobKey(job.jobId),
      ConditionExpression: `#status = :seenStatus AND version = :seenVersion AND ${dueCondition}${parkedCondition}`,
      UpdateExpression: `SET ${assignments.join(", ")}`,
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: values,
    },
  };
}

const deleteDue = (engine: Engine, job: Job): TransactItem[] =>
  job.nextDueKey ? [{ Delete: { TableName: engine.tables.jobs, Key: job.nextDueKey } }] : [];

export async function pauseJob(engine: Engine, tenantId: string, jobId: string): Promise<Job> {
  return withJob<Job>(engine, tenantId, jobId, (job, now) => {
    if (job.status === "PAUSED") return { done: job };
    if (job.status !== "ACTIVE") throw new IllegalTransitionError("pause", job.status);
    // nextRunAt stays: resume puts the pending occurrence back, and the misfire policy judges it.
    // Runs already queued are parked by their workers in parkedRuns (empty while ACTIVE).
    const set = {
      status: "PAUSED",
      nextDueKey: null,
      parkedRuns: {},
      updatedAt: now.toISOString(),
    };
    return {
      items: [updateJobFrom(engine, job, set), ...deleteDue(engine, job)],
      result: (j) => ({
        ...j,
        status: "PAUSED",
        nextDueKey: null,
        parkedRuns: {},
        updatedAt: set.updatedAt,
      }),
    };
  });
}

/**
 * Resumes a paused job: its pending occurrence gets its due entry back (the
 * claim applies the misfire policy to what fell due meanwhile), and the runs
 * parked while it was paused are sent again (their workers apply the misfire
 * policy at start). Each parked run gets its reaper deadline back before the
 * job says ACTIVE, so a resume that dies before sending loses none of them.
 */
export async function resumeJob(engine: Engine, tenantId: string, jobId: string): Promise<Job> {
  const resumed = await withJob<{ entry: DueEntry | null; parked: Run[]; job: Job } | null>(
    engine,
    tenantId,
    jobId,
    async (job, now) => {
      if (job.status === "ACTIVE") return { done: null };
      if (job.status !== "PAUSED") throw new IllegalTransitionError("resume", job.status);
      const parked = await rearmParked(engine, job, now);
      const due = job.nextRunAt ? dueEntryFor(engine, job, new Date(job.nextRunAt), now) : null;
      const set = {
        status: "ACTIVE",
        nextDueKey: due?.key ?? null,
        parkedRuns: {},
        updatedAt: now.toISOString(),
      };
      return {
        items: [
          updateJobFrom(engine, job, set, { sameParkedRuns: true }),
          ...(due ? [putDue(engine, due)] : []),
        ],
        result: (j) => ({ entry: due, parked, job: j }),
      };
    },
  );
  if (resumed) {
    const now = engine.clock();
    await sendRuns(
      engine.sqs,
      engine.queues,
      resumed.parked.map((run) => {
        const dueAt = new Date(Math.max(Date.parse(run.dueAt), now.getTime()));
        return {
          message: {
            ...runMessageOf(run),
            dueAt: dueAt.toISOString(),
            priority: resumed.job.priority,
          },
          dueAt,
        };
      }),
      now,
    ).catch((error: unknown) => {
      // Each run has its reaper deadline back: the reaper sends what this could not.
      engine.obs.log.warn("resume could not send every parked run; the reaper will", {
        jobId,
        error: String(error),
      });
    });
    // The claim applies the misfire policy to whatever fell due while the job was paused.
    await dispatchAfterCommit(engine, resumed.entry, "resume");
  }
  return getTenantJob(engine, tenantId, jobId);
}

/** The job's parked runs that are still QUEUED, each given its reaper deadline back. */
async function rearmParked(engine: Engine, job: Job, now: Date): Promise<Run[]> {
  const shardPk = inflightPk(shardOf(job.jobId, engine.settings.shardCount));
  const runs: Run[] = [];
  await forEachConcurrently(Object.keys(job.parkedRuns), 16, async (runId) => {
    const ref = parseRunId(runId);
    const run = ref ? await rearmParkedRun(engine, ref, shardPk, now) : null;
    if (run) runs.push(run);
  });
  return runs;
}

export async function cancelJob(engine: Engine, tenantId: string, jobId: string): Promise<Job> {
  const { job, parked } = await withJob<{ job: Job; parked: string[] }>(
    engine,
    tenantId,
    jobId,
    (current, now) => {
      // A repeat also finishes what a cancel that died after its commit left queued.
      if (current.status === "CANCELLED")
        return { done: { job: current, parked: Object.keys(current.parkedRuns) } };
      if (current.status === "COMPLETED")
        throw new IllegalTransitionError("cancel", current.status);
      const set = {
        status: "CANCELLED",
        nextRunAt: null,
        nextDueKey: null,
        updatedAt: now.toISOString(),
      };
      return {
        items: [
          updateJobFrom(engine, current, set, { sameParkedRuns: true }),
          ...deleteDue(engine, current),
        ],
        result: (j) => ({
          job: {
            ...j,
            status: "CANCELLED",
            nextRunAt: null,
            nextDueKey: null,
            updatedAt: set.updatedAt,
          },
          parked: Object.keys(j.parkedRuns),
        }),
      };
    },
  );
  await cancelQueuedRuns(engine, job, parked);
  return job;
}

/**
 * Marks the job's QUEUED runs CANCELLED now rather than when their messages
 * arrive (up to the lookahead later), so the history says so at once: the
 * runs parked while it was paused (they have no message), and the runs in
 * the job's own partition scheduled from one lookahead back to the end of the
 * fast-path window, which holds every claimed occurrence. Older QUEUED runs
 * (retries of older occurrences, replays, a worker backlog) still have their
 * message, and their worker cancels them.
 */
async function cancelQueuedRuns(
  engine: Engine,
  job: Job,
  parked: readonly string[],
): Promise<void> {
  const now = engine.clock();
  const cancel = async (run: Run) => {
    await endUnownedRun(engine, run, "CANCELLED", "job cancelled", engine.clock(), run);
  };
  await forEachConcurrently(parked, 16, async (runId) => {
    const ref = parseRunId(runId);
    const run = ref ? await getRun(engine, ref) : null;
    if (run?.status === "QUEUED") await cancel(run);
  });
  const from = new Date(now.getTime() - engine.settings.lookaheadMs);
  const to = fastPathHorizonEnd(now, engine.settings.lookaheadMs);
  let startKey: Record<string, unknown> | undefined;
  do {
    const page = await engine.doc.send(
      new QueryCommand({
        TableName: engine.tables.runs,
        KeyConditionExpression: "pk = :pk AND sk BETWEEN :from AND :to",
        FilterExpression: "#status = :queued",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":pk": jobPk(job.jobId),
          ":from": runSortKey(from, 1),
          ":to": runSortKey(to, MAX_ATTEMPT),
          ":queued": "QUEUED",
        },
        ConsistentRead: true,
        ExclusiveStartKey: startKey,
      }),
    );
    await forEachConcurrently((page.Items ?? []).map(decodeRun), 16, cancel);
    startKey = page.LastEvaluatedKey;
  } while (startKey);
}

export interface JobChanges {
  readonly name?: string;
  readonly schedule?: ScheduleSpec;
  readonly payload?: unknown;
  readonly target?: HttpTarget;
  readonly priority?: Priority;
  readonly timeoutSeconds?: number;
  readonly policies?: JobPolicies;
}

/**
 * Edits a job at the version the caller last saw. The version goes up and the
 * due entry is rewritten (it carries a copy of the schedule and version).
 * Runs already queued are not skipped: they run the job's definition as it is
 * when they start. An edit that keeps the schedule keeps the pending
 * occurrence. A new schedule starts now: its occurrences are claimed afresh
 * (a QUEUED run of the same occurrence is replaced, one already running is
 * kept), and queued first attempts of occurrences it does not have are
 * SKIPPED by their workers, unless the edit says `inFlight: "complete"`.
 * Occurrences the old schedule already had due are claimed before the edit.
 */
export async function editJob(
  engine: Engine,
  tenantId: string,
  jobId: string,
  expectedVersion: number,
  changes: JobChanges,
): Promise<Job> {
  const moved = await withJob<DueEntry | null>(engine, tenantId, jobId, async (read, now) => {
    const checked = (job: Job) => {
      if (job.version !== expectedVersion)
        throw new VersionMismatchError(expectedVersion, job.version);
      if (job.status === "CANCELLED" || job.status === "COMPLETED")
        throw new IllegalTransitionError("edit", job.status);
      return job;
    };
    const normalized = changes.schedule
      ? { ...changes, schedule: normalizeSchedule(changes.schedule, now) }
      : changes;
    // Occurrences already due were due under the old schedule: claim them first, as a dispatcher
    // would, so the misfire policy decides them rather than the edit dropping them unrecorded.
    // A claim leaves the version alone, so the caller's version is still the one checked.
    const changesSchedule =
      normalized.schedule !== undefined &&
      JSON.stringify(normalized.schedule) !== JSON.stringify(read.schedule);
    const job =
      changesSchedule && (await claimDueBeforeEdit(engine, checked(read), now))
        ? checked(await getTenantJob(engine, tenantId, jobId))
        : checked(read);
    const edited: Job = {
      ...job,
      ...normalized,
      version: job.version + 1,
      updatedAt: now.toISOString(),
    };
    const next = nextAfterEdit(job, edited, now);
    const entry = next && job.status === "ACTIVE" ? dueEntryFor(engine, edited, next, now) : null;
    const { payload, ...fields } = normalized;
    const set: Record<string, unknown> = {
      ...Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)),
      ...("payload" in changes ? { payloadJson: JSON.stringify(payload ?? null) } : {}),
      nextRunAt: next ? next.toISOString() : null,
      nextDueKey: entry?.key ?? null,
      updatedAt: edited.updatedAt,
    };
    const sameKey =
      entry !== null &&
      job.nextDueKey !== null &&
      entry.key.pk === job.nextDueKey.pk &&
      entry.key.sk === job.nextDueKey.sk;
    const items: TransactItem[] = [updateJobFrom(engine, job, set, { bumpVersion: true })];
    if (!sameKey) items.push(...deleteDue(engine, job));
    if (entry) {
      items.push(
        sameKey
          ? { Put: { TableName: engine.tables.jobs, Item: encodeDueEntry(entry) } }
          : putDue(engine, entry),
      );
    }
    return { items, result: () => entry };
  });
  await dispatchAfterCommit(engine, moved, "edit");
  return getTenantJob(engine, tenantId, jobId);
}

/**
 * Claims the job's pending due entry when it is already due (a dispatcher
 * outage left it unclaimed), with the horizon at `now` so nothing not yet due
 * is claimed under the old schedule. True when it claimed anything.
 */
async function claimDueBeforeEdit(engine: Engine, job: Job, now: Date): Promise<boolean> {
  if (job.status !== "ACTIVE" || job.nextDueKey === null || job.nextRunAt === null) return false;
  if (Date.parse(job.nextRunAt) > now.getTime()) return false;
  const found = await engine.doc.send(
    new GetCommand({ TableName: engine.tables.jobs, Key: job.nextDueKey, ConsistentRead: true }),
  );
  // Gone: a dispatcher claimed it meanwhile, and the job no longer points at it.
  if (!found.Item) return true;
  await dispatchNow(engine, decodeDueEntry(found.Item), now, new Date(now.getTime() + 1));
  return true;
}

function nextAfterEdit(job: Job, edited: Job, now: Date): Date | null {
  if (
    edited.schedule === job.schedule ||
    JSON.stringify(edited.schedule) === JSON.stringify(job.schedule)
  ) {
    return job.nextRunAt ? new Date(job.nextRunAt) : null;
  }
  // A one-off that has not completed runs at its new time, even a past one (the misfire policy judges it).
  if ("runAt" in edited.schedule) return new Date(edited.schedule.runAt);
  return firstOccurrence(edited.schedule, now);
}

// A run's occurrence is its identity, so two triggers in one millisecond need two instants.
const TRIGGER_INSTANTS_TRIED = 20;

/**
 * One extra run now, outside the schedule; its occurrence is the current instant, or the first
 * millisecond after it that the job has no run for (another trigger in the same millisecond, or
 * an occurrence of the schedule already claimed for that instant).
 */
export async function triggerJob(engine: Engine, tenantId: string, jobId: string): Promise<Run> {
  const job = await getTenantJob(engine, tenantId, jobId);
  if (job.status === "PAUSED" || job.status === "CANCELLED")
    throw new IllegalTransitionError("trigger", job.status);
  const now = engine.clock();
  for (let shift = 0; shift < TRIGGER_INSTANTS_TRIED; shift++) {
    if (now.getTime() + shift > LAST_STORABLE_MS) break;
    try {
      return await runNow(
        engine,
        "trigger",
        {
          jobId,
          tenantId,
          scheduledFor: new Date(now.getTime() + shift),
          attempt: 1,
          priority: job.priority,
          jobVersion: job.version,
          triggered: true,
        },
        () => [],
      );
    } catch (error) {
      if (transactionCancellationCodes(error)?.[0] !== "ConditionalCheckFailed") throw error;
    }
  }
  throw new ConcurrentUpdateError(`job ${jobId} was triggered too often at once; try again`);
}

/**
 * Puts a QUEUED run due now, in one transaction with `alongside` (built from the run), then sends
 * its message. A failed send is left to the reaper: the run is already stored.
 */
async function runNow(
  engine: Engine,
  operation: "trigger" | "replay",
  spec: Omit<Parameters<typeof queuedRun>[0], "dueAt">,
  alongside: (run: Run) => TransactItem[],
): Promise<Run> {
  const now = engine.clock();
  const { run, item } = queuedRun({ ...spec, dueAt: now }, now, engine.settings);
  await retryOnContention(engine, operation, () =>
    engine.doc.send(
      new TransactWriteCommand({
        TransactItems: [
          {
            Put: {
              TableName: engine.tables.runs,
              Item: item,
              ConditionExpression: "attribute_not_exists(pk)",
            },
          },
          ...alongside(run),
        ],
      }),
    ),
  );
  await sendRuns(engine.sqs, engine.queues, [{ message: runMessageOf(run), dueAt: now }], now);
  return run;
}

/**
 * Replays a dead run as a new attempt of the same occurrence, at the job's
 * current version. The dead run leaves the dead-letter list in the same
 * transaction, so a second replay of it is refused.
 */
export async function replayDeadLetter(
  engine: Engine,
  tenantId: string,
  runId: string,
): Promise<Run> {
  const dead = await getTenantRun(engine, tenantId, runId);
  if (dead.status !== "DEAD")
    throw new NotReplayableError(runId, `it is ${dead.status.toLowerCase()}, not dead`);
  if (dead.replayedBy)
    throw new NotReplayableError(runId, `it was already replayed as ${dead.replayedBy}`);
  const job = await getJob(engine, dead.jobId);
  if (job === null) throw new JobNotFoundError(dead.jobId);
  if (job.status === "CANCELLED") throw new IllegalTransitionError("replay a run of", job.status);
  try {
    return await runNow(
      engine,
      "replay",
      {
        jobId: dead.jobId,
        tenantId,
        scheduledFor: new Date(dead.scheduledFor),
        attempt: dead.attempt + 1,
        priority: job.priority,
        jobVersion: job.version,
      },
      (run) => [
        {
          Update: {
            TableName: engine.tables.runs,
            Key: runKey(dead.jobId, dead.scheduledFor, dead.attempt),
            ConditionExpression:
              "#status = :dead AND (attribute_not_exists(replayedBy) OR replayedBy = :null)",
            UpdateExpression: "SET replayedBy = :newRun REMOVE deadPk, deadSk",
            ExpressionAttributeNames: { "#status": "status" },
            ExpressionAttributeValues: { ":dead": "DEAD", ":null": null, ":newRun": run.runId },
          },
        },
      ],
    );
  } catch (error) {
    if (transactionCancellationCodes(error))
      throw new NotReplayableError(runId, "it was replayed concurrently");
    throw error;
  }
}
