import { BatchWriteCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import { runId } from "../keys.js";
import type { DueEntry, Run } from "../model.js";
import { MAX_BATCH_ROUNDS, putsLeft, sendInRounds } from "./batch-rounds.js";
import {
  afterLostRace,
  commitPlainClaim,
  deleteOwnRuns,
  type OwnRun,
  recordsClaimOf,
} from "./claim-plain.js";
import { putOverOlderDueEntry } from "./due-entries.js";
import { conditionalWrite, keptThrottling, retryOnContention } from "./dynamo-errors.js";
import { decodeDueEntry, jobKey } from "./items.js";
import { UNSTARTED_UNSENT } from "./runs.js";
import { putSkippedRecords } from "./skipped-records.js";
import { ConditionsFailedError, type NamedWrite, writeTransaction } from "./transaction.js";

/**
 * The claim of a due entry: its QUEUED runs and SKIPPED records put one by one, then one
 * transaction that moves the entry and the job on; and the plain writes of runs
 * around it. Each write carries the name of its condition; a failed one is read
 * by that name into what the claimer does next.
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
  /** QUEUED runs with their items, put before the transaction. */
  readonly queued: readonly { readonly run: Run; readonly item: Item }[];
  /**
   * Of `queued` (by scheduledFor), those an earlier round of this claim put at the entry's
   * version: they are not put again.
   */
  readonly alreadyPut: ReadonlySet<string>;
  /**
   * Marks the runs this claim puts (`claimToken`), so that a claim that fails deletes only its
   * own puts, never a run another claimer put over them.
   */
  readonly token: string;
  /**
   * SKIPPED records, put after the QUEUED runs and before the transaction, each only where no item
   * is (`putSkippedRecords`).
   */
  readonly skipped: readonly Item[];
  /**
   * The entry's job may not be written yet (`mayAwaitItsJob`): a plain claim that finds no job item
   * leaves the entry for the next pass.
   */
  readonly mayAwaitItsJob: boolean;
}

export type ClaimWriteResult =
  /**
   * `skipped`: the SKIPPED records it wrote (one found there is not counted). `entryLeft`: a plain
   * commit whose entry's delete failed; the entry awaits the next pass.
   */
  | { readonly outcome: "committed"; readonly skipped: number; readonly entryLeft?: true }
  /**
   * The entry is gone: another claimer took it, or a pause, cancel or edit deleted it. `left`:
   * the runs this claim put, left as they are (the claimer ends them if a cancel took it).
   */
  | { readonly outcome: "entry-gone"; readonly left: readonly Run[] }
  /** The entry was rewritten under the same key (an edit kept the occurrence): as it is now. */
  | { readonly outcome: "entry-rewritten"; readonly entry: DueEntry }
  /**
   * The job no longer points at the entry, is no longer active, or is gone (`jobGone`: its item
   * is not there, deleted, or not yet written by a create that puts the entry first).
   */
  | { readonly outcome: "job-moved"; readonly jobGone: boolean }
  /**
   * A plain claim's job no longer points at the entry (or is gone) and no claim of the entry is
   * recorded on it: the entry, found at its version, was deleted as an orphan.
   */
  | { readonly outcome: "orphan-removed" }
  /**
   * Occurrences handled already: runs past QUEUED, re-sent by the reaper, or ended (by
   * scheduledFor); and the runs this call put, which the next round does not put again.
   */
  | {
      readonly outcome: "occurrences-handled";
      readonly running: readonly string[];
      readonly put: readonly string[];
    };

type ClaimCondition = "dueEntry" | "job" | "nextEntry";

/** Puts of a claim's QUEUED runs in flight at once. */
const RUN_PUT_CONCURRENCY = 50;

