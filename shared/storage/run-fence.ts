import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { FenceLostError, RunCancelledError } from "../errors.js";
import type { Run, RunStatus } from "../model.js";
import {
  failedConditionItem,
  isConditionalCheckFailed,
  sentMoreThanOnce,
} from "./dynamo-errors.js";
import { runKeyOf } from "./run-reads.js";

/**
 * The condition of every write a worker makes to a run it started: the run is
 * still RUNNING under the start this worker made (its fence, worker id and
 * start instant), and nobody asked to cancel it. Once another worker has
 * started it again (the lease lapsed), the fence is higher and the write fails;
 * once a cancel is requested, every write but the CANCELLED ending
 * (`FENCE_HELD_CANCELLING`) fails, so a handler that ignored its signal cannot
 * record success, a failure or a next attempt. The worker id and start instant
 * are there for a table restored from a backup: the run goes back to a lower
 * fence while this worker still runs it, and the next start takes this
 * worker's fence again (docs/deploy.md, "Restoring from a backup").
 */
const START_HELD = "fence = :fence AND workerId = :workerId AND startedAt = :startedAt";
const FENCE_HELD = `${START_HELD} AND #status = :running AND attribute_not_exists(cancelRequestedAt)`;

/** The worker's CANCELLED ending of a run whose cancel was requested: the start alone. */
const FENCE_HELD_CANCELLING = `${START_HELD} AND #status = :running`;

/**
 * A start the worker has not written yet (`takeRun`): it read the run QUEUED and runs it as
 * started under the next fence, and its first write to the run (the ending of a run that ends
 * quickly, else the first heartbeat, a wait or a park) writes the start with it, so a run that
 * ends quickly is written once. Until then the run is QUEUED to everyone else.
 */
interface UnwrittenStart {
  /** The run's fence as read: the start takes it one higher. */
  readonly fromFence: number;
  /**
   * The run's job version as read: a claim that queues the occurrence again after an edit puts a
   * new run item under the same key, at a later version, which this start must not write over.
   */
  readonly jobVersion: number;
  /** The latest the start may be written: before the reaper's deadline for the run, which it would re-send. */
  readonly writeBy: Date;
  /** Set once a write of the run carried the start: later writes are fenced as any start's. */
  written: boolean;
}

/** A run as its worker holds it: started, or read to start with the start still to write. */
export type HeldRun = Run & { readonly unwrittenStart?: UnwrittenStart };

/** The run is as the worker read it to start: QUEUED under that fence and job version, no cancel asked. */
const START_UNWRITTEN =
  "fence = :fromFence AND #status = :queued AND jobVersion = :readVersion AND attribute_not_exists(cancelRequestedAt)";

/** What a fenced write of `run` is conditioned on, and what it sets besides its own fields. */
interface FencedWrite {
  readonly condition: string;
  readonly names: Record<string, string>;
  readonly values: Record<string, unknown>;
  /** `SET` clauses the write adds: the start's, when it is still unwritten; else none. */
  readonly startSets: readonly string[];
  /** Call once the write succeeded: the start it carried is written. */
  readonly written: () => void;
}

/**
 * The condition of a worker's write to a run it holds, and the start it carries when the start is
 * still unwritten. `cancelling` is the CANCELLED ending of a requested cancel
 * (`FENCE_HELD_CANCELLING`); a run with an unwritten start has no cancel request (a cancel of a
 * QUEUED run ends it at once, and the condition then fails).
 */
export function fencedWrite(run: HeldRun, options: { cancelling?: boolean } = {}): FencedWrite {
  const start = run.unwrittenStart;
  if (start === undefined || start.written)
    return {
      condition: options.cancelling ? FENCE_HELD_CANCELLING : FENCE_HELD,
      names: { "#status": "status" },
      values: {
        ":fence": run.fence,
        ":workerId": run.workerId,
        ":startedAt": run.startedAt,
        ":running": "RUNNING",
      },
      startSets: [],
      written: () => undefined,
    };
  return {
    condition: START_UNWRITTEN,
    names: { "#status": "status" },
    values: {
      ":fromFence": start.fromFence,
      ":queued": "QUEUED",
      ":readVersion": start.jobVersion,
      ":fence": run.fence,
      ":workerId": run.workerId,
      ":startedAt": run.startedAt,
    },
    startSets: ["fence = :fence", "workerId = :workerId", "startedAt = :startedAt"],
    written: () => {
      start.written = true;
    },
  };
}

/**
 * Whether a write of `run` that failed on its unwritten start's condition failed because an
 * earlier write of this worker carried the start after all (it applied, but its answer was lost:
 * a timeout, a dropped connection): the run stands RUNNING under this start's fence, worker and
 * `startedAt`. The start is then marked written, and the write is to be made again under the
 * fence alone.
 */
export function ownStartWritten(run: HeldRun, old: Record<string, unknown> | null): boolean {
  const start = run.unwrittenStart;
  if (start === undefined || start.written || old === null) return false;
  const ours =
    old.status === "RUNNING" &&
    old.fence === run.fence &&
    old.workerId === run.workerId &&
    old.startedAt === run.startedAt;
  if (ours) start.written = true;
  return ours;
}

