import type { TransactWriteCommandInput } from "@aws-sdk/lib-dynamodb";
import { BatchWriteCommand, DeleteCommand, TransactWriteCommand } from "@aws-sdk/lib-dynamodb";
import { sleep } from "../clock.js";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, FenceLostError } from "../errors.js";
import { bucketKey, dueSortKey, shardOf } from "../keys.js";
import type { DueEntry, Run } from "../model.js";
import { METRICS } from "../observability.js";
import {
  cancelledItem,
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
  transactionCancellationCodes,
} from "../storage/dynamo-errors.js";
import { decodeDueEntry, encodeDueEntry, jobKey, shardLeaseKey } from "../storage/items.js";
import { queuedRun, skippedRun } from "../storage/runs.js";
import { planClaim } from "./plan-claim.js";

type TransactItem = NonNullable<TransactWriteCommandInput["TransactItems"]>[number];

/** Leaves room under DynamoDB's 100 items per transaction for the entry, job, next entry and fence. */
export const MAX_RUNS_PER_CLAIM = 50;
/** The skipped records that ride in the claim transaction; the rest are written right after it. */
const MAX_SKIPPED_IN_TRANSACTION = 40;

export type ClaimResult =
  | {
      readonly outcome: "claimed";
      readonly runs: readonly Run[];
      readonly skipped: number;
      /** The job's next due entry; the caller claims it too when it is inside its horizon. */
      readonly next: DueEntry | null;
    }
  /** Another claimer took it, or it was deleted by a pause, cancel or edit. */
  | { readonly outcome: "lost" }
  /** The job no longer points at this entry; the orphan was removed. */
  | { readonly outcome: "stale" };

export interface ClaimOptions {
  readonly now: Date;
  readonly horizonEnd: Date;
  /** A dispatcher claims under its shard lease; the fast path (API, worker) claims without one. */
  readonly lease?: { readonly shard: number; readonly fence: number };
}

/**
 * The due bucket an entry belongs in: its own minute, or the current minute
 * when it is already overdue, because dispatchers do not rescan old buckets.
 */
export function dueEntryKey(
  jobId: string,
  dueAt: Date,
  attempt: number,
  now: Date,
  shardCount: number,
) {
  const bucketTime = dueAt.getTime() < now.getTime() ? now : dueAt;
  return {
    pk: bucketKey(bucketTime, shardOf(jobId, shardCount)),
    sk: dueSortKey(dueAt, jobId, attempt),
  };
}

/**
 * Claims one due entry in a single transaction: delete the entry (it must
 * exist and still carry the job version it was read with, which is what makes
 * the claim exclusive and current), advance the job (it must still point at
 * this entry and be active), put its next entry, and put the QUEUED runs (they
 * must not exist). A cancelled transaction is classified: contention is sent
 * again after a backoff; an entry rewritten since it was read (an edit) is
 * claimed as it is now; occurrences already recorded are left out; a lost race
 * is reported; anything else is thrown for the caller to set the entry aside.
 */
export async function claimDueEntry(
  engine: Engine,
  entry: DueEntry,
  options: ClaimOptions,
): Promise<ClaimResult> {
  let current = entry;
  let known: Known = { run: new Set(), recorded: new Set() };
  for (let round = 1; ; round++) {
    const step = await attemptClaim(engine, current, options, known);
    if ("result" in step) return step.result;
    if (round >= MAX_CLAIM_ROUNDS) {
      throw new ConcurrentUpdateError(
        `the claim of ${entry.key.sk} found it changed ${round} times; the next pass tries again`,
      );
    }
    if ("reread" in step) {
      current = step.reread;
      known = { run: new Set(), recorded: new Set() };
    } else {
      known = step.known;
    }
  }
}

/** Rounds of one claim: a re-read entry or occurrences found already handled start a new one. */
const MAX_CLAIM_ROUNDS = 4;

