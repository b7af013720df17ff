import { randomUUID } from "node:crypto";
import {
  DeleteCommand,
  GetCommand,
  PutCommand,
  QueryCommand,
  UpdateCommand,
} from "@aws-sdk/lib-dynamodb";
import type { TenantQuotas } from "../config.js";
import type { Engine } from "../engine.js";
import { conditionalWrite, isConditionalCheckFailed, retryOnContention } from "./dynamo-errors.js";
import { type SeenUsage, stillSeen } from "./seen-usage.js";

/**
 * A tenant's quota items, one partition of the jobs table (`QUOTA#<tenantId>`):
 *
 * - `LIMITS`: the tenant's override, the quotas it sets (the others are the deployment's defaults);
 * - `USAGE`: what its jobs take of `activeJobs` and `runsPerMinute`, an upper bound that creates
 *   and edits add to before they write (and take back when the write is refused), and a recount
 *   corrects; each recount marks it with a fresh `recount` token (shared/quotas/usage.ts);
 * - `SLOT#<n>`: the concurrent-runs slots, one per running run, each under the run's lease, and
 *   expiring a day after it (run-slots.ts).
 *
 * One consistent Query of the partition reads the override and the slots, so the worker's check
 * at start is one read.
 */
type Item = Record<string, unknown>;

export type QuotaOverride = Partial<TenantQuotas>;

export interface QuotaUsage {
  readonly activeJobs: number;
  readonly runsPerMinute: number;
}

/** What one reservation added to a tenant's usage, and the recount it was added on top of. */
export interface UsageReservation {
  readonly tenantId: string;
  readonly added: QuotaUsage;
  /** The usage's `recount` token when the share was added; null on an item no recount marked. */
  readonly recount: string | null;
}

export interface RunSlot {
  readonly tenantId: string;
  readonly index: number;
  readonly runId: string;
  /** The fence of the start that holds it: a later start of the same run takes it over. */
  readonly fence: number;
  readonly leaseUntil: string;
}

/** A slot as stored, with the takes of it that are recorded (run-slots.ts). */
interface StoredSlot extends RunSlot {
  /** The takes that hold it; null on a slot an earlier version took, which records none. */
  readonly takers: ReadonlySet<string> | null;
}

interface QuotaPartition {
  readonly override: QuotaOverride;
  readonly slots: readonly StoredSlot[];
}

const LIMITS_SK = "LIMITS";
export const USAGE_SK = "USAGE";
const SLOT_PREFIX = "SLOT#";

export const quotaPk = (tenantId: string) => `QUOTA#${tenantId}`;
export const slotSk = (index: number) => `${SLOT_PREFIX}${String(index).padStart(4, "0")}`;

const QUOTA_FIELDS = [
  "activeJobs",
  "runsPerMinute",
  "concurrentRuns",
  "requestsPerSecond",
  "maxPriority",
] as const satisfies readonly (keyof TenantQuotas)[];

function decodeOverride(item: Item | undefined): QuotaOverride {
  if (item === undefined) return {};
  const out: Record<string, unknown> = {};
  for (const field of QUOTA_FIELDS) if (item[field] !== undefined) out[field] = item[field];
  return out as QuotaOverride;
}

/** The override and the slots (and the usage, unread), consistently in one Query. */
export async function readQuotaPartition(
  engine: Engine,
  tenantId: string,
): Promise<QuotaPartition> {
  const items: Item[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await engine.doc.send(
      new QueryCommand({
        TableName: engine.tables.jobs,
        KeyConditionExpression: "pk = :pk",
        ExpressionAttributeValues: { ":pk": quotaPk(tenantId) },
        ConsistentRead: true,
        ExclusiveStartKey: start,
      }),
    );
    items.push(...(page.Items ?? []));
    start = page.LastEvaluatedKey;
  } while (start !== undefined);
  const bySk = (sk: string) => items.find((i) => i.sk === sk);
  return {
    override: decodeOverride(bySk(LIMITS_SK)),
    slots: items
      .filter((i) => String(i.sk).startsWith(SLOT_PREFIX))
      .map((i) => ({
        tenantId,
        index: Number(String(i.sk).slice(SLOT_PREFIX.length)),
        runId: String(i.runId),
        fence: Number(i.fence),
        leaseUntil: String(i.leaseUntil),
        takers: i.takers instanceof Set ? new Set([...i.takers].map(String)) : null,
      })),
  };
}

/**
 * The tenant's override alone, read consistently: every reader (a reservation, the override
 * cache) must see a change made just before.
 */
export async function readQuotaOverride(engine: Engine, tenantId: string): Promise<QuotaOverride> {
  const result = await engine.doc.send(
    new GetCommand({
      TableName: engine.tables.jobs,
      Key: { pk: quotaPk(tenantId), sk: LIMITS_SK },
      ConsistentRead: true,
    }),
  );
  return decodeOverride(result.Item);
}