/**
 * The condition of a claimed run's put. No run there yet; or a QUEUED run of an older job
 * version, which it replaces (the edit that bumped the version wins); or a QUEUED run of the same
 * version that no worker has started (fence 0) and the reaper has not re-sent (no
 * `misfireFrom`): another claim's put of the same entry at the same version (the claimer that
 * lost the entry, or one that died before its transaction), so the same run, which the
 * committing claim sends. Anything else (a run started, parked, waiting, ended, re-sent, or of a
 * later version) handled the occurrence already.
 */
const RUN_PUT_CONDITION = `attribute_not_exists(pk) OR (#status = :queued AND (jobVersion < :jobVersion OR (jobVersion = :jobVersion AND ${UNSTARTED_UNSENT})))`;

/**
 * A run put of an entry that names the attempt before it (`retryOf`: a failure's retry entry, under
 * the failed start's fence; a one-off's occurrence filed again after a cancel, under fence 0): as
 * `RUN_PUT_CONDITION`, but only over a run that names the same (`retryOf.fence`), whatever its
 * version. Two entries can file one next attempt under different keys: two starts of one attempt
 * that each fail (one outlived its lease, or died before its ending), or a failure's own retry of
 * a run a pause cancelled beside the resume's entry (fence 0). The run the first claim queued may
 * be running with its start unwritten (QUEUED, fence 0), or parked: a second put over it, with its
 * message, would run it twice, and so would one at a later version, an edit having rewritten the
 * resume's entry in between (the held start's first write then fails on the version, and the new
 * run runs again). The later claim finds the attempt handled and drops its entry.
 */
const RETRY_RUN_PUT_CONDITION = `attribute_not_exists(pk) OR (#status = :queued AND retryOf.fence = :retryFence AND (jobVersion < :jobVersion OR (jobVersion = :jobVersion AND ${UNSTARTED_UNSENT})))`;

/**
 * What a run put of a one-off's occurrence filed again at a later attempt (an edit back to its
 * time, a resume: the attempt before it was cancelled or ended) takes the key over from besides: a
 * next attempt of that attempt before (it names it, `retryOf`) that never ran and never will. Its
 * failure put it before its FAILED ending, which was refused (the run had been asked to cancel), so
 * no message of it was sent: SKIPPED (taken back by that worker, or skipped at its start), or
 * still QUEUED as put, no claim's (no `claimToken`), never started, never re-sent. Put after the
 * edit's or resume's read of the runs, it was found by the claim and taken for the occurrence's
 * run, and, taken back, left the one-off ACTIVE with nothing pending, never run.
 */
const OWN_RETRY_NEVER_RUN = `(retryOf.runId = :before AND (#status = :skipped OR (#status = :queued AND attribute_not_exists(claimToken) AND ${UNSTARTED_UNSENT})))`;

/** The condition of a claim's run put for `entry`, with the values it names beyond the common ones. */
function runPutCondition(entry: DueEntry): {
  readonly condition: string;
  readonly values: Record<string, unknown>;
} {
  const { retryOf } = entry;
  const base = retryOf ? RETRY_RUN_PUT_CONDITION : RUN_PUT_CONDITION;
  const values: Record<string, unknown> = retryOf ? { ":retryFence": retryOf.fence } : {};
  // A failure's retry entry (its failed start's fence) is no occurrence filed again.
  if (entry.kind !== "occurrence" || entry.attempt <= 1 || (retryOf && retryOf.fence !== 0))
    return { condition: base, values };
  return {
    condition: `${base} OR ${OWN_RETRY_NEVER_RUN}`,
    values: {
      ...values,
      ":before": runId(entry.jobId, entry.scheduledFor, entry.attempt - 1),
      ":skipped": "SKIPPED",
    },
  };
}

