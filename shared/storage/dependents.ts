import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { conditionalWrite, retryOnContention } from "./dynamo-errors.js";
import { jobKey } from "./items.js";
import type { NamedWrite } from "./transaction.js";

/**
 * The `dependents` string set on an upstream job's item: the jobs whose `after` schedule names
 * it. A dependent's create or edit adds itself in the same transaction as its own write; its
 * cancel, delete or an edit away takes itself out.
 *
 * The `linkRevision` number on a job's item: one more each time a create or edit of a job below it
 * (after it, or after a job after it) links itself in, in that write's transaction. What an edit
 * of a job's schedule adds to the tenant's runsPerMinute counts the jobs below it as it read them
 * (shared/quotas/run-measure.ts); the edit is conditioned on the revision it read, so a job linked
 * in below it meanwhile sends it back to count again.
 */

/**
 * The most jobs one job may have after it. Its `dependents` live on its own item (26 bytes an id),
 * which DynamoDB holds to 400 KB with the job's payload, target and runs; unbounded, the set filled
 * the item, and every later write of the upstream that adds to it (an edit, a run's ending) failed.
 */
export const MAX_DEPENDENTS = 1_000;

/** The name of an upstream's write in a create's or edit's transaction. */
export type UpstreamWriteName = `upstream:${string}`;

const upstreamWriteName = (jobId: string): UpstreamWriteName => `upstream:${jobId}`;

/** The job id an upstream write's name carries. */
export const upstreamOfWriteName = (name: string): string | null =>
  name.startsWith("upstream:") ? name.slice("upstream:".length) : null;

/**
 * Adds `dependentId` to the upstream's dependents and one to its `linkRevision`, conditioned on
 * the upstream existing, belonging to `tenantId` and not being cancelled (a cancel leaves the
 * version as it was), and, when `seenVersion` is given, still being
 * at the version the dependent's check read it at (an edit of it meanwhile could close a cycle the
 * check did not see, or change what the dependent counts towards runsPerMinute), and having fewer
 * than MAX_DEPENDENTS (two links at once cannot both take the last place). A failed condition
 * returns the upstream as it stands, so the caller tells a gone upstream from a changed one (the
 * caller's check, planned again, refuses a full one).
 */
export function linkUpstream(
  engine: Engine,
  upstreamId: string,
  dependentId: string,
  tenantId: string,
  seenVersion?: number,
): NamedWrite<UpstreamWriteName> {
  const values: Record<string, unknown> = {
    ":dependent": new Set([dependentId]),
    ":tenant": tenantId,
    ":one": 1,
    ":maxDependents": MAX_DEPENDENTS,
    ":cancelled": "CANCELLED",
  };
  let condition =
    "attribute_exists(pk) AND tenantId = :tenant AND #status <> :cancelled AND (attribute_not_exists(dependents) OR size(dependents) < :maxDependents)";
  if (seenVersion !== undefined) {
    condition += " AND version = :seenVersion";
    values[":seenVersion"] = seenVersion;
  }
  return {
    name: upstreamWriteName(upstreamId),
    write: {
      Update: {
        TableName: engine.tables.jobs,
        Key: jobKey(upstreamId),
        ConditionExpression: condition,
        UpdateExpression: "ADD dependents :dependent, linkRevision :one",
        ExpressionAttributeNames: { "#status": "status" },
        ExpressionAttributeValues: values,
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      },
    },
  };
}

/**
 * A job further up the chain the dependent's check walked through: unchanged since (see
 * `linkUpstream`), and one more on its `linkRevision`, as the dependent is now below it too.
 */
export function upstreamUnchanged(
  engine: Engine,
  jobId: string,
  seenVersion: number,
): NamedWrite<UpstreamWriteName> {
  return {
    name: upstreamWriteName(jobId),
    write: {
      Update: {
        TableName: engine.tables.jobs,
        Key: jobKey(jobId),
        ConditionExpression: "attribute_exists(pk) AND version = :seenVersion",
        UpdateExpression: "ADD linkRevision :one",
        ExpressionAttributeValues: { ":seenVersion": seenVersion, ":one": 1 },
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      },
    },
  };
}

/**
 * Takes `dependentId` out of the upstream's dependents (in a transaction). With `seenVersion` (an
 * old upstream still above the dependent by another path), it is also held as `upstreamUnchanged`
 * holds a job of the walked chain: at that version, one more on its `linkRevision`.
 */
export function unlinkUpstream(
  engine: Engine,
  upstreamId: string,
  dependentId: string,
  seenVersion?: number,
): NamedWrite<UpstreamWriteName> {
  const held = seenVersion !== undefined;
  return {
    name: upstreamWriteName(upstreamId),
    write: {
      Update: {
        TableName: engine.tables.jobs,
        Key: jobKey(upstreamId),
        ConditionExpression: held
          ? "attribute_exists(pk) AND version = :seenVersion"
          : "attribute_exists(pk)",
        UpdateExpression: held
          ? "DELETE dependents :dependent ADD linkRevision :one"
          : "DELETE dependents :dependent",
        ExpressionAttributeValues: {
          ":dependent": new Set([dependentId]),
          ...(held ? { ":seenVersion": seenVersion, ":one": 1 } : {}),
        },
        ...(held ? { ReturnValuesOnConditionCheckFailure: "ALL_OLD" as const } : {}),
      },
    },
  };
}

/**
 * Takes `dependentId` out of the upstream's dependents on its own (a cancel or delete of the
 * dependent, after its commit). A gone upstream has nothing to take out. Repeating it is harmless.
 */
export async function detachFromUpstream(
  engine: Engine,
  upstreamId: string,
  dependentId: string,
): Promise<void> {
  const { write } = unlinkUpstream(engine, upstreamId, dependentId);
  const update = write.Update;
  if (update === undefined) return;
  await conditionalWrite(() =>
    retryOnContention(engine, "detach-dependent", () => engine.doc.send(new UpdateCommand(update))),
  );
}