/** The tenant's reserved usage as it stands (consistent), or null before its first reservation. */
export async function readQuotaUsage(engine: Engine, tenantId: string): Promise<QuotaUsage | null> {
  const result = await engine.doc.send(
    new GetCommand({
      TableName: engine.tables.jobs,
      Key: { pk: quotaPk(tenantId), sk: USAGE_SK },
      ConsistentRead: true,
    }),
  );
  return result.Item === undefined ? null : decodeUsage(result.Item);
}

export function decodeUsage(item: Item): QuotaUsage {
  return {
    activeJobs: Number(item.activeJobs ?? 0),
    runsPerMinute: Number(item.runsPerMinute ?? 0),
  };
}

/** Replaces the tenant's override: quotas it does not set fall back to the defaults. */
export async function writeQuotaOverride(
  engine: Engine,
  tenantId: string,
  override: QuotaOverride,
  now: Date,
): Promise<void> {
  await engine.doc.send(
    new PutCommand({
      TableName: engine.tables.jobs,
      Item: {
        pk: quotaPk(tenantId),
        sk: LIMITS_SK,
        tenantId,
        ...override,
        updatedAt: now.toISOString(),
      },
    }),
  );
}

/**
 * Drops the tenant's usage, so its next reservation recounts its jobs: while
 * a quota had no limit, its creates and edits reserved nothing.
 */
export async function forgetQuotaUsage(engine: Engine, tenantId: string): Promise<void> {
  await engine.doc.send(
    new DeleteCommand({
      TableName: engine.tables.jobs,
      Key: { pk: quotaPk(tenantId), sk: USAGE_SK },
    }),
  );
}

// ---------------------------------------------------------------- usage

/**
 * Each addition stays within its limit; a quota it adds nothing to is not checked (a tenant over
 * a limit lowered below its usage keeps what it has and may still add to the other quota). A
 * missing item is not zero: while the tenant had no limit its creates reserved nothing, so its
 * first reservation follows a recount.
 */
const withinLimits = (add: QuotaUsage): string =>
  [
    "attribute_exists(pk)",
    ...(add.activeJobs > 0
      ? ["(attribute_not_exists(activeJobs) OR activeJobs <= :jobsRoom)"]
      : []),
    ...(add.runsPerMinute > 0
      ? ["(attribute_not_exists(runsPerMinute) OR runsPerMinute <= :rateRoom)"]
      : []),
  ].join(" AND ");

/**
 * Adds a create's or an edit's share to the tenant's usage when both stay
 * within `limits`: the reservation, to give back should its write be refused.
 * Null when either would go over, or the tenant has no usage item: the caller
 * recounts.
 */
export async function reserveUsage(
  engine: Engine,
  tenantId: string,
  add: QuotaUsage,
  limits: QuotaUsage,
): Promise<UsageReservation | null> {
  try {
    const result = await retryOnContention(engine, "quota-usage", () =>
      engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.jobs,
          Key: { pk: quotaPk(tenantId), sk: USAGE_SK },
          ConditionExpression: withinLimits(add),
          // `changes`: a recount in parts tells this reservation from a give-back's undoing it.
          UpdateExpression:
            "ADD activeJobs :jobs, runsPerMinute :rate, changes :one SET tenantId = :tenant",
          ExpressionAttributeValues: {
            ":jobs": add.activeJobs,
            ":rate": add.runsPerMinute,
            ":one": 1,
            ...(add.activeJobs > 0 ? { ":jobsRoom": limits.activeJobs - add.activeJobs } : {}),
            ...(add.runsPerMinute > 0
              ? { ":rateRoom": limits.runsPerMinute - add.runsPerMinute }
              : {}),
            ":tenant": tenantId,
          },
          ReturnValues: "ALL_NEW",
        }),
      ),
    );
    const recount = result.Attributes?.recount;
    return { tenantId, added: add, recount: typeof recount === "string" ? recount : null };
  } catch (error) {
    if (isConditionalCheckFailed(error)) return null;
    throw error;
  }
}

/**
 * Replaces the usage with a recount, marked with a fresh `recount` token,
 * unless it changed since `seen` was read (another create reserved meanwhile,
 * or a reservation and a give-back of the same share left its counters as
 * they were: `stillSeen`): false, and the caller reads again.
 */
export async function writeRecountedUsage(
  engine: Engine,
  tenantId: string,
  counted: QuotaUsage,
  seen: SeenUsage | null,
  now: Date,
): Promise<boolean> {
  const unchanged = seen === null ? null : stillSeen(seen);
  return conditionalWrite(() =>
    engine.doc.send(
      new PutCommand({
        TableName: engine.tables.jobs,
        Item: {
          pk: quotaPk(tenantId),
          sk: USAGE_SK,
          tenantId,
          ...counted,
          recount: randomUUID(),
          recountedAt: now.toISOString(),
        },
        ...(unchanged === null
          ? { ConditionExpression: "attribute_not_exists(pk)" }
          : {
              ConditionExpression: unchanged.expression,
              ExpressionAttributeValues: unchanged.values,
            }),
      }),
    ),
  );
}