/** Occurrences found handled already: with a run past QUEUED, or with a recorded outcome. */
interface Known {
  readonly run: ReadonlySet<string>;
  readonly recorded: ReadonlySet<string>;
}

type ClaimStep =
  | { readonly result: ClaimResult }
  /** The entry was rewritten (an edit kept its key): claim it as it is now. */
  | { readonly reread: DueEntry }
  /** Some occurrences are handled already: plan again without them. */
  | { readonly known: Known };

/** The writes a claim of `entry` plans, before they are put in a transaction. */
interface PlannedWrites {
  readonly plan: ReturnType<typeof planClaim>;
  readonly queued: readonly { readonly run: Run; readonly item: Record<string, unknown> }[];
  readonly skippedItems: readonly Record<string, unknown>[];
  readonly next: DueEntry | null;
}

function planWrites(
  engine: Engine,
  entry: DueEntry,
  now: Date,
  horizonEnd: Date,
  known: Known,
): PlannedWrites {
  const { settings } = engine;
  const planned = planClaim({
    entry,
    now,
    horizonEnd,
    misfireGraceMs: settings.misfireGraceMs,
    maxRunsPerClaim: MAX_RUNS_PER_CLAIM,
    alreadyRun: known.run,
  });
  // An occurrence whose outcome is already on record (a run or a skip) needs no SKIPPED record.
  const plan = {
    ...planned,
    skipped: planned.skipped.filter((s) => !known.recorded.has(s.scheduledFor.toISOString())),
  };
  const runSpec = (scheduledFor: Date, dueAt: Date, attempt: number) => ({
    jobId: entry.jobId,
    tenantId: entry.tenantId,
    scheduledFor,
    dueAt,
    attempt,
    priority: entry.priority,
    jobVersion: entry.jobVersion,
  });
  const queued = plan.runs.map((r) =>
    queuedRun(runSpec(r.scheduledFor, r.dueAt, r.attempt), now, settings),
  );
  const skippedItems = plan.skipped.map((s) =>
    skippedRun(runSpec(s.scheduledFor, s.scheduledFor, 1), s.reason, now, settings),
  );

  let next: DueEntry | null = null;
  if (plan.advancesJob && plan.next) {
    const dueAt = plan.next.scheduledFor;
    next = {
      ...entry,
      key: dueEntryKey(entry.jobId, dueAt, 1, now, settings.shardCount),
      kind: "occurrence",
      dueAt: dueAt.toISOString(),
      scheduledFor: dueAt.toISOString(),
      attempt: 1,
      catchUpCount: plan.next.catchUpCount,
    };
  }
  return { plan, queued, skippedItems, next };
}

const putNextEntry = (jobsTable: string, next: DueEntry): TransactItem => ({
  Put: {
    TableName: jobsTable,
    Item: encodeDueEntry(next),
    ConditionExpression: "attribute_not_exists(pk)",
  },
});

/** A run item that must not exist yet. */
const putNew = (runsTable: string, item: Record<string, unknown>): TransactItem => ({
  Put: { TableName: runsTable, Item: item, ConditionExpression: "attribute_not_exists(pk)" },
});

/**
 * A job created due inside the fast-path window is claimed as it is created,
 * so no due entry is written only to be deleted a moment later. Its first runs
 * are written here, with plain writes, before the job: the caller's write of
 * the job (pointing at `next`, which it writes with the job) is the commit.
 * Should that write never happen, the runs belong to no job, and a run of a
 * job that does not exist is cancelled by its worker, never run.
 */
export async function claimBeforeCreate(
  engine: Engine,
  entry: DueEntry,
  now: Date,
  horizonEnd: Date,
): Promise<{ readonly runs: readonly Run[]; readonly next: DueEntry | null }> {
  const planned = planWrites(engine, entry, now, horizonEnd, {
    run: new Set(),
    recorded: new Set(),
  });
  // A new job's runs cannot exist yet, so these need no conditions and can go in batches.
  await batchPut(engine, engine.tables.runs, [
    ...planned.queued.map((q) => q.item),
    ...planned.skippedItems,
  ]);
  await afterClaim(engine, entry, { ...planned, skippedItems: [] });
  return { runs: planned.queued.map((q) => q.run), next: planned.next };
}

