import { randomBytes } from "node:crypto";
import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { Job, RunSummary } from "../model.js";
import {
  conditionalWrite,
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
} from "./dynamo-errors.js";
import { decodeJob, jobKey } from "./items.js";

/**
 * Writes of a job's overlap bookkeeping: `activeRuns` (runId → leaseUntil of
 * its running runs), `bufferedRunId` (buffer_one's waiting run),
 * `rerunWaiting` (a retry or replay waiting for a run under way), `admissionMarks` (each held
 * run's latest admission write's mark) and `activeRevision`, which serialises admissions of one
 * job.
 */

/**
 * The most runs a job lists in `activeRuns`. The list lives on the job's item, which DynamoDB holds
 * to 400 KB: about 75 bytes a run and 60 of its admission mark, 200 take 27 KB beside the parked
 * runs' 150 KB (run-park.ts), the largest definition the API accepts and 1,000 dependents (the
 * item at its largest: test/integration/parked-runs-limit). Runs under a live lease are at most
 * maxConcurrent (100 at most); a run whose lease lapsed stays listed until it ends (its own
 * admission reads it there when it comes back), and a long-job target that takes runs over and
 * goes quiet leaves each so for up to its timeout (24 h). A run not listed that finds the list
 * full meets its overlap policy as if those runs were under way (shared/execution/admission.ts).
 */
export const MAX_LISTED_RUNS = 200;

/**
 * The most `activeRuns` entries one write takes out. DynamoDB holds an update expression to 4 KB,
 * which about 170 paths such as `activeRuns.#dropped123` fill: a write naming every ended run of a
 * job that lists its most (200, all ended between two of its writes: an async target's
 * completions, a frequent job's endings, which leave their entries) was refused every time, and
 * the job's admissions, pauses and edits with it. The rest go with the next write.
 */
const MAX_ENTRIES_PER_WRITE = 100;

/** Random bytes of an admission's mark: 12 characters, unique among the deliveries of a run. */
const ADMISSION_MARK_BYTES = 9;

/** No other admission (or ending) changed the job since the caller read it. */
const REVISION_UNCHANGED = "activeRevision = :revision";
/** The run is still listed as active: a heartbeat does not bring back an entry that went. */
const RUN_LISTED = "attribute_exists(activeRuns.#runId)";

export type AdmissionChange =
  /**
   * The run is admitted: listed in activeRuns until `leaseUntil` (and out of the buffer slot).
   * With `firstWriteLeadMs`, its start is unwritten, owed that long before `leaseUntil`.
   */
  | {
      readonly kind: "start";
      readonly runId: string;
      readonly leaseUntil: Date;
      readonly firstWriteLeadMs?: number | undefined;
    }
  /** The run takes the buffer_one slot. */
  | { readonly kind: "buffer"; readonly runId: string }
  /** A retry or replay waiting for a run under way marks itself on the job (`rerunWaiting`). */
  | { readonly kind: "rerun waits"; readonly runId: string };

/**
 * Records an admission decided on `job` as read, dropping the entries
 * `dropped` (lapsed leases, ended runs; MAX_ENTRIES_PER_WRITE at most, the rest left for the
 * next write, which reads them ended again) on the way and, when it differs from
 * the one read, setting the job's `lastRun`. A start clears the job's
 * `rerunWaiting` when it is the run's own, and any write drops one whose run
 * was read ended (`staleRerunMark`). The run's mark in `admissionMarks` is this write's own (the
 * marks of runs the job no longer holds go). Throws ConcurrentUpdateError when the
 * job's activeRevision moved since that read: decide again from a fresh one.
 */
