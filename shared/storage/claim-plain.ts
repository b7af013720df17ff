import { DeleteCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { forEachConcurrently } from "../concurrency.js";
import type { Engine } from "../engine.js";
import type { DueEntry, Run } from "../model.js";
import type { ClaimWriteResult } from "./claim.js";
import { deleteDueEntryAsRead } from "./due-entries.js";
import {
  conditionalWrite,
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
} from "./dynamo-errors.js";
import { jobKey } from "./items.js";
import { UNSTARTED_UNSENT } from "./runs.js";

/**
 * A claim made of plain conditional writes instead of a transaction: the one
 * of a one-off's occurrence, whose transaction would hold only the entry's
 * delete and the job's update (each billed twice in a transaction). The job's
 * update is the commit; the entry's delete follows. Also what any claim does
 * with the entry and its own runs once it fails (shared with `writeClaim`).
 */

type Item = Record<string, unknown>;

/** A claimed run with its item, as `writeClaim` put it. */
export interface OwnRun {
  readonly run: Run;
  readonly item: Item;
}

/**
 * What a plain claim's commit records on the job (`claimedEntry`): the entry it claimed, at its
 * version, and the claimer's token. A claimer whose own commit fails reads it from the job as the
 * update returns it, and tells a committed claim of its entry (a lost race: leave the runs, which
 * are the winner's too) from a job that moved on (an edit, pause, cancel or delete).
 */
interface ClaimedEntryMark {
  readonly pk: string;
  readonly sk: string;
  readonly jobVersion: number;
  readonly token: string;
}

/** Whether the job item as it stood records a committed claim of `entry` (at its version). */
export function recordsClaimOf(job: Item | null, entry: DueEntry): ClaimedEntryMark | null {
  const mark = job?.claimedEntry as Partial<ClaimedEntryMark> | undefined;
  if (!mark || typeof mark !== "object") return null;
  return mark.pk === entry.key.pk &&
    mark.sk === entry.key.sk &&
    mark.jobVersion === entry.jobVersion &&
    typeof mark.token === "string"
    ? (mark as ClaimedEntryMark)
    : null;
}

/** A run this claim put, unchanged since: deleted when the claim fails for good. */
const OWN_UNTOUCHED_RUN = `claimToken = :token AND #status = :queued AND ${UNSTARTED_UNSENT}`;

/** Deletes of a failed claim's runs in flight at once (a claim puts at most 50). */
const OWN_RUN_DELETES_IN_FLIGHT = 50;

/**
 * Deletes the runs a failed claim put, each only while it is as the claim put it: carrying
 * its token, QUEUED, unstarted and never re-sent. Called only once the claim knows no other claim
 * of the entry committed; a run another claimer put over one of these since carries that
 * claimer's token and stays.
 */
export async function deleteOwnRuns(
  engine: Engine,
  own: readonly OwnRun[],
  token: string,
): Promise<void> {
  await forEachConcurrently(own, OWN_RUN_DELETES_IN_FLIGHT, async ({ item }) => {
    await conditionalWrite(() =>
      retryOnContention(engine, "claim run delete", () =>
        engine.doc.send(
          new DeleteCommand({
            TableName: engine.tables.runs,
            Key: { pk: item.pk, sk: item.sk },
            ConditionExpression: OWN_UNTOUCHED_RUN,
            ExpressionAttributeNames: { "#status": "status" },
            ExpressionAttributeValues: {
              ":token": token,
              ":queued": "QUEUED",
              ":unstarted": 0,
              ":null": "NULL",
            },
          }),
        ),
      ),
    );
  });
}

/** The claimed entry, deleted as it was read (`deleteDueEntryAsRead`). */
function deleteEntryAsRead(
  engine: Engine,
  entry: DueEntry,
): Promise<"deleted" | "gone" | DueEntry> {
  return deleteDueEntryAsRead(engine, entry, "claim entry delete");
}

/**
 * After another claim of the entry committed (`recordsClaimOf`): removes the entry if that claim's
 * claimer has not (it may have died between its commit and its delete), and leaves this claim's
 * runs, which are the same runs as the winner's, put over each other, and sent by it.
 */
export async function afterLostRace(
  engine: Engine,
  entry: DueEntry,
  own: readonly OwnRun[],
): Promise<ClaimWriteResult> {
  const entryNow = await deleteEntryAsRead(engine, entry);
  return typeof entryNow === "object"
    ? { outcome: "entry-rewritten", entry: entryNow }
    : { outcome: "entry-gone", left: own.map(({ run }) => run) };
}

export interface PlainCommit {
  readonly entry: DueEntry;
  readonly occurrencesQueued: number;
  readonly completes: { readonly expiresAt: number } | null;
  readonly token: string;
  /** The runs this claim put (all of them, across its rounds). */
  readonly own: readonly OwnRun[];
  /**
   * A job item that is not there may not be written yet (a create puts the entry first): the
   * entry is then left where it is, for the next pass (`mayAwaitItsJob`).
   */
  readonly mayAwaitItsJob: boolean;
}

/**
 * Commits a one-off's claim with plain writes, after its runs are put: the job's update, then the
 * entry's delete. The update is conditioned as the transaction's job write is (ACTIVE, pointing at
 * this entry) and on the job's version being the entry's, which the transaction's entry delete
 * checked (an edit bumps the version and rewrites or removes the entry); it records the claim
 * (`claimedEntry`). The entry's delete, conditioned on its version, comes after: a claimer that
 * dies before it leaves the entry to the next pass, which finds the claim recorded on the job
 * and removes it. A failed update is told apart by the job as it stood (no extra read):
 *
 * - it records this claim (this claimer's token: a request the SDK sent again after it applied) →
 *   committed;
 * - it records another claim of this entry at this version → a lost race: the runs stay (they
 *   are the winner's too), the entry is removed if still there at its version;
 * - no job item, and it may not be written yet → the own runs are deleted and the entry left;
 * - otherwise the entry is deleted as read: rewritten meanwhile → claimed as it is now; gone → as
 *   the transaction's `entry-gone` (a pause, cancel, edit or another claim removed it: the runs
 *   stay); deleted → an orphan: the own runs are deleted when the job is at the entry's version
 *   (no claim of the entry committed: that would be recorded, and only a claim of another entry at
 *   this version, after a pause ended this entry's runs, writes over the record), and left as the
 *   edit that moved the job on leaves runs queued before it when it is not.
 */
export async function commitPlainClaim(
  engine: Engine,
  claim: PlainCommit,
): Promise<ClaimWriteResult> {
  const { entry, occurrencesQueued, completes, token } = claim;
  const mark: ClaimedEntryMark = {
    pk: entry.key.pk,
    sk: entry.key.sk,
    jobVersion: entry.jobVersion,
    token,
  };
  try {
    await retryOnContention(engine, "claim", () =>
      engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: jobKey(entry.jobId),
          ConditionExpression:
            "#status = :active AND nextDueKey.pk = :pk AND nextDueKey.sk = :sk AND version = :jobVersion",
          UpdateExpression: `SET nextRunAt = :null, nextDueKey = :null, occurrencesQueued = :queued, claimedEntry = :mark${
            completes ? ", #status = :completed, expiresAt = :expiresAt" : ""
          } REMOVE catchUpCount, catchUpOf`,
          ExpressionAttributeNames: { "#status": "status" },
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
          ExpressionAttributeValues: {
            ":active": "ACTIVE",
            ":pk": entry.key.pk,
            ":sk": entry.key.sk,
            ":jobVersion": entry.jobVersion,
            ":null": null,
            ":queued": occurrencesQueued,
            ":mark": mark,
            ...(completes ? { ":completed": "COMPLETED", ":expiresAt": completes.expiresAt } : {}),
          },
        }),
      ),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    return afterFailedCommit(engine, claim, failedConditionItem(error));
  }
  return committed(await removeClaimedEntry(engine, entry));
}