async function attemptClaim(
  engine: Engine,
  entry: DueEntry,
  options: ClaimOptions,
  known: Known,
): Promise<ClaimStep> {
  const { now, horizonEnd, lease } = options;
  const { tables } = engine;
  const { plan, queued, skippedItems, next } = planWrites(engine, entry, now, horizonEnd, known);

  const items: TransactItem[] = [];
  if (lease) {
    items.push({
      ConditionCheck: {
        TableName: tables.jobs,
        Key: shardLeaseKey(lease.shard),
        ConditionExpression: "fence = :fence",
        ExpressionAttributeValues: { ":fence": lease.fence },
      },
    });
  }
  const dueIndex = items.length;
  items.push({
    Delete: {
      TableName: tables.jobs,
      Key: entry.key,
      // An edit that keeps the occurrence rewrites the entry under the same key with a new version:
      // the copy read before it must not be claimed (its version, schedule and priority are stale).
      ConditionExpression: "attribute_exists(pk) AND jobVersion = :jobVersion",
      ExpressionAttributeValues: { ":jobVersion": entry.jobVersion },
      ReturnValuesOnConditionCheckFailure: "ALL_OLD",
    },
  });
  const jobIndex = plan.advancesJob ? items.length : -1;
  // Everything this claim covered was skipped (a one-off past its grace under `skip`) and the
  // schedule has nothing after it: the job is complete, not ACTIVE with nothing pending.
  const leavesNothing = queued.length === 0 && next === null && known.run.size === 0;
  if (plan.advancesJob) {
    items.push({
      Update: {
        TableName: tables.jobs,
        Key: jobKey(entry.jobId),
        // The job must still point at this very entry: an edit, pause or cancel moves or removes it.
        ConditionExpression: "#status = :active AND nextDueKey.pk = :pk AND nextDueKey.sk = :sk",
        UpdateExpression: `SET nextRunAt = :nextRunAt, nextDueKey = :nextDueKey${
          leavesNothing ? ", #status = :completed" : ""
        }`,
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: {
          ":active": "ACTIVE",
          ":pk": entry.key.pk,
          ":sk": entry.key.sk,
          ":nextRunAt": next ? next.scheduledFor : null,
          ":nextDueKey": next ? next.key : null,
          ...(leavesNothing ? { ":completed": "COMPLETED" } : {}),
        },
      },
    });
    if (next) items.push(putNextEntry(tables.jobs, next));
  }
  const firstRunIndex = items.length;
  for (const { item } of queued) {
    items.push({
      Put: {
        TableName: tables.runs,
        Item: item,
        // A QUEUED run of an older job version is replaced: the edit that bumped the version wins.
        ConditionExpression:
          "attribute_not_exists(pk) OR (#status = :queued AND jobVersion < :jobVersion)",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: { ":queued": "QUEUED", ":jobVersion": entry.jobVersion },
      },
    });
  }
  const firstSkippedIndex = items.length;
  const inTransaction = skippedItems.slice(0, MAX_SKIPPED_IN_TRANSACTION);
  for (const item of inTransaction) items.push(putNew(tables.runs, item));

  try {
    await retryOnContention(engine, "claim", () =>
      engine.doc.send(new TransactWriteCommand({ TransactItems: items })),
    );
  } catch (error) {
    const codes = transactionCancellationCodes(error);
    if (codes === null) throw error;
    const failed = (index: number) => codes[index] === "ConditionalCheckFailed";
    if (lease && failed(0)) {
      throw new FenceLostError(`shard ${lease.shard}`, lease.fence, { cause: error });
    }
    if (failed(dueIndex)) {
      const rewritten = cancelledItem(error, dueIndex);
      if (rewritten !== null) return { reread: decodeDueEntry(rewritten) };
      engine.obs.metrics.add(METRICS.claimsLost, 1, "Count");
      return { result: { outcome: "lost" } };
    }
    if (jobIndex >= 0 && failed(jobIndex)) {
      const rewritten = await removeOrphan(engine, entry);
      return rewritten ? { reread: rewritten } : { result: { outcome: "stale" } };
    }
    const conflicts = queued.filter((_, i) => failed(firstRunIndex + i));
    const recorded = inTransaction.flatMap((item, i) =>
      failed(firstSkippedIndex + i) ? [String(item.scheduledFor)] : [],
    );
    if (conflicts.length > 0 || recorded.length > 0) {
      // These occurrences are handled already: a run past QUEUED (say, a trigger on the same
      // millisecond) or an outcome on record. Advance over them rather than run or record them twice.
      engine.obs.log.warn("claim found occurrences already handled; claiming without them", {
        jobId: entry.jobId,
        running: conflicts.map((c) => c.run.scheduledFor),
        recorded,
      });
      return {
        known: {
          run: new Set([...known.run, ...conflicts.map((c) => c.run.scheduledFor)]),
          recorded: new Set([...known.recorded, ...recorded]),
        },
      };
    }
    throw error;
  }

  await afterClaim(engine, entry, { plan, queued, skippedItems, next });
  return {
    result: {
      outcome: "claimed",
      runs: queued.map((q) => q.run),
      skipped: skippedItems.length,
      next,
    },
  };
}

