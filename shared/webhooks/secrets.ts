import { createHmac, randomBytes } from "node:crypto";
import { GetCommand, PutCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import { isConditionalCheckFailed } from "../storage/dynamo-errors.js";

/**
 * Each tenant's webhook signing secret (Standard Webhooks): `whsec_` + base64
 * of 32 random bytes, made on first use, kept in the webhook secrets table
 * (encrypted with its own KMS key on AWS; only the API and the worker may
 * read it). A rotation keeps the replaced secret valid for a day, and
 * deliveries are signed with both meanwhile.
 */

export const SECRET_PREFIX = "whsec_";
const SECRET_BYTES = 32;
/** How long deliveries are also signed with the secret a rotation replaced. */
export const PREVIOUS_SECRET_VALID_MS = 24 * 60 * 60 * 1000;

export interface TenantWebhookSecrets {
  readonly tenantId: string;
  readonly current: string;
  readonly previous?: { readonly secret: string; readonly validUntil: string };
  /** Bumped by every rotation; a rotation is conditioned on the version it read. */
  readonly version: number;
  readonly createdAt: string;
  readonly rotatedAt?: string;
}

export function newWebhookSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(SECRET_BYTES).toString("base64")}`;
}

export const webhookSecretKey = (tenantId: string) => ({ pk: `WEBHOOKSECRET#${tenantId}` });

/** The secrets a delivery is signed with now: the current one, and a rotated-out one for a day. */
export function signingSecrets(secrets: TenantWebhookSecrets, now: Date): string[] {
  const previous = secrets.previous;
  return previous && Date.parse(previous.validUntil) > now.getTime()
    ? [secrets.current, previous.secret]
    : [secrets.current];
}

/**
 * `webhook-signature`: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`
 * for each secret, space-separated. The HMAC key is the base64 after `whsec_`.
 */
export function webhookSignature(
  secrets: readonly string[],
  id: string,
  timestampSeconds: number,
  body: string,
): string {
  return secrets
    .map((secret) => {
      const key = Buffer.from(secret.slice(SECRET_PREFIX.length), "base64");
      const mac = createHmac("sha256", key).update(`${id}.${timestampSeconds}.${body}`);
      return `v1,${mac.digest("base64")}`;
    })
    .join(" ");
}

function decode(tenantId: string, item: Record<string, unknown>): TenantWebhookSecrets {
  const { current, previous, previousValidUntil, version, createdAt, rotatedAt } = item;
  if (typeof current !== "string" || typeof version !== "number" || typeof createdAt !== "string")
    throw new Error(`webhook secret item of tenant ${tenantId} is malformed`);
  return {
    tenantId,
    current,
    ...(typeof previous === "string" && typeof previousValidUntil === "string"
      ? { previous: { secret: previous, validUntil: previousValidUntil } }
      : {}),
    version,
    createdAt,
    ...(typeof rotatedAt === "string" ? { rotatedAt } : {}),
  };
}

async function read(engine: Engine, tenantId: string): Promise<TenantWebhookSecrets | null> {
  const { Item } = await engine.doc.send(
    new GetCommand({
      TableName: engine.tables.webhookSecrets,
      Key: webhookSecretKey(tenantId),
      ConsistentRead: true,
    }),
  );
  return Item ? decode(tenantId, Item) : null;
}

/**
 * The tenant's secrets, made on first use. Two first uses at once both try a
 * conditional put; the one that loses reads the winner's, so every caller
 * sees the same secret.
 */
export async function tenantWebhookSecrets(
  engine: Engine,
  tenantId: string,
): Promise<TenantWebhookSecrets> {
  const existing = await read(engine, tenantId);
  if (existing) return existing;
  const created: TenantWebhookSecrets = {
    tenantId,
    current: newWebhookSecret(),
    version: 1,
    createdAt: engine.clock().toISOString(),
  };
  try {
    await engine.doc.send(
      new PutCommand({
        TableName: engine.tables.webhookSecrets,
        Item: {
          ...webhookSecretKey(tenantId),
          current: created.current,
          version: created.version,
          createdAt: created.createdAt,
        },
        ConditionExpression: "attribute_not_exists(pk)",
      }),
    );
    return created;
  } catch (error) {
    if (!isConditionalCheckFailed(error)) throw error;
    const winner = await read(engine, tenantId);
    if (!winner) throw new Error(`webhook secret of tenant ${tenantId} vanished`, { cause: error });
    return winner;
  }
}