export async function recordAdmission(
  engine: Engine,
  job: Job,
  change: AdmissionChange,
  {
    dropped,
    lastRun = job.lastRun,
    staleRerunMark = false,
  }: {
    readonly dropped: readonly string[];
    readonly lastRun?: RunSummary | null;
    readonly staleRerunMark?: boolean;
  },
): Promise<void> {
  const names: Record<string, string> = {};
  const droppedNow = dropped.filter((id) => id !== change.runId).slice(0, MAX_ENTRIES_PER_WRITE);
  const removals = droppedNow.map((id, i) => {
    names[`#dropped${i}`] = id;
    return `activeRuns.#dropped${i}`;
  });
  // This write's own mark, kept under its run: another delivery of the run may write the very same
  // change (two takes in one millisecond lease it alike), and only the mark tells this write's
  // from that one's, whatever other runs' admissions land on the job before the SDK sends it again.
  const mark = randomBytes(ADMISSION_MARK_BYTES).toString("base64url");
  const values: Record<string, unknown> = {
    ":revision": job.activeRevision,
    ":one": 1,
  };
  const sets = ["activeRevision = activeRevision + :one"];
  if (change.kind === "start") {
    sets.push("activeRuns.#runId = :leaseUntil");
    names["#runId"] = change.runId;
    values[":leaseUntil"] = change.leaseUntil.toISOString();
    if (job.bufferedRunId === change.runId) removals.push("bufferedRunId");
    if (change.firstWriteLeadMs !== undefined) {
      sets.push("firstWriteLeadMs = :lead");
      values[":lead"] = change.firstWriteLeadMs;
    }
    if (job.rerunWaiting === change.runId || staleRerunMark) removals.push("rerunWaiting");
  } else if (change.kind === "buffer") {
    sets.push("bufferedRunId = :runId");
    values[":runId"] = change.runId;
    if (staleRerunMark) removals.push("rerunWaiting");
  } else {
    sets.push("rerunWaiting = :runId");
    values[":runId"] = change.runId;
  }
  // The runs the job holds once this write is applied keep their marks, beside this one's. The
  // map is written whole (the write stands on the revision read, so the map read is the map as
  // it stands): a path in it would fail on a job no admission of this version has written yet.
  // A buffer or rerun write that takes the place of a run no longer waiting lets that run go.
  const held = new Set(Object.keys(job.activeRuns));
  for (const id of droppedNow) held.delete(id);
  if (job.bufferedRunId && change.kind !== "buffer" && !removals.includes("bufferedRunId"))
    held.add(job.bufferedRunId);
  if (job.rerunWaiting && change.kind !== "rerun waits" && !removals.includes("rerunWaiting"))
    held.add(job.rerunWaiting);
  sets.push("admissionMarks = :marks");
  values[":marks"] = {
    ...Object.fromEntries(
      Object.entries(job.admissionMarks ?? {}).filter(([runId]) => held.has(runId)),
    ),
    [change.runId]: mark,
  };
  if (lastRun !== job.lastRun) {
    sets.push("lastRun = :lastRun");
    values[":lastRun"] = lastRun;
  }
  const update = `SET ${sets.join(", ")}`;
  try {
    await retryOnContention(engine, "admission", () =>
      engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: jobKey(job.jobId),
          ConditionExpression: REVISION_UNCHANGED,
          UpdateExpression: `${update}${removals.length ? ` REMOVE ${removals.join(", ")}` : ""}`,
          ExpressionAttributeNames: Object.keys(names).length ? names : undefined,
          ExpressionAttributeValues: values,
          ReturnValuesOnConditionCheckFailure: "ALL_OLD",
        }),
      ),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    if (ownAdmissionWritten(change, mark, error)) return;
    throw new ConcurrentUpdateError(`job ${job.jobId}: admission raced another`, {
      cause: error,
    });
  }
}

/**
 * Slack for the holder's first write: its request, and its clock, which may run behind this
 * worker's by seconds (the holder's time is read from a lease its own clock wrote). With 1 s, a
 * duplicate on a host 2 s ahead took a live holder for dead in the second before its first write
 * and ran the run beside it. 4 s keeps a reaper's re-send (read 5 s past the run's deadline, the
 * start's first write owed 1 s before it) taking over a holder that died, with 2 s to spare.
 */
