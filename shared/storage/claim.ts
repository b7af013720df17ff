import { BatchWriteCommand } from "@aws-sdk/lib-dynamodb";
import { sleep } from "../clock.js";
import type { Engine } from "../engine.js";
import type { DueEntry, Run } from "../model.js";
import { decodeDueEntry, encodeDueEntry, jobKey } from "./items.js";
import { ConditionsFailedError, type NamedWrite, writeTransaction } from "./transaction.js";

/**
 * The claim of a due entry as one transaction, and the plain writes of runs
 * around it. Each write carries the name of its condition; a cancellation is
 * read by those names into what the claimer does next.
 */

type Item = Record<string, unknown>;

export interface ClaimWrites {
  readonly entry: DueEntry;
  /**
   * How the job moves on, when the claim advances it: to `next` (null when the
   * schedule has nothing after), with its count of queued occurrences, and to
   * COMPLETED when `completes` (expiring at its retention).
   */
  readonly advance: {
    readonly next: DueEntry | null;
    readonly occurrencesQueued: number;
    readonly completes: { readonly expiresAt: number } | null;
  } | null;
  /** QUEUED runs with their items. */
  readonly queued: readonly { readonly run: Run; readonly item: Item }[];
  /** SKIPPED records written in the transaction. */
  readonly skipped: readonly Item[];
}

export type ClaimWriteResult =
  | { readonly outcome: "committed" }
  /** The entry is gone: another claimer took it, or a pause, cancel or edit deleted it. */
  | { readonly outcome: "entry-gone" }
  /** The entry was rewritten under the same key (an edit kept the occurrence): as it is now. */
  | { readonly outcome: "entry-rewritten"; readonly entry: DueEntry }
  /** The job no longer points at the entry, is no longer active, or (for a retry entry) is gone. */
  | { readonly outcome: "job-moved" }
  /** Occurrences handled already: runs past QUEUED, and outcomes on record (by scheduledFor). */
  | {
      readonly outcome: "occurrences-handled";
      readonly running: readonly string[];
      readonly recorded: readonly string[];
    };

type ClaimCondition = "dueEntry" | "job" | "nextEntry" | `run:${string}` | `skipped:${string}`;

const runCondition = (scheduledFor: string): ClaimCondition => `run:${scheduledFor}`;
const skippedCondition = (scheduledFor: string): ClaimCondition => `skipped:${scheduledFor}`;

/**
 * Sends a claim in one transaction (retrying contention): delete the due entry
 * (it must exist and still carry the job version it was read with, which is
 * what makes the claim exclusive and current); advance the job (it must still
 * point at this entry and be active) and put its next entry, or, for a retry
 * entry, check that the job exists; put the QUEUED runs and the SKIPPED records
 * (they must not exist). A failed condition that says nothing the claimer can
 * act on is thrown as the `ConditionsFailedError` naming it.
 *
 * No write checks the shard lease (it would bill two write units a claim): a
 * dispatcher pass claims as the fast path does. A pass whose lease was taken
 * over races the new owner's claims as any two claimers do, and the entry's
 * delete lets one through; the claimer files the next entry by its clock read
 * just before this write, so a late pass's claim is a slow write, which the
 * next passes' re-sweep covers.
 */