/**
 * Whether a run's ending that failed its condition was this very write, applied before: the SDK
 * sends a write again when its answer is lost (a dropped connection, a 500 after DynamoDB applied
 * it), and the run then stands ended as this write ends it, under its start at its instant. The
 * job's side of the ending is still to write; taken for another worker's, it would never be made
 * (the message is acknowledged), and a one-off would stay ACTIVE with nothing to run. The start's
 * worker and instant, which an ending keeps, tell it from another start's ending under the same
 * fence (after a restore from a backup) made the same way in the same millisecond.
 */
export function ownEndingWritten(
  run: HeldRun,
  old: Record<string, unknown> | null,
  status: RunStatus,
  finishedAt: string,
): boolean {
  return (
    old !== null &&
    old.fence === run.fence &&
    old.workerId === run.workerId &&
    old.startedAt === run.startedAt &&
    old.status === status &&
    old.finishedAt === finishedAt
  );
}

/**
 * Whether a worker's refused write found its run RUNNING under the worker's own fence, started by
 * another: after a table restored from a backup, whose next start took this worker's fence again,
 * or beside a duplicate delivery of the same first start. What the worker took under the run and
 * that fence alone (its tenant's concurrent-runs slot) is then the other start's to free.
 */
export function lostToStartAtFence(error: unknown, run: Pick<Run, "fence">): boolean {
  if (!(error instanceof FenceLostError)) return false;
  const found = error.context.found;
  return found !== undefined && found.status === "RUNNING" && found.fence === run.fence;
}

/** The error for a write whose `FENCE_HELD` condition failed, with the run as it found it. */
function fenceLost(
  run: Pick<Run, "runId" | "fence">,
  old: Record<string, unknown> | null,
  cause: unknown,
): FenceLostError {
  const found =
    old !== null && typeof old.status === "string" && typeof old.fence === "number"
      ? { status: old.status, fence: old.fence }
      : undefined;
  return new FenceLostError(`run ${run.runId}`, run.fence, { cause }, found);
}

/**
 * What a failed `FENCE_HELD` means, from the run as it stood (the write asked
 * for it with ReturnValuesOnConditionCheckFailure: ALL_OLD, so no read): still
 * ours but with a cancel requested → `RunCancelledError`; anything else → `FenceLostError`.
 */
export function fenceFailure(
  run: Pick<HeldRun, "runId" | "fence" | "workerId" | "startedAt" | "unwrittenStart">,
  old: Record<string, unknown> | null,
  cause: unknown,
): FenceLostError | RunCancelledError {
  // A start never written holds nothing to cancel: whoever holds the run under this fence is another worker.
  const held = run.unwrittenStart === undefined || run.unwrittenStart.written;
  if (
    held &&
    old !== null &&
    old.fence === run.fence &&
    old.workerId === run.workerId &&
    old.startedAt === run.startedAt &&
    old.status === "RUNNING" &&
    typeof old.cancelRequestedAt === "string"
  ) {
    const by = typeof old.cancelledBy === "string" ? old.cancelledBy : "api";
    return new RunCancelledError(run.runId, by, old.cancelRequestedAt, { cause });
  }
  return fenceLost(run, old, cause);
}

/**
 * One update of a run conditioned on `FENCE_HELD` (or, while its start is unwritten, on the run
 * being as read, and writing the start with it); throws FenceLostError once another worker has
 * taken the run over, RunCancelledError once a cancel of it was requested.
 */
export async function fencedRunUpdate(
  engine: Engine,
  run: HeldRun,
  expression: {
    /** The `SET` clauses, comma-separated. */
    readonly set: string;
    /** The `REMOVE` clause's attributes, if any. */
    readonly remove?: string;
    readonly values: Record<string, unknown>;
    /**
     * Whether the run as a failed condition found it is as this write leaves it: then, for a
     * request the SDK sent more than once, the failure is this write's own earlier attempt,
     * applied with its answer lost, and the write counts as made. Absent: a write the condition
     * still lets through once applied (a heartbeat) needs none.
     */
    readonly applied?: (old: Record<string, unknown>) => boolean;
  },
): Promise<void> {
  const held = fencedWrite(run);
  const set = [expression.set, ...held.startSets].join(", ");
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.runs,
        Key: runKeyOf(run),
        ConditionExpression: held.condition,
        UpdateExpression: `SET ${set}${expression.remove ? ` REMOVE ${expression.remove}` : ""}`,
        ExpressionAttributeNames: held.names,
        ExpressionAttributeValues: { ...expression.values, ...held.values },
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const old = failedConditionItem(error);
    if (ownStartWritten(run, old)) return fencedRunUpdate(engine, run, expression);
    // Under this start (its worker and instant, which a requeue or park keeps), not only its
    // fence: another start under the same fence (a restored table) may have written the same.
    const ownWrite =
      old !== null &&
      old.fence === run.fence &&
      old.workerId === run.workerId &&
      old.startedAt === run.startedAt &&
      expression.applied !== undefined &&
      sentMoreThanOnce(error) &&
      expression.applied(old);
    if (!ownWrite) throw fenceFailure(run, old, error);
  }
  held.written();
}
