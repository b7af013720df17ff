import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { conditionalWrite, retryOnContention } from "./dynamo-errors.js";
import { quotaPk, USAGE_SK, type UsageReservation } from "./tenant-quotas.js";

/**
 * The give-back of a tenant's quota usage (`QUOTA#<tenantId>`/`USAGE`, see tenant-quotas.ts): a
 * create's or an edit's reserved share taken off again once its write was refused, or a cancelled
 * or deleted job's share (shared/quotas/ended-share.ts).
 */

/**
 * No recount has replaced the usage since the reservation: the share is still in it. (A recount
 * counted the tenant's jobs without the refused one, so taking the share off what it wrote
 * would count less than the jobs there are.)
 */
const SAME_RECOUNT = "attribute_exists(pk) AND recount = :recount";
const NO_RECOUNT_YET = "attribute_exists(pk) AND attribute_not_exists(recount)";

/**
 * Takes a reservation's share off the tenant's usage, unless a recount (or a dropped usage) has
 * replaced the usage since it was added: that count left the share out already. False when it did
 * not take it off.
 *
 * One `ADD` of the negative share, conditioned on the recount token and on each counter holding
 * the share at least (a counter a recount left below the share, having missed a job then being
 * written, stays as it is rather than go below zero): however many other reservations and
 * give-backs come at once, none of them makes it fail, and it reads nothing. An `ADD` sent again
 * would take the share off twice, and the tenant would then be let one job (or its runs a minute)
 * past its quota until a recount; so the SDK sends it again only after DynamoDB refused the send
 * before (a 4xx: throttled, nothing applied). After a send that may have been applied (a 5xx, a
 * timeout, a dropped connection) it is not sent again and the give-back throws: taken off once or
 * not at all, the usage stays an upper bound.
 */
export async function giveBackUsage(
  engine: Engine,
  reservation: UsageReservation,
): Promise<boolean> {
  const { tenantId, added, recount } = reservation;
  const counters = (["activeJobs", "runsPerMinute"] as const).filter((c) => added[c] > 0);
  if (counters.length === 0) return true;
  const sends = sentAgainOnlyAfterRefusals();
  return conditionalWrite(() =>
    retryOnContention(engine, "quota-usage", () =>
      engine.doc.send(
        sends.guard(
          new UpdateCommand({
            TableName: engine.tables.jobs,
            Key: { pk: quotaPk(tenantId), sk: USAGE_SK },
            ConditionExpression: [
              recount === null ? NO_RECOUNT_YET : SAME_RECOUNT,
              ...counters.map((c) => `${c} >= :${c}`),
            ].join(" AND "),
            // `changes`: a recount in parts tells this give-back from a reservation's undoing it.
            UpdateExpression: `ADD ${counters.map((c) => `${c} :less_${c}`).join(", ")}, changes :one`,
            ExpressionAttributeValues: {
              ":one": 1,
              ...Object.fromEntries(counters.map((c) => [`:${c}`, added[c]])),
              ...Object.fromEntries(counters.map((c) => [`:less_${c}`, -added[c]])),
              ...(recount === null ? {} : { ":recount": recount }),
            },
          }),
        ),
      ),
    ),
  );
}

/** What the SDK meets instead of a give-back's resend once a send may have been applied. */
class GiveBackMaybeAppliedError extends Error {
  override readonly name = "GiveBackMaybeApplied";
  constructor() {
    super(
      "a send of the quota give-back may have been applied, its answer lost: not sent again, the share taken off once or kept",
    );
  }
}

/**
 * The sends of one give-back (the SDK's retries and `retryOnContention`'s, each command guarded
 * with `guard`): one goes out only while every send before it was refused by DynamoDB with a 4xx,
 * which applies nothing. The guard sits inside the SDK's retry loop, so it sees each send; a send
 * whose answer was lost on its way back, as seen there or outside it, counts as maybe applied.
 */
function sentAgainOnlyAfterRefusals() {
  let maybeApplied = false;
  const refused = (error: unknown) => {
    const status = (error as { $metadata?: { httpStatusCode?: unknown } } | null)?.$metadata
      ?.httpStatusCode;
    return typeof status === "number" && status >= 400 && status < 500;
  };
  return {
    guard(command: UpdateCommand): UpdateCommand {
      command.middlewareStack.add(
        (next) => async (args) => {
          if (maybeApplied) throw new GiveBackMaybeAppliedError();
          maybeApplied = true;
          try {
            return await next(args);
          } catch (error) {
            if (refused(error)) maybeApplied = false;
            throw error;
          }
        },
        {
          step: "finalizeRequest",
          priority: "low",
          name: "giveBackSentAgainOnlyAfterRefusals",
          // The document client resolves its command's stack twice (its own and its inner command's).
          override: true,
        },
      );
      return command;
    },
  };
}
