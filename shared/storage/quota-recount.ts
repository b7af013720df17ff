import { randomUUID } from "node:crypto";
import { GetCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { failedConditionItem, isConditionalCheckFailed } from "./dynamo-errors.js";
import { decodeSeenUsage, type SeenUsage } from "./seen-usage.js";
import { decodeUsage, type QuotaUsage, quotaPk, USAGE_SK } from "./tenant-quotas.js";

/**
 * When a tenant's usage (`QUOTA#<tenantId>`/`USAGE`, see tenant-quotas.ts) is recounted: at most
 * once per interval, whoever asks. A recount reads every job of the tenant, so a tenant at its limit
 * that keeps sending creates would otherwise make each refusal cost as much as its jobs.
 */

/**
 * What a request over a quota does: recount (the usage as read before it, and the claim, which the
 * same request passes again to recount again when its recount's write lost to another write), or
 * refuse from it.
 */
export type RecountClaim =
  | { readonly recount: true; readonly seen: SeenUsage | null; readonly claim: string }
  | { readonly recount: false; readonly stored: QuotaUsage };

/**
 * Claims the tenant's next recount: `recountedAt` set to now, unless a recount was claimed (or
 * written) within `intervalMs` of now, either side (a clock behind the one that wrote it counts
 * the same). Claimed, the usage as it stands, which the recount's write is conditioned on; not
 * claimed, the stored usage, an upper bound the request is refused from. A tenant with no usage
 * item yet is always recounted (`seen` null). `held`, a claim this request made, is claimed again
 * whatever the interval while no recount's write has replaced the usage since (the write drops
 * it): its recount found room, but another reservation or give-back changed the usage before its
 * write, so it counts again rather than refuse from the stored usage its own count said was over.
 */
export async function claimRecount(
  engine: Engine,
  tenantId: string,
  now: Date,
  intervalMs: number,
  held?: string,
): Promise<RecountClaim> {
  const claim = held ?? randomUUID();
  try {
    const result = await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.jobs,
        Key: { pk: quotaPk(tenantId), sk: USAGE_SK },
        ConditionExpression:
          "attribute_exists(pk) AND (attribute_not_exists(recountedAt) OR recountedAt <= :staleAt OR recountedAt >= :aheadAt OR recountClaim = :claim)",
        UpdateExpression: "SET recountedAt = :now, recountClaim = :claim",
        ExpressionAttributeValues: {
          ":now": now.toISOString(),
          ":claim": claim,
          ":staleAt": new Date(now.getTime() - intervalMs).toISOString(),
          ":aheadAt": new Date(now.getTime() + intervalMs).toISOString(),
        },
        ReturnValues: "ALL_NEW",
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
      }),
    );
    const seen = result.Attributes ? decodeSeenUsage(result.Attributes) : null;
    return { recount: true, seen, claim };
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const item = failedConditionItem(error);
    return item === null
      ? { recount: true, seen: null, claim }
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
