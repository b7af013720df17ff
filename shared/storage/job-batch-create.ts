import { BatchWriteCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { DueEntry, Job } from "../model.js";
import { batchGetItems } from "./batch-get.js";
import { type ByTable, type PutRequest, putsLeft, sendInRounds } from "./batch-rounds.js";
import { isThrottling, isTransientFailure, sentMoreThanOnce } from "./dynamo-errors.js";
import { encodeDueEntry, idempotencyKey } from "./items.js";
import { decodeIdempotencyRecord, type IdempotencyRecord, newJobItem } from "./job-create.js";
import { hasExpired } from "./retention.js";

type Item = Record<string, unknown>;

/** DynamoDB's limit of items per BatchWriteItem. */
const WRITES_PER_REQUEST = 25;

/** One item of a batch create to put, and which job of the batch it belongs to. */
export interface BatchPut {
  readonly table: "jobs" | "runs";
  readonly item: Item;
  /** The job's index in the batch: a put that fails fails its job. */
  readonly owner: number;
}

/** A new job's put in a batch (see `putBatchItems`): the job's write, the commit of its create. */
export const jobPut = (engine: Engine, job: Job, owner: number): BatchPut => ({
  table: "jobs",
  item: newJobItem(engine, job),
  owner,
});

/** A new job's pending due entry, put before the job: without the job it is an orphan a claim removes. */
export const dueEntryPut = (entry: DueEntry, owner: number): BatchPut => ({
  table: "jobs",
  item: encodeDueEntry(entry),
  owner,
});

/** The jobs of a batch whose puts did not all apply. */
export interface BatchPutFailures {
  /** Left unprocessed after every round, or throttled whole (throttling): known not written. */
  readonly unwritten: ReadonlySet<number>;
  /**
   * A request that failed as a whole, or puts the SDK had sent more than once before they were
   * left unprocessed or throttled (an earlier send may have applied them, its answer lost):
   * whether they were applied is not known.
   */
  readonly uncertain: ReadonlyMap<number, unknown>;
}

const unconfirmedError = () =>
  new ConcurrentUpdateError(
    "DynamoDB left this job's writes unprocessed (throttling) after a send of them whose answer was lost; whether it was written is not known",
  );

/**
 * Puts the items of a batch create that need no condition (a new job's runs,
 * its due entry, a job with no idempotency key or upstream: their keys are
 * new), 25 to a BatchWriteItem across both tables, sending what DynamoDB left
 * unprocessed again after a backoff (50 ms doubling, 6 rounds). A BatchWriteItem
 * is not atomic: each item applies or not on its own, so the answer is by job,
 * and the caller writes a job only once the items that must precede it applied.
 */
export async function putBatchItems(
  engine: Engine,
  puts: readonly BatchPut[],
): Promise<BatchPutFailures> {
  const unwritten = new Set<number>();
  const uncertain = new Map<number, unknown>();
  // Items of a request the SDK sent more than once (a 500, a timeout, a throttle, then a resend):
  // an earlier send may have applied them with its answer lost, so a later "unprocessed" or
  // throttle says nothing about them.
  const maybeApplied = new Set<string>();
  const tableName = (table: BatchPut["table"]) => engine.tables[table];
  const ownerOf = new Map<string, number>();
  const keyOf = (table: string, item: Item) => `${table}|${String(item.pk)}|${String(item.sk)}`;
  for (const put of puts) ownerOf.set(keyOf(tableName(put.table), put.item), put.owner);
  const markMaybeApplied = (sent: ByTable<PutRequest>) => {
    for (const [table, requests] of Object.entries(sent))
      for (const r of requests) maybeApplied.add(keyOf(table, r.PutRequest.Item));
  };
  /** Each put of `requests` by its key and the job it belongs to. */
  const eachPut = (requests: ByTable<PutRequest>, visit: (key: string, owner: number) => void) => {
    for (const [table, puts] of Object.entries(requests))
      for (const r of puts) {
        const key = keyOf(table, r.PutRequest.Item);
        visit(key, ownerOf.get(key) ?? -1);
      }
  };

  const chunks: BatchPut[][] = [];
  for (let i = 0; i < puts.length; i += WRITES_PER_REQUEST)
    chunks.push(puts.slice(i, i + WRITES_PER_REQUEST));
  await Promise.all(
    chunks.map(async (chunk) => {
      const request: ByTable<PutRequest> = {};
      for (const put of chunk) {
        const table = tableName(put.table);
        request[table] = [...(request[table] ?? []), { PutRequest: { Item: put.item } }];
      }
      const left = await sendInRounds(request, async (pending) => {
        try {
          const result = await engine.doc.send(new BatchWriteCommand({ RequestItems: pending }));
          if ((result.$metadata.attempts ?? 1) > 1) markMaybeApplied(pending);
          return Object.fromEntries(
            Object.entries(result.UnprocessedItems ?? {}).map(([table, requests]) => [
              table,
              putsLeft(requests),
            ]),
          );
        } catch (error) {
          // Throttling of the whole request applied none of it, unless the SDK sent it more than
          // once; other failures may have applied some.
          if (sentMoreThanOnce(error)) markMaybeApplied(pending);
          const known = isTransientFailure(error) && isThrottling(error);
          eachPut(pending, (key, owner) => {
            if (known && !maybeApplied.has(key)) unwritten.add(owner);
            else if (!unwritten.has(owner)) uncertain.set(owner, error);
          });
          // Its owners are answered here: nothing of this chunk is sent again.
          return {};
        }
      });
      if (left === null) return;
      eachPut(left, (key, owner) => {
        if (!maybeApplied.has(key)) unwritten.add(owner);
        else if (!uncertain.has(owner)) uncertain.set(owner, unconfirmedError());
      });
    }),
  );
  for (const owner of unwritten) uncertain.delete(owner);
  return { unwritten, uncertain };
}

/**
 * The records of earlier creates under these idempotency keys (strongly
 * consistent, one BatchGetItem per 100 keys), by key; a key without one, or
 * whose record is past its window, is absent.
 */
export async function readIdempotencyRecords(
  engine: Engine,
  tenantId: string,
  keys: readonly string[],
): Promise<Map<string, IdempotencyRecord>> {
  const now = engine.clock();
  const byPk = new Map(keys.map((k) => [idempotencyKey(tenantId, k).pk, k]));
  const records = await batchGetItems(
    engine,
    engine.tables.jobs,
    [...byPk.keys()].map((pk) => ({ pk, sk: idempotencyKey(tenantId, "").sk })),
    {
      consistentRead: true,
      exhausted: () =>
        new ConcurrentUpdateError(
          "DynamoDB kept leaving this job's idempotency record unread (throttling); nothing of it was written: send it again",
        ),
    },
  );
  const found = new Map<string, IdempotencyRecord>();
  for (const record of records) {
    // Past its window the key is free again, whether or not TTL has deleted the record yet.
    if (hasExpired(record, now)) continue;
    const key = byPk.get(String(record.pk));
    if (key !== undefined) found.set(key, decodeIdempotencyRecord(record));
  }
  return found;
}