/**
 * Writes a claim. First each QUEUED run is put with a conditional PutItem
 * (`RUN_PUT_CONDITION`): one write unit, where an item of a transaction bills
 * two. A run found handled already ends the call there (`occurrences-handled`):
 * the claimer plans again without it. Then each SKIPPED record is put where
 * no item is (`putSkippedRecords`: one there is the occurrence's outcome on
 * record, kept, and the claim goes on). Then one transaction (retrying
 * contention): delete the due entry (it must exist and still carry the job
 * version it was read with, which is what makes the claim exclusive and
 * current); advance the job (it must still point at this entry and be active)
 * and put its next entry, or, for a retry entry, check that the job exists. A
 * failed condition that says nothing the claimer can act on is thrown as the
 * `ConditionsFailedError` naming it.
 *
 * The runs exist, with their `inflight` entries, and the SKIPPED records are
 * on record, before the claim commits, so the reaper finds every claimed run
 * and the history holds every occurrence the claim passed over. The records
 * stay whatever the transaction meets: each records an occurrence missed by
 * this claim's clock, as any claim of the entry then would. A claim whose transaction then fails
 * leaves its runs behind only where that is safe: another claimer took the
 * entry (its puts are the same runs, which it sends), or a pause, cancel or
 * edit removed or rewrote it (the claimer ends them when a cancel did, else the
 * reaper re-sends them at their deadline, and the worker decides on them as on
 * any run queued before that change); `entry-gone` names them. One
 * whose job no longer points at the entry, or that fails on another condition,
 * deletes its own puts (`OWN_UNTOUCHED_RUN`): the entry was there at its
 * version, so no other claim of it committed them.
 *
 * No write checks the shard lease (it would bill two write units a claim): a
 * dispatcher pass claims as the fast path does. A pass whose lease was taken
 * over races the new owner's claims as any two claimers do, and the entry's
 * delete lets one through; the claimer files the next entry by its clock read
 * just before this write, so a late pass's claim is a slow write, which the
 * next passes' re-sweep covers.
 */