const ROTATE_ATTEMPTS = 3;

/**
 * A new current secret; the replaced one stays valid (deliveries carry both
 * signatures) for PREVIOUS_SECRET_VALID_MS. A secret replaced earlier than
 * that by the one now replaced stops being used at once.
 */
export async function rotateWebhookSecret(
  engine: Engine,
  tenantId: string,
): Promise<TenantWebhookSecrets> {
  for (let attempt = 1; attempt <= ROTATE_ATTEMPTS; attempt++) {
    const before = await tenantWebhookSecrets(engine, tenantId);
    const now = engine.clock();
    const rotated: TenantWebhookSecrets = {
      ...before,
      current: newWebhookSecret(),
      previous: {
        secret: before.current,
        validUntil: new Date(now.getTime() + PREVIOUS_SECRET_VALID_MS).toISOString(),
      },
      version: before.version + 1,
      rotatedAt: now.toISOString(),
    };
    try {
      await engine.doc.send(
        new UpdateCommand({
          TableName: engine.tables.webhookSecrets,
          Key: webhookSecretKey(tenantId),
          UpdateExpression:
            "SET #current = :current, previous = :previous, previousValidUntil = :until, version = :next, rotatedAt = :at",
          ConditionExpression: "version = :read",
          ExpressionAttributeNames: { "#current": "current" },
          ExpressionAttributeValues: {
            ":current": rotated.current,
            ":previous": before.current,
            ":until": rotated.previous?.validUntil,
            ":next": rotated.version,
            ":at": rotated.rotatedAt,
            ":read": before.version,
          },
        }),
      );
      return rotated;
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
    }
  }
  throw new ConcurrentUpdateError(`the webhook secret of ${tenantId} is being rotated elsewhere`);
}

/** Where the worker gets the secrets a tenant's deliveries are signed with. */
export type WebhookSigningSecrets = (tenantId: string) => Promise<readonly string[]>;

export interface SecretCacheOptions {
  /** How long a tenant's secrets are reused before they are read again (a rotation shows after at most this). */
  readonly ttlMs?: number;
  /** Tenants kept at most; the least recently read go first. */
  readonly maxTenants?: number;
}

export const SECRET_CACHE_TTL_MS = 30_000;

/**
 * The worker's source of signing secrets: read (or made) per tenant, reused
 * for `ttlMs`, so a warm worker does not read the table on every delivery and
 * a rotation reaches deliveries within that time.
 */
export function cachedSigningSecrets(
  engine: Engine,
  { ttlMs = SECRET_CACHE_TTL_MS, maxTenants = 10_000 }: SecretCacheOptions = {},
): WebhookSigningSecrets {
  const cache = new Map<string, { secrets: Promise<TenantWebhookSecrets>; readAt: number }>();
  return async (tenantId) => {
    const now = engine.clock();
    let entry = cache.get(tenantId);
    if (!entry || now.getTime() - entry.readAt >= ttlMs) {
      entry = { secrets: tenantWebhookSecrets(engine, tenantId), readAt: now.getTime() };
      cache.delete(tenantId);
      cache.set(tenantId, entry);
      for (const oldest of cache.keys()) {
        if (cache.size <= maxTenants) break;
        cache.delete(oldest);
      }
      // A failed read is not kept: the next delivery reads again.
      const failed = entry;
      entry.secrets.catch(() => {
        if (cache.get(tenantId) === failed) cache.delete(tenantId);
      });
    }
    return signingSecrets(await entry.secrets, now);
  };
}
