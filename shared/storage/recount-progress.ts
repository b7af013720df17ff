import { DeleteCommand, GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { conditionalWrite } from "./dynamo-errors.js";
import { epochSeconds } from "./retention.js";
import { decodeSeenUsage, type SeenUsage } from "./seen-usage.js";
import { type QuotaUsage, quotaPk } from "./tenant-quotas.js";

/**
 * A recount's progress older than this is started afresh (jobs it counted long ago may have ended
 * since, counted still: an upper bound, which the next recount corrects), and the item expires
 * (the jobs table's TTL) once a tenant stops sending the requests that would go on with it.
 */
export const PROGRESS_KEPT_MS = 60 * 60_000;

/**
 * How far a recount of a tenant's usage has read (`QUOTA#<tenantId>`/`RECOUNT`): a recount reads
 * every job of the tenant, more than one request can read in its time on a large tenant, so each
 * request reads a bounded part and leaves this for the next to go on from (shared/quotas/recount.ts).
 */
export interface RecountProgress {
  /**
   * The usage the recount will replace, as its first part read it (null: the tenant had none),
   * with its `changes` and recount token: counters alone come back to the same values after a
   * reservation and a give-back of the same share, while a job created and one cancelled between
   * parts (the first on pages already read, the second on pages not yet read) are both left out.
   */
  readonly basis: SeenUsage | null;
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

/** The basis as stored: undefined when unreadable, or an earlier version's (counters alone). */
function basisOf(value: unknown): SeenUsage | null | undefined {
  if (value === null) return null;
  if (usageOf(value) === null || typeof Reflect.get(value as object, "changes") !== "number")
    return undefined;
  return decodeSeenUsage(value as Record<string, unknown>);
}

/** The tenant's `RECOUNT` item as it stands. */
export interface StoredRecount {
  /**
   * Its step, which the next part's write is conditioned on; undefined when there is none, or the
   * item has no numeric step (then the next part's write replaces it).
   */
  readonly step: number | undefined;
  /** Its progress; null when none, or one this version cannot go on from (then started afresh). */
  readonly progress: RecountProgress | null;
}

/** The tenant's recount under way. */
export async function readRecountProgress(
  engine: Engine,
  tenantId: string,
): Promise<StoredRecount> {
  const { Item: item } = await engine.doc.send(
    new GetCommand({
      TableName: engine.tables.jobs,
      Key: progressKey(tenantId),
      ConsistentRead: true,
    }),
  );
  if (item === undefined || typeof item.step !== "number")
    return { step: undefined, progress: null };
  const counted = usageOf(item.counted);
  const basis = basisOf(item.basis);
  const cursor: unknown = item.cursor;
  if (
    counted === null ||
    basis === undefined ||
    typeof cursor !== "object" ||
    cursor === null ||
    typeof item.startedAt !== "string"
  )
    return { step: item.step, progress: null };
  return {
    step: item.step,
    progress: {
      basis,
      startedAt: item.startedAt,
      cursor: cursor as Record<string, unknown>,
      counted,
      step: item.step,
    },
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
  return conditionalWrite(() =>
    engine.doc.send(
      new PutCommand({
        TableName: engine.tables.jobs,
        Item: {
          ...progressKey(tenantId),
          tenantId,
          ...progress,
          expiresAt: epochSeconds(new Date(Date.parse(progress.startedAt) + PROGRESS_KEPT_MS)),
        },
        // No step read: no item, or one whose step this version cannot read (another version's),
        // which is replaced; a first part written meanwhile has a numeric step and is kept.
        ...(previousStep === undefined
          ? {
              ConditionExpression: "attribute_not_exists(pk) OR NOT attribute_type(step, :number)",
              ExpressionAttributeValues: { ":number": "N" },
            }
          : {
              ConditionExpression: "step = :step",
              ExpressionAttributeValues: { ":step": previousStep },
            }),
      }),
    ),
  );
}

/** A finished recount's progress goes (a repeat finds none and starts afresh). */
export async function deleteRecountProgress(engine: Engine, tenantId: string): Promise<void> {
  await engine.doc.send(
    new DeleteCommand({ TableName: engine.tables.jobs, Key: progressKey(tenantId) }),
  );
}
