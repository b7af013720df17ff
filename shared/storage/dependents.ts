import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { isConditionalCheckFailed, retryOnContention } from "./dynamo-errors.js";
import { jobKey } from "./items.js";
import type { NamedWrite } from "./transaction.js";

/**
 * The `dependents` string set on an upstream job's item: the jobs whose `after` schedule names
 * it. A dependent's create or edit adds itself in the same transaction as its own write; its
 * cancel, delete or an edit away takes itself out.
 */

/** The name of an upstream's write in a create's or edit's transaction. */
export type UpstreamWriteName = `upstream:${string}`;

const upstreamWriteName = (jobId: string): UpstreamWriteName => `upstream:${jobId}`;

/** The job id an upstream write's name carries. */
export const upstreamOfWriteName = (name: string): string | null =>
  name.startsWith("upstream:") ? name.slice("upstream:".length) : null;

/**
 * Adds `dependentId` to the upstream's dependents, conditioned on the upstream existing and
 * belonging to `tenantId`, and, when `seenVersion` is given, still being at the version a cycle
 * check read it at (an edit of it meanwhile could close a cycle the check did not see).
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
  };
  let condition = "attribute_exists(pk) AND tenantId = :tenant";
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
        UpdateExpression: "ADD dependents :dependent",
        ExpressionAttributeValues: values,
      },
    },
  };
}

/** A job the cycle check walked through, unchanged since (see `linkUpstream`). */
export function upstreamUnchanged(
  engine: Engine,
  jobId: string,
  seenVersion: number,
): NamedWrite<UpstreamWriteName> {
  return {
    name: upstreamWriteName(jobId),
    write: {
      ConditionCheck: {
        TableName: engine.tables.jobs,
        Key: jobKey(jobId),
        ConditionExpression: "attribute_exists(pk) AND version = :seenVersion",
        ExpressionAttributeValues: { ":seenVersion": seenVersion },
      },
    },
  };
}

/** Takes `dependentId` out of the upstream's dependents (in a transaction). */
export function unlinkUpstream(
  engine: Engine,
  upstreamId: string,
  dependentId: string,
): NamedWrite<UpstreamWriteName> {
  return {
    name: upstreamWriteName(upstreamId),
    write: {
      Update: {
        TableName: engine.tables.jobs,
        Key: jobKey(upstreamId),
        ConditionExpression: "attribute_exists(pk)",
        UpdateExpression: "DELETE dependents :dependent",
        ExpressionAttributeValues: { ":dependent": new Set([dependentId]) },
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
  try {
    await retryOnContention(engine, "detach-dependent", () =>
      engine.doc.send(new UpdateCommand(update)),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
  }
}