export async function writeClaim(engine: Engine, claim: ClaimWrites): Promise<ClaimWriteResult> {
  const { entry, advance, queued, skipped } = claim;
  const { tables } = engine;
  const writes: NamedWrite<ClaimCondition>[] = [
    {
      name: "dueEntry",
      write: {
        Delete: {
          TableName: tables.jobs,
          Key: entry.key,
          // An edit that keeps the occurrence rewrites the entry under the same key with a new version:
          // the copy read before it must not be claimed (its version, schedule and priority are stale).
          ConditionExpression: "attribute_exists(pk) AND jobVersion = :jobVersion",
          ExpressionAttributeValues: { ":jobVersion": entry.jobVersion },
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
        },
      },
    },
  ];
  if (!advance) {
    // A retry entry leaves the job alone, but a deleted job's leftover retry must not run.
    writes.push({
      name: "job",
      write: {
        ConditionCheck: {
          TableName: tables.jobs,
          Key: jobKey(entry.jobId),
          ConditionExpression: "attribute_exists(pk)",
        },
      },
    });
  }
  if (advance) {
    const { next, occurrencesQueued, completes } = advance;
    writes.push({
      name: "job",
      write: {
        Update: {
          TableName: tables.jobs,
          Key: jobKey(entry.jobId),
          // The job must still point at this very entry: an edit, pause or cancel moves or removes it.
          ConditionExpression: "#status = :active AND nextDueKey.pk = :pk AND nextDueKey.sk = :sk",
          UpdateExpression: `SET nextRunAt = :nextRunAt, nextDueKey = :nextDueKey, occurrencesQueued = :queued${
            completes ? ", #status = :completed, expiresAt = :expiresAt" : ""
          }`,
          ExpressionAttributeNames: { "#status": "status" },
          ExpressionAttributeValues: {
            ":active": "ACTIVE",
            ":pk": entry.key.pk,
            ":sk": entry.key.sk,
            ":nextRunAt": next ? next.scheduledFor : null,
            ":nextDueKey": next ? next.key : null,
            ":queued": occurrencesQueued,
            ...(completes ? { ":completed": "COMPLETED", ":expiresAt": completes.expiresAt } : {}),
          },
        },
      },
    });
    if (next) {
      writes.push({
        name: "nextEntry",
        write: {
          Put: {
            TableName: tables.jobs,
            Item: encodeDueEntry(next),
            ConditionExpression: "attribute_not_exists(pk)",
          },
        },
      });
    }
  }
  for (const { run, item } of queued) {
    writes.push({
      name: runCondition(run.scheduledFor),
      write: {
        Put: {
          TableName: tables.runs,
          Item: item,
          // A QUEUED run of an older job version is replaced: the edit that bumped the version wins.
          ConditionExpression:
            "attribute_not_exists(pk) OR (#status = :queued AND jobVersion < :jobVersion)",
          ExpressionAttributeNames: { "#status": "status" },
          ExpressionAttributeValues: { ":queued": "QUEUED", ":jobVersion": entry.jobVersion },
        },
      },
    });
  }
  for (const item of skipped) {
    writes.push({
      name: skippedCondition(String(item.scheduledFor)),
      write: {
        Put: {
          TableName: tables.runs,
          Item: item,
          ConditionExpression: "attribute_not_exists(pk)",
        },
      },
    });
  }

  try {
    await writeTransaction(engine, "claim", writes);
    return { outcome: "committed" };
  } catch (error) {
    if (!(error instanceof ConditionsFailedError)) throw error;
    if (error.has("dueEntry")) {
      const rewritten = error.item("dueEntry");
      return rewritten === null
        ? { outcome: "entry-gone" }
        : { outcome: "entry-rewritten", entry: decodeDueEntry(rewritten) };
    }
    if (error.has("job")) return { outcome: "job-moved" };
    const running = queued
      .filter(({ run }) => error.has(runCondition(run.scheduledFor)))
      .map(({ run }) => run.scheduledFor);
    const recorded = skipped
      .map((item) => String(item.scheduledFor))
      .filter((scheduledFor) => error.has(skippedCondition(scheduledFor)));
    if (running.length > 0 || recorded.length > 0) {
      return { outcome: "occurrences-handled", running, recorded };
    }
    throw error;
  }
}

const MAX_BATCH_WRITE_ROUNDS = 6;

/**
 * Puts run items that need no condition (the runs of a job not yet written,
 * SKIPPED records beyond a transaction's share), 25 to a request, retrying
 * what DynamoDB leaves unprocessed.
 */
export async function putRunsUnconditionally(
  engine: Engine,
  items: readonly Item[],
): Promise<void> {
  const table = engine.tables.runs;
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
