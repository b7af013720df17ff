import { GetCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { stringifyExact } from "../exact-json.js";
import type { DueEntry, DueKey, EditMark, Job, Run } from "../model.js";
import type { UpstreamWriteName } from "./dependents.js";
import { putOverOlderDueEntry } from "./due-entries.js";
import { decodeDueEntry, encodeDueEntry, encodeTarget } from "./items.js";
import {
  deletePendingDueEntry,
  deleteSetAside,
  type JobChangeWrite,
  runAtStillFree,
  runStillUnderWay,
  stillARetry,
  updateJobFrom,
  writeJobChange,
} from "./job-update.js";
import { completedJobExpiresAt, runsOnAfterEndMs } from "./retention.js";
import type { NamedWrite } from "./transaction.js";

/** The fields of a job an edit may change. */
type EditedFields = Partial<
  Pick<
    Job,
    | "name"
    | "schedule"
    | "payload"
    | "target"
    | "priority"
    | "timeoutSeconds"
    | "policies"
    | "endAt"
    | "maxRuns"
    | "window"
    | "oneOffFrom"
    | "oneOffBelow"
    | "oneOffEra"
    | "oneOffAttempt"
  >
>;

/** The due entry at `key`, read strongly consistent; null when it is gone (claimed). */
export async function readDueEntry(engine: Engine, key: DueKey): Promise<DueEntry | null> {
  const found = await engine.doc.send(
    new GetCommand({ TableName: engine.tables.jobs, Key: key, ConsistentRead: true }),
  );
  return found.Item ? decodeDueEntry(found.Item) : null;
}

/**
 * Writes an edit of `job` as read (`ConcurrentUpdateError` when it has changed
 * since): the changed fields (a payload present in `changes`, even undefined,
 * is written), the version bumped, and the pending occurrence moved to `entry`
 * (the entry is rewritten in place when its key stays: it carries a copy of the
 * schedule and the version). An edit of an `after` schedule moves the job
 * between its upstreams' dependents in the same transaction (`upstreams`; the unlinks it has no
 * room for follow the commit, shared/jobs/dependencies.ts). An edit of the
 * schedule is conditioned on the job's `linkRevision` as read, too (see dependents.ts).
 */
export async function writeEditedJob(
  engine: Engine,
  job: Job,
  changes: EditedFields,
  next: {
    readonly nextRunAt: Date | null;
    readonly entry: DueEntry | null;
    readonly now: Date;
    /** The edited end condition leaves nothing to run: COMPLETED, expiring at its retention. */
    readonly completes?: boolean;
    /** The fire_all catch-up's count after the edit (0 once a new schedule replaces the old). */
    readonly catchUpCount?: number;
    /** Which edit this is (`Job.lastEdit`): a retry of it finds it written. */
    readonly lastEdit?: EditMark;
    /** A retry the edit files beside the job's entry, which the job does not name (`retryLeftByMove`). */
    readonly retryEntry?: DueEntry | null;
    /** The run at the new `runAt` read under way, its occurrence filed at attempt 1 (`runStillUnderWay`). */
    readonly runUnderWay?: Run | undefined;
    /** The one-off's occurrence filed where the edit read no run (`runAtStillFree`). */
    readonly runAtFiled?: { readonly scheduledFor: string; readonly attempt: number } | undefined;
    /** A failure's retry taken back or skipped, the occurrence filed after it (`stillARetry`). */
    readonly skippedRetry?: Run | undefined;
  },
  upstreams: readonly NamedWrite<UpstreamWriteName>[] = [],
): Promise<void> {
  const { payload, ...fields } = changes;
  const { entry } = next;
  const set: Record<string, unknown> = {
    ...Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)),
    ...(fields.target ? { target: encodeTarget(fields.target) } : {}),
    ...("payload" in changes ? { payloadJson: stringifyExact(payload ?? null) } : {}),
    nextRunAt: next.nextRunAt ? next.nextRunAt.toISOString() : null,
    nextDueKey: entry?.key ?? null,
    updatedAt: next.now.toISOString(),
    ...(next.lastEdit ? { lastEdit: next.lastEdit } : {}),
    ...(next.retryEntry ? { retryLeftKey: next.retryEntry.key } : {}),
    ...(next.catchUpCount !== undefined && next.catchUpCount !== (job.catchUpCount ?? 0)
      ? { catchUpCount: next.catchUpCount }
      : {}),
    // The count goes on with the job's pending occurrence (catchUpCountOf reads it for that one).
    ...(next.catchUpCount && next.nextRunAt ? { catchUpOf: next.nextRunAt.toISOString() } : {}),
    ...(next.completes
      ? {
          status: "COMPLETED",
          // Its queued runs still run, and retry, under the edited policies.
          expiresAt: completedJobExpiresAt(
            next.now,
            runsOnAfterEndMs({
              policies: changes.policies ?? job.policies,
              timeoutSeconds: changes.timeoutSeconds ?? job.timeoutSeconds,
              endAt: changes.endAt === undefined ? job.endAt : changes.endAt,
              maxRuns: changes.maxRuns === undefined ? job.maxRuns : changes.maxRuns,
            }),
            engine.settings,
          ),
        }
      : {}),
  };
  const sameKey =
    entry !== null &&
    job.nextDueKey !== null &&
    entry.key.pk === job.nextDueKey.pk &&
    entry.key.sk === job.nextDueKey.sk;
  // A new schedule's share of runsPerMinute counted the jobs below this one as read.
  const writes: JobChangeWrite[] = [
    updateJobFrom(engine, job, set, {
      bumpVersion: true,
      sameLinkRevision: changes.schedule !== undefined,
    }),
  ];
  if (!sameKey) writes.push(...deletePendingDueEntry(engine, job));
  // Rewritten in place, the entry is back in its bucket for the next claim: no longer set aside.
  else if (job.nextDueKey !== null) writes.push(deleteSetAside(engine, job.nextDueKey));
  if (entry) {
    writes.push({
      name: "dueEntry",
      write: sameKey
        ? { Put: { TableName: engine.tables.jobs, Item: encodeDueEntry(entry) } }
        : putOverOlderDueEntry(engine, entry),
    });
  }
  if (next.retryEntry)
    writes.push({
      name: "retryEntry",
      write: { Put: { TableName: engine.tables.jobs, Item: encodeDueEntry(next.retryEntry) } },
    });
  if (next.runUnderWay) writes.push(runStillUnderWay(engine, next.runUnderWay));
  else if (next.runAtFiled)
    writes.push(runAtStillFree(engine, { jobId: job.jobId, ...next.runAtFiled }));
  if (next.skippedRetry) writes.push(stillARetry(engine, next.skippedRetry));
  await writeJobChange(engine, job, [...writes, ...upstreams]);
}