const FIRST_WRITE_SLACK_MS = 4_000;

/**
 * Whether the job lists `runId` under a live lease, admitted with its start unwritten by a worker
 * still within its time for the start's first write (so it runs the run). The time is read back
 * from the listed lease by the lister's lead (`firstWriteLeadMs`), which a job admitted by an
 * earlier version lacks: then by this worker's own lease and beat, the lister's unless a deploy
 * changed leaseSeconds. One lead per job: of two runs listed at once by workers of two leases
 * (overlap `allow`, during a deploy), the earlier is read by the later one's.
 */
export function startOwedElsewhere(
  job: Job,
  runId: string,
  now: Date,
  own: { readonly leaseMs: number; readonly firstWriteWithinMs: number },
): boolean {
  const listed = job.activeRuns[runId];
  if (listed === undefined || listed <= now.toISOString()) return false;
  const leadMs = job.firstWriteLeadMs ?? own.leaseMs - own.firstWriteWithinMs;
  return now.getTime() <= Date.parse(listed) - leadMs + FIRST_WRITE_SLACK_MS;
}

/**
 * Whether an admission that failed its condition was this very write, applied before with its
 * answer lost (the SDK sent it again, or retryOnContention did once the SDK's attempts after it
 * were all throttled: a call of its own, sent once): the job's `admissionMarks` holds this write's
 * mark under its run, with this change still in the job. Other runs' writes may have moved the job
 * on before the SDK sent it again: after a request timeout that comes seconds after the write was
 * applied (shared/aws.ts), and a job whose runs overlap or follow closely is written by them in
 * those seconds (their admissions write their own runs' marks and keep this one); a later write
 * keeps a live entry, a waiting place or a rerun mark that is still so. Taken for another's, a
 * first start held unwritten would find its own run listed under a live lease, take it for another
 * delivery's, and leave the run unrun (and its job's overlap blocked) until the lease lapsed and
 * the reaper sent it again. The mark is drawn for each write, so no other write, and no request
 * refused unapplied (throttled, a 500 before the write: the SDK sends those again too), leaves
 * it: another delivery of the run taken in the same millisecond writes the same change, same
 * lease, but its own mark, and both deliveries would run the run if the change alone told.
 */
function ownAdmissionWritten(change: AdmissionChange, mark: string, error: unknown): boolean {
  const old = failedConditionItem(error);
  const marks = (old?.admissionMarks ?? {}) as Record<string, unknown>;
  if (old === null || marks[change.runId] !== mark) return false;
  if (change.kind === "buffer") return old.bufferedRunId === change.runId;
  if (change.kind === "rerun waits") return old.rerunWaiting === change.runId;
  const listed = (old.activeRuns ?? {}) as Record<string, unknown>;
  return listed[change.runId] === change.leaseUntil.toISOString();
}

/**
 * Drops the entries of the ended runs `ended` from the job's activeRuns and sets its lastRun to
 * `lastRun`, without an admission: for a job whose next admission may not come while the runs'
 * items last (paused, cancelled, edited). Returns the job as the write left it (`ALL_NEW`, no
 * read). Throws ConcurrentUpdateError when the job's activeRevision moved since `job` was read (an
 * admission or a job write of an ending). Past MAX_ENTRIES_PER_WRITE runs it writes again, under
 * the revision the write before left: one that then fails leaves the rest for a later write.
 */
export async function recordEndedRuns(
  engine: Engine,
  job: Job,
  ended: readonly string[],
  lastRun: RunSummary | null,
): Promise<Job> {
  let written = job;
  for (let from = 0; from === 0 || from < ended.length; from += MAX_ENTRIES_PER_WRITE)
    written = await recordSomeEndedRuns(
      engine,
      written,
      ended.slice(from, from + MAX_ENTRIES_PER_WRITE),
      lastRun,
    );
  return written;
}

