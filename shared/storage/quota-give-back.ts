import { GetCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import {
  failedConditionItem,
  isConditionalCheckFailed,
  retryOnContention,
  sentMoreThanOnce,
} from "./dynamo-errors.js";
import { decodeUsage, quotaPk, USAGE_SK, type UsageReservation } from "./tenant-quotas.js";

/**
 * The give-back of a tenant's quota usage (`QUOTA#<tenantId>`/`USAGE`, see tenant-quotas.ts): a
 * create's or an edit's reserved share taken off again once its write was refused.
 */

/**
 * No recount has replaced the usage since the reservation: the share is still in it. (A recount
 * counted the tenant's jobs without the refused one, so taking the share off what it wrote
 * would count less than the jobs there are.)
 */
const SAME_RECOUNT = "attribute_exists(pk) AND recount = :recount";
const NO_RECOUNT_YET = "attribute_exists(pk) AND attribute_not_exists(recount)";

/** Reads of the usage a give-back makes while other reservations keep changing it. */
const GIVE_BACK_ATTEMPTS = 8;

/**
 * Takes a reservation whose write was refused off the tenant's usage, unless a
 * recount (or a dropped usage) has replaced the usage since it was added: that
 * count left the share out already. False when it did not take it off.
 *
 * The usage is read and set to what it was less the share, conditioned on it being unchanged:
 * an `ADD` of the negative share, sent again by the SDK after its answer was lost (a dropped
 * connection, a 500 after DynamoDB applied it), would take the share off twice, and the tenant
 * would then be let one job (or its runs a minute) past its quota until a recount. Sent again,
 * this write fails on its own result instead, which it recognises; a reservation or give-back
 * that came between is read again.
 */
export async function giveBackUsage(
  engine: Engine,
  reservation: UsageReservation,
): Promise<boolean> {
  const { tenantId, added, recount } = reservation;
  const key = { pk: quotaPk(tenantId), sk: USAGE_SK };
  for (let attempt = 0; attempt < GIVE_BACK_ATTEMPTS; attempt++) {
    const read = await engine.doc.send(
      new GetCommand({ TableName: engine.tables.jobs, Key: key, ConsistentRead: true }),
    );
    const item = read.Item;
    if (item === undefined || recountOf(item) !== recount) return false;
    const seen = decodeUsage(item);
    const after = {
      activeJobs: seen.activeJobs - added.activeJobs,
      runsPerMinute: seen.runsPerMinute - added.runsPerMinute,
    };
    try {
      await retryOnContention(engine, "quota-usage", () =>
        engine.doc.send(
          new UpdateCommand({
            TableName: engine.tables.jobs,
            Key: key,
            ConditionExpression: `${recount === null ? NO_RECOUNT_YET : SAME_RECOUNT} AND ${USAGE_AS_SEEN}`,
            UpdateExpression: "SET activeJobs = :afterJobs, runsPerMinute = :afterRate",
            ExpressionAttributeValues: {
              ":seenJobs": seen.activeJobs,
              ":seenRate": seen.runsPerMinute,
              ":afterJobs": after.activeJobs,
              ":afterRate": after.runsPerMinute,
              ...(recount === null ? {} : { ":recount": recount }),
            },
            ReturnValuesOnConditionCheckFailure: "ALL_OLD",
          }),
        ),
      );
      return true;
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
      const old = failedConditionItem(error);
      const left = old === null ? null : decodeUsage(old);
      const own =
        sentMoreThanOnce(error) &&
        old !== null &&
        recountOf(old) === recount &&
        left?.activeJobs === after.activeJobs &&
        left.runsPerMinute === after.runsPerMinute;
      if (own) return true;
    }
  }
  // The usage kept changing: the share stays, an upper bound the next recount corrects.
  return false;
}

/** The recount token a usage item carries, null before its first recount. */
const recountOf = (item: Record<string, unknown>) =>
  typeof item.recount === "string" ? item.recount : null;

/** The usage is as the give-back read it (reservations and recounts write both counters). */
const USAGE_AS_SEEN = "activeJobs = :seenJobs AND runsPerMinute = :seenRate";
