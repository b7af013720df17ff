import { DeleteCommand, GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { isConditionalCheckFailed } from "./dynamo-errors.js";
import { type QuotaUsage, quotaPk } from "./tenant-quotas.js";

/**
 * How far a recount of a tenant's usage has read (`QUOTA#<tenantId>`/`RECOUNT`): a recount reads
 * every job of the tenant, more than one request can read in its time on a large tenant, so each
 * request reads a bounded part and leaves this for the next to go on from (shared/quotas/recount.ts).
 */
export interface RecountProgress {
  /** The usage the recount will replace, as its first part read it (null: the tenant had none). */
  readonly basis: QuotaUsage | null;
  /** When its first part started. */
  readonly startedAt: string;
  /** Where the tenant index's next page starts. */
  readonly cursor: Record<string, unknown>;
  /** What the pages before the cursor counted. */
  readonly counted: QuotaUsage;
  /** One more at each part: the write of the next part is conditioned on it. */
  readonly step: number;
}

const PROGRESS_SK = "RECOUNT";

const progressKey = (tenantId: string) => ({ pk: quotaPk(tenantId), sk: PROGRESS_SK });

function usageOf(value: unknown): QuotaUsage | null {
  if (typeof value !== "object" || value === null) return null;
  const activeJobs: unknown = Reflect.get(value, "activeJobs");
  const runsPerMinute: unknown = Reflect.get(value, "runsPerMinute");
  return typeof activeJobs === "number" && typeof runsPerMinute === "number"
    ? { activeJobs, runsPerMinute }
    : null;
}

/** The tenant's recount under way, or null (none, or an item this version cannot read). */
export async function readRecountProgress(
  engine: Engine,
  tenantId: string,
): Promise<RecountProgress | null> {
  const { Item: item } = await engine.doc.send(
    new GetCommand({
      TableName: engine.tables.jobs,
      Key: progressKey(tenantId),
      ConsistentRead: true,
    }),
  );
  const counted = usageOf(item?.counted);
  const cursor: unknown = item?.cursor;
  if (
    item === undefined ||
    counted === null ||
    typeof cursor !== "object" ||
    cursor === null ||
    typeof item.step !== "number" ||
    typeof item.startedAt !== "string"
  )
    return null;
  return {
    basis: usageOf(item.basis),
    startedAt: item.startedAt,
    cursor: cursor as Record<string, unknown>,
    counted,
    step: item.step,
  };
}

/**
 * Records a recount's part, conditioned on the progress being still as this part read it
 * (`previousStep`, undefined when there was none): two requests going on from the same place at
 * once keep one part. False when another part was written meanwhile.
 */
export async function writeRecountProgress(
  engine: Engine,
  tenantId: string,
  progress: RecountProgress,
  previousStep: number | undefined,
): Promise<boolean> {
  try {
    await engine.doc.send(
      new PutCommand({
        TableName: engine.tables.jobs,
        Item: { ...progressKey(tenantId), tenantId, ...progress },
        ...(previousStep === undefined
          ? { ConditionExpression: "attribute_not_exists(pk)" }
          : {
              ConditionExpression: "step = :step",
              ExpressionAttributeValues: { ":step": previousStep },
            }),
      }),
    );
    return true;
  } catch (error) {
    if (isConditionalCheckFailed(error)) return false;
    throw error;
  }
}

/** A finished recount's progress goes (a repeat finds none and starts afresh). */
export async function deleteRecountProgress(engine: Engine, tenantId: string): Promise<void> {
  await engine.doc.send(
    new DeleteCommand({ TableName: engine.tables.jobs, Key: progressKey(tenantId) }),
  );
}