/** One write of `recordEndedRuns`: up to MAX_ENTRIES_PER_WRITE entries, under the job's revision. */
async function recordSomeEndedRuns(
  engine: Engine,
  job: Job,
  ended: readonly string[],
  lastRun: RunSummary | null,
): Promise<Job> {
  const names = Object.fromEntries(ended.map((id, i) => [`#ended${i}`, id]));
  try {
    const written = await retryOnContention(engine, "ended runs", () =>
      engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: jobKey(job.jobId),
          ConditionExpression: REVISION_UNCHANGED,
          UpdateExpression: `SET lastRun = :lastRun, activeRevision = activeRevision + :one REMOVE ${Object.keys(
            names,
          )
            .map((name) => `activeRuns.${name}`)
            .join(", ")}`,
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: {
            ":revision": job.activeRevision,
            ":one": 1,
            ":lastRun": lastRun,
          },
          ReturnValues: "ALL_NEW",
        }),
      ),
    );
    return decodeJob(written.Attributes ?? {});
  } catch (error) {
    if (isConditionalCheckFailed(error))
      throw new ConcurrentUpdateError(`job ${job.jobId}: its runs changed meanwhile`, {
        cause: error,
      });
    throw error;
  }
}

/**
 * The listed lease is not later than the one written. A stale worker's extension, sent before its
 * lease lapsed and landing after a new start's admission (a slow request, the SDK's retries), would
 * otherwise move that start's lease back, and the run would read lapsed to overlap while it runs.
 * Entries of every version are ISO instants of one length (`toISOString`), so they order as text.
 */
const LEASE_NOT_LATER = "activeRuns.#runId <= :leaseUntil";

/**
 * Keeps the job's view of a running run's lease current, so overlap sees it as live; never moves
 * it back (`LEASE_NOT_LATER`): a refused extension is a stale one, and is dropped.
 */
export async function extendAdmission(
  engine: Engine,
  jobId: string,
  runId: string,
  leaseUntil: Date,
) {
  await conditionalWrite(() =>
    engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: jobKey(jobId),
        ConditionExpression: `${RUN_LISTED} AND ${LEASE_NOT_LATER}`,
        UpdateExpression: "SET activeRuns.#runId = :leaseUntil",
        ExpressionAttributeNames: { "#runId": runId },
        ExpressionAttributeValues: { ":leaseUntil": leaseUntil.toISOString() },
      }),
    ),
  );
}

/**
 * Frees the buffer_one slot a run held when that run ends without being
 * admitted (skipped, cancelled, dead). Conditioned on the run still holding
 * it, so a newer buffered run keeps its slot. Admission also takes over a slot
 * whose run has ended, for an ending that could not get here (a crash).
 */
export const releaseBufferSlot = (engine: Engine, jobId: string, runId: string) =>
  releaseHeld(engine, "buffer release", jobId, runId, "bufferedRunId");

/**
 * Clears the job's `rerunWaiting` when that rerun ends without being admitted (cancelled, dead,
 * ended by its job's state). Conditioned on the run still holding the mark, so another rerun's
 * stays. An admission also drops a mark whose run it reads ended, for an ending that could not
 * get here (a crash, a cancel).
 */
export const releaseRerunMark = (engine: Engine, jobId: string, runId: string) =>
  releaseHeld(engine, "rerun mark release", jobId, runId, "rerunWaiting");

/** Removes the job's `attribute` while `runId` holds it (a later holder keeps its own). */
async function releaseHeld(
  engine: Engine,
  operation: string,
  jobId: string,
  runId: string,
  attribute: "bufferedRunId" | "rerunWaiting",
): Promise<void> {
  // The job item is also written by claims' transactions: a conflict is waited out.
  await conditionalWrite(() =>
    retryOnContention(engine, operation, () =>
      engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: jobKey(jobId),
          ConditionExpression: `${attribute} = :runId`,
          UpdateExpression: `SET activeRevision = activeRevision + :one REMOVE ${attribute}`,
          ExpressionAttributeValues: { ":runId": runId, ":one": 1 },
        }),
      ),
    ),
  );
}