async function afterFailedCommit(
  engine: Engine,
  claim: PlainCommit,
  job: Item | null,
): Promise<ClaimWriteResult> {
  const { entry, token, own } = claim;
  const recorded = recordsClaimOf(job, entry);
  if (recorded?.token === token) return committed(await removeClaimedEntry(engine, entry));
  if (recorded) return afterLostRace(engine, entry, own);
  if (job === null && claim.mayAwaitItsJob) {
    await deleteOwnRuns(engine, own, token);
    return { outcome: "job-moved", jobGone: true };
  }
  const entryNow = await deleteEntryAsRead(engine, entry);
  if (typeof entryNow === "object") return { outcome: "entry-rewritten", entry: entryNow };
  if (entryNow === "gone") return { outcome: "entry-gone", left: own.map(({ run }) => run) };
  if (job === null || job.version === entry.jobVersion) await deleteOwnRuns(engine, own, token);
  return { outcome: "orphan-removed" };
}

/** A committed claim, its entry `removed` or left (`entryLeft`: its delete failed). */
const committed = (removed: boolean): ClaimWriteResult =>
  // A plain claim records nothing SKIPPED (writeClaim takes it only for a claim that records none).
  removed
    ? { outcome: "committed", skipped: 0 }
    : { outcome: "committed", skipped: 0, entryLeft: true };

/**
 * The committed claim's entry, deleted as it was read; false when that failed. Its failure is
 * logged, not thrown: the claim has committed, and the next pass that meets the entry finds the
 * claim recorded on the job and removes it. A pass holds its line at the entry's bucket so that
 * the next one does meet it (`entryLeft`): past the line, only the look-back would read the bucket
 * again, 15 minutes on, and not at all where the look-back was what read it (or the bucket lay
 * further behind, a backlog after an outage).
 */
async function removeClaimedEntry(engine: Engine, entry: DueEntry): Promise<boolean> {
  try {
    await deleteEntryAsRead(engine, entry);
    return true;
  } catch (error) {
    engine.obs.log.warn("left a claimed due entry to the next pass; its delete failed", {
      tenantId: entry.tenantId,
      jobId: entry.jobId,
      dueKey: entry.key,
      error: String(error),
    });
    return false;
  }
}