/** What follows a committed claim: the skipped records that did not fit in it, a note, the count. */
async function afterClaim(engine: Engine, entry: DueEntry, planned: PlannedWrites): Promise<void> {
  await batchPut(
    engine,
    engine.tables.runs,
    planned.skippedItems.slice(MAX_SKIPPED_IN_TRANSACTION),
  );
  if (planned.plan.note) engine.obs.log.warn(planned.plan.note, { jobId: entry.jobId });
  engine.obs.metrics.add(METRICS.claims, planned.queued.length, "Count");
}

/**
 * Deletes an entry its job no longer points at, only as it was read: one
 * rewritten meanwhile (the job may point at it again) is returned instead.
 */
async function removeOrphan(engine: Engine, entry: DueEntry): Promise<DueEntry | null> {
  engine.obs.metrics.add(METRICS.staleDueEntries, 1, "Count");
  try {
    await retryOnContention(engine, "remove-orphan", () =>
      engine.doc.send(
        new DeleteCommand({
          TableName: engine.tables.jobs,
          Key: entry.key,
          ConditionExpression: "attribute_exists(pk) AND jobVersion = :jobVersion",
          ExpressionAttributeValues: { ":jobVersion": entry.jobVersion },
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
        }),
      ),
    );
    return null;
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const rewritten = failedConditionItem(error);
    return rewritten ? decodeDueEntry(rewritten) : null;
  }
}

const MAX_BATCH_WRITE_ROUNDS = 6;

/** Puts items that need no condition, 25 to a request, retrying what DynamoDB leaves unprocessed. */
async function batchPut(
  engine: Engine,
  table: string,
  items: readonly Record<string, unknown>[],
): Promise<void> {
  for (let i = 0; i < items.length; i += 25) {
    let requests = items.slice(i, i + 25).map((Item) => ({ PutRequest: { Item } }));
    for (let round = 0; requests.length > 0; round++) {
      if (round === MAX_BATCH_WRITE_ROUNDS)
        throw new Error(`${table} kept throttling BatchWriteItem`);
      if (round > 0) await sleep(50 * 2 ** round);
      const result = await engine.doc.send(
        new BatchWriteCommand({ RequestItems: { [table]: requests } }),
      );
      requests = (result.UnprocessedItems?.[table] ?? []).flatMap((r) =>
        r.PutRequest?.Item ? [{ PutRequest: { Item: r.PutRequest.Item } }] : [],
      );
    }
  }
}
