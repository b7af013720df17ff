import { GetCommand, PutCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import {
  conditionalWrite,
  failedConditionItem,
  isConditionalCheckFailed,
  sentMoreThanOnce,
} from "./dynamo-errors.js";

/** A tenant's webhook signing secrets as stored: one item per tenant in the webhook secrets table. */
export interface TenantWebhookSecrets {
  readonly tenantId: string;
  readonly current: string;
  /** SHA-256 (hex) of the Idempotency-Key of the rotation that made `current`, when it carried one. */
  readonly rotationKeyHash?: string;
  readonly previous?: {
    readonly secret: string;
    readonly validUntil: string;
    /** SHA-256 (hex) of the Idempotency-Key of the rotation that made this secret, when it carried one. */
    readonly rotationKeyHash?: string;
  };
  /** Bumped by every rotation; a rotation is conditioned on the version it read. */
  readonly version: number;
  readonly createdAt: string;
  readonly rotatedAt?: string;
}

const webhookSecretKey = (tenantId: string) => ({ pk: `WEBHOOKSECRET#${tenantId}` });

function decode(tenantId: string, item: Record<string, unknown>): TenantWebhookSecrets {
  const { current, previous, previousValidUntil, version, createdAt, rotatedAt } = item;
  if (typeof current !== "string" || typeof version !== "number" || typeof createdAt !== "string")
    throw new Error(`webhook secret item of tenant ${tenantId} is malformed`);
  // A key hash names its secret only at the version its rotation wrote: a rotation by a version
  // of the code that keeps no keys (mid-upgrade, or after a rollback) moves the secrets and the
  // version but leaves the key attributes behind. The current secret's key left behind so names
  // the secret that rotation made `previous`; any other is forgotten.
  const keyAt = (hash: unknown, at: unknown, expected: number) =>
    typeof hash === "string" && at === expected ? { rotationKeyHash: hash } : undefined;
  const currentKey = keyAt(item.rotationKeyHash, item.rotationKeyVersion, version);
  const previousKey =
    keyAt(item.previousRotationKeyHash, item.previousRotationKeyVersion, version - 1) ??
    keyAt(item.rotationKeyHash, item.rotationKeyVersion, version - 1);
  return {
    tenantId,
    current,
    ...currentKey,
    ...(typeof previous === "string" && typeof previousValidUntil === "string"
      ? {
          previous: {
            secret: previous,
            validUntil: previousValidUntil,
            ...previousKey,
          },
        }
      : {}),
    version,
    createdAt,
    ...(typeof rotatedAt === "string" ? { rotatedAt } : {}),
  };
}

/** The tenant's secrets, read strongly consistent; null before its first use. */
export async function readWebhookSecrets(
  engine: Engine,
  tenantId: string,
): Promise<TenantWebhookSecrets | null> {
  const { Item } = await engine.doc.send(
    new GetCommand({
      TableName: engine.tables.webhookSecrets,
      Key: webhookSecretKey(tenantId),
      ConsistentRead: true,
    }),
  );
  return Item ? decode(tenantId, Item) : null;
}

/** Stores a tenant's first secrets, conditioned on it having none. False when it had some already. */
export async function writeFirstWebhookSecrets(
  engine: Engine,
  secrets: TenantWebhookSecrets,
): Promise<boolean> {
  return conditionalWrite(() =>
    engine.doc.send(
      new PutCommand({
        TableName: engine.tables.webhookSecrets,
        Item: {
          ...webhookSecretKey(secrets.tenantId),
          current: secrets.current,
          version: secrets.version,
          createdAt: secrets.createdAt,
        },
        ConditionExpression: "attribute_not_exists(pk)",
      }),
    ),
  );
}

/**
 * Stores a rotation (`rotated`, which names the replaced secret as `previous`)
 * with the key hashes of the rotations that made each secret and the versions
 * they name them at (removed where a rotation carried no key), `rotated.version`
 * for the current one's and `before.version` for the previous one's,
 * conditioned on the secrets still being at the
 * version `before` was read at: `ConcurrentUpdateError` when another rotation
 * came first. The one condition also keeps a key's rotation to one: a
 * concurrent rotation with the same key loses it and, reading again, finds
 * its key stored. A write the SDK sent again after its answer was lost (a 500,
 * a timeout) fails that condition on itself: the item then holds this
 * rotation's new secret, which no other rotation can have made, and it stands.
 * Taken for another's, the caller would rotate again, and the secret its
 * receivers verify with would stop signing at once.
 */
export async function writeRotatedWebhookSecrets(
  engine: Engine,
  before: TenantWebhookSecrets,
  rotated: TenantWebhookSecrets & {
    readonly previous: NonNullable<TenantWebhookSecrets["previous"]>;
  },
): Promise<void> {
  // Each key hash with the version it names its secret at (see decode).
  const keyHashes = [
    ["rotationKeyHash", ":keyHash", rotated.rotationKeyHash, "rotationKeyVersion", ":next"],
    [
      "previousRotationKeyHash",
      ":previousKeyHash",
      rotated.previous.rotationKeyHash,
      "previousRotationKeyVersion",
      ":read",
    ],
  ] as const;
  const sets = [
    "#current = :current",
    "previous = :previous",
    "previousValidUntil = :until",
    "version = :next",
    "rotatedAt = :at",
    ...keyHashes.flatMap(([name, value, hash, atName, at]) =>
      hash === undefined ? [] : [`${name} = ${value}`, `${atName} = ${at}`],
    ),
  ];
  const removes = keyHashes.flatMap(([name, , hash, atName]) =>
    hash === undefined ? [name, atName] : [],
  );
  try {
    await engine.doc.send(
      new UpdateCommand({
        TableName: engine.tables.webhookSecrets,
        Key: webhookSecretKey(before.tenantId),
        UpdateExpression: `SET ${sets.join(", ")}${removes.length > 0 ? ` REMOVE ${removes.join(", ")}` : ""}`,
        ConditionExpression: "version = :read",
        ReturnValuesOnConditionCheckFailure: "ALL_OLD",
        ExpressionAttributeNames: { "#current": "current" },
        ExpressionAttributeValues: {
          ":current": rotated.current,
          ":previous": rotated.previous.secret,
          ":until": rotated.previous.validUntil,
          ":next": rotated.version,
          ":at": rotated.rotatedAt,
          ":read": before.version,
          ...Object.fromEntries(
            keyHashes.flatMap(([, value, hash]) => (hash === undefined ? [] : [[value, hash]])),
          ),
        },
      }),
    );
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    // Only a request sent more than once can have met itself.
    const stored = sentMoreThanOnce(error) ? failedConditionItem(error) : null;
    if (stored?.current === rotated.current && stored.version === rotated.version) return;
    throw new ConcurrentUpdateError(
      `the webhook secret of ${before.tenantId} changed since it was read`,
      { cause: error, subject: "webhook secret" },
    );
  }
}
