import { GetCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { failedConditionItem, isConditionalCheckFailed } from "./dynamo-errors.js";
import { decodeUsage, type QuotaUsage, quotaPk, USAGE_SK } from "./tenant-quotas.js";

/**
 * When a tenant's usage (`QUOTA#<tenantId>`/`USAGE`, see tenant-quotas.ts) is recounted: at most
 * once per interval, whoever asks. A recount reads every job of the tenant, so a tenant at its limit
 * that keeps sending creates would otherwise make each refusal cost as much as its jobs.
 */

/** What a request over a quota does: recount (the usage as read before it), or refuse from it. */
export type RecountClaim =
  | { readonly recount: true; readonly seen: QuotaUsage | null }
  | { readonly recount: false; readonly stored: QuotaUsage };

/**
 * Claims the tenant's next recount: `recountedAt` set to now, unless a recount was claimed (or
 * written) within `intervalMs` of now, either side (a clock behind the one that wrote it counts
 * the same). Claimed, the usage as it stands, which the recount's write is conditioned on; not
 * claimed, the stored usage, an upper bound the request is refused from. A tenant with no usage
 * item yet is always recounted (`seen` null).
 */
export async function claimRecount(
  engine: Engine,
  tenantId: string,
  now: Date,
  intervalMs: number,
): Promise<RecountClaim> {
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: { pk: quotaPk(tenantId), sk: USAGE_SK },
        ConditionExpression:
          "attribute_exists(pk) AND (attribute_not_exists(recountedAt) OR recountedAt <= :staleAt OR recountedAt >= :aheadAt)",
        UpdateExpression: "SET recountedAt = :now",
        ExpressionAttributeValues: {
          ":now": now.toISOString(),
          ":staleAt": new Date(now.getTime() - intervalMs).toISOString(),
          ":aheadAt": new Date(now.getTime() + intervalMs).toISOString(),
        },
        ReturnValues: "ALL_NEW",
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
    return { recount: true, seen: result.Attributes ? decodeUsage(result.Attributes) : null };
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const item = failedConditionItem(error);
    return item === null
      ? { recount: true, seen: null }
      : { recount: false, stored: decodeUsage(item) };
  }
}

/**
 * The usage's recount token as it stands (consistent): what an ended job's give-back is
 * conditioned on (quota-give-back.ts). Undefined when the tenant has no usage item.
 */
export async function readRecountToken(
  engine: Engine,
  tenantId: string,
): Promise<string | null | undefined> {
  const result = await engine.doc.send(
    new GetCommand({
      TableName: engine.tables.jobs,
      Key: { pk: quotaPk(tenantId), sk: USAGE_SK },
      ConsistentRead: true,
    }),
  );
  if (result.Item === undefined) return undefined;
  const recount: unknown = result.Item.recount;
  return typeof recount === "string" ? recount : null;
}