export async function writeClaim(engine: Engine, claim: ClaimWrites): Promise<ClaimWriteResult> {
  const { entry, advance, queued, skipped, alreadyPut, token } = claim;
  const { tables } = engine;

  const running: string[] = [];
  const put: string[] = [];
  const putCondition = runPutCondition(entry);
  await forEachConcurrently(
    queued.filter(({ run }) => !alreadyPut.has(run.scheduledFor)),
    RUN_PUT_CONCURRENCY,
    async ({ run, item }) => {
      const written = await conditionalWrite(() =>
        retryOnContention(engine, "claim run", () =>
          engine.doc.send(
            new PutCommand({
              TableName: tables.runs,
              Item: { ...item, claimToken: token },
              ConditionExpression: putCondition.condition,
              ExpressionAttributeNames: { "#status": "status" },
              ExpressionAttributeValues: {
                ":queued": "QUEUED",
                ":jobVersion": entry.jobVersion,
                ":unstarted": 0,
                ":null": "NULL",
                ...putCondition.values,
              },
            }),
          ),
        ),
      );
      if (written) put.push(run.scheduledFor);
      else running.push(run.scheduledFor);
    },
  );
  if (running.length > 0) return { outcome: "occurrences-handled", running, put };
  const own: OwnRun[] = queued.filter(
    ({ run }) => alreadyPut.has(run.scheduledFor) || put.includes(run.scheduledFor),
  );

  // A one-off's occurrence: its transaction would be the entry's delete and the job's update
  // alone, each billed twice; as plain writes, the job's update commits it (claim-plain.ts).
  // Only where the deployment says so: a claimer of a version before plain claims, beside this
  // one, reads a plain commit as its job moving on and deletes the committed claim's run.
  if (
    engine.settings.oneOffClaimWrites === "plain" &&
    advance !== null &&
    advance.next === null &&
    skipped.length === 0 &&
    entry.kind === "occurrence" &&
    "runAt" in entry.schedule
  ) {
    return commitPlainClaim(engine, {
      entry,
      occurrencesQueued: advance.occurrencesQueued,
      completes: advance.completes,
      token,
      own,
      mayAwaitItsJob: claim.mayAwaitItsJob,
    });
  }

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
    const catchUpCount = next?.catchUpCount ?? 0;
    writes.push({
      name: "job",
      write: {
        Update: {
          TableName: tables.jobs,
          Key: jobKey(entry.jobId),
          // The job must still point at this very entry: an edit, pause or cancel moves or removes it.
          ConditionExpression: "#status = :active AND nextDueKey.pk = :pk AND nextDueKey.sk = :sk",
          // The catch-up's count goes with the job too: an edit or resume writes the entry again.
          UpdateExpression: `SET nextRunAt = :nextRunAt, nextDueKey = :nextDueKey, occurrencesQueued = :queued${
            completes ? ", #status = :completed, expiresAt = :expiresAt" : ""
          }${catchUpCount > 0 ? ", catchUpCount = :catchUp, catchUpOf = :nextRunAt" : " REMOVE catchUpCount, catchUpOf"}`,
          ExpressionAttributeNames: { "#status": "status" },
          // Whether the job is there at all: a create may not have put it yet (dispatch/claim.ts).
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
          ExpressionAttributeValues: {
            ":active": "ACTIVE",
            ":pk": entry.key.pk,
            ":sk": entry.key.sk,
            ":nextRunAt": next ? next.scheduledFor : null,
            ":nextDueKey": next ? next.key : null,
            ":queued": occurrencesQueued,
            ...(catchUpCount > 0 ? { ":catchUp": catchUpCount } : {}),
            ...(completes ? { ":completed": "COMPLETED", ":expiresAt": completes.expiresAt } : {}),
          },
        },
      },
    });
    if (next) {
      writes.push({
        name: "nextEntry",
        // Over a one-off's entry left by a dead plain claimer, of an older version of the job.
        write: putOverOlderDueEntry(engine, next),
      });
    }
  }
  // After the runs, which may end this round, and before the commit: a record that cannot be put
  // fails the claim here, as its transaction would, and the next pass plans it again.
  const skippedWritten = await putSkippedRecords(engine, skipped);

  try {
    await writeTransaction(engine, "claim", writes);
    return { outcome: "committed", skipped: skippedWritten };
  } catch (error) {
    if (!(error instanceof ConditionsFailedError)) throw error;
    if (error.has("dueEntry")) {
      const rewritten = error.item("dueEntry");
      return rewritten === null
        ? { outcome: "entry-gone", left: own.map(({ run }) => run) }
        : { outcome: "entry-rewritten", entry: decodeDueEntry(rewritten) };
    }
    if (error.has("job")) {
      // A plain claim of this entry (claim-plain.ts) committed, its claimer yet to delete the
      // entry: a lost race, whose runs are the winner's too.
      if (recordsClaimOf(error.item("job"), entry)) return afterLostRace(engine, entry, own);
      await deleteOwnRuns(engine, own, token);
      return { outcome: "job-moved", jobGone: error.item("job") === null };
    }
    await deleteOwnRuns(engine, own, token);
    throw error;
  }
}

/**
 * Puts run items that need no condition (the runs and SKIPPED records of a job not yet written),
 * 25 to a request, sending again what DynamoDB leaves unprocessed (50 ms doubling, 6 rounds, as
 * a batch read does); still unprocessed after them, they fail as throttling (`keptThrottling`).
 */
export async function putRunsUnconditionally(
  engine: Engine,
  items: readonly Item[],
): Promise<void> {
  const table = engine.tables.runs;
  for (let i = 0; i < items.length; i += 25) {
    const request = { [table]: items.slice(i, i + 25).map((Item) => ({ PutRequest: { Item } })) };
    const left = await sendInRounds(request, async (pending) => {
      const result = await engine.doc.send(new BatchWriteCommand({ RequestItems: pending }));
      return { [table]: putsLeft(result.UnprocessedItems?.[table] ?? []) };
    });
    if (left !== null) throw keptThrottling("BatchWriteItem", [table], MAX_BATCH_ROUNDS);
  }
}
