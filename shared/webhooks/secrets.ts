import { createHmac, randomBytes } from "node:crypto";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError, IdempotencyConflictError } from "../errors.js";
import { idempotencyKeyHash } from "../keys.js";
import {
  readWebhookSecrets,
  type TenantWebhookSecrets,
  writeFirstWebhookSecrets,
  writeRotatedWebhookSecrets,
} from "../storage/webhook-secrets.js";

/**
 * Each tenant's webhook signing secret (Standard Webhooks): `whsec_` + base64
 * of 32 random bytes, made on first use, kept in the webhook secrets table
 * (encrypted with its own KMS key on AWS; only the API and the worker may
 * read it). A rotation keeps the replaced secret valid for a day, and
 * deliveries are signed with both meanwhile.
 */

const SECRET_PREFIX = "whsec_";
const SECRET_BYTES = 32;
/** How long deliveries are also signed with the secret a rotation replaced. */
export const PREVIOUS_SECRET_VALID_MS = 24 * 60 * 60 * 1000;

export function newWebhookSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(SECRET_BYTES).toString("base64")}`;
}

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

/**
 * The tenant's secrets, made on first use. Two first uses at once both try a
 * conditional put; the one that loses reads the winner's, so every caller
 * sees the same secret.
 */
export async function tenantWebhookSecrets(
  engine: Engine,
  tenantId: string,
): Promise<TenantWebhookSecrets> {
  const existing = await readWebhookSecrets(engine, tenantId);
  if (existing) return existing;
  const created: TenantWebhookSecrets = {
    tenantId,
    current: newWebhookSecret(),
    version: 1,
    createdAt: engine.clock().toISOString(),
  };
  if (await writeFirstWebhookSecrets(engine, created)) return created;
  const winner = await readWebhookSecrets(engine, tenantId);
  if (!winner) throw new Error(`webhook secret of tenant ${tenantId} vanished`);
  return winner;
}

const ROTATE_ATTEMPTS = 3;

/**
 * What an earlier rotation with the same key says about this one: "current"
 * when it made the current secret within PREVIOUS_SECRET_VALID_MS (answer that
 * secret again), "replaced" when a later rotation replaced its secret and that
 * secret still signs (answering it would hand out a secret on its way out),
 * null when the key is not one of those (a new key, or one forgotten: rotate).
 */
function earlierRotationWith(
  secrets: TenantWebhookSecrets,
  keyHash: string,
  now: Date,
): "current" | "replaced" | null {
  const rotatedAt = secrets.rotatedAt === undefined ? Number.NaN : Date.parse(secrets.rotatedAt);
  if (secrets.rotationKeyHash === keyHash && rotatedAt + PREVIOUS_SECRET_VALID_MS > now.getTime())
    return "current";
  const previous = secrets.previous;
  if (previous?.rotationKeyHash === keyHash && Date.parse(previous.validUntil) > now.getTime())
    return "replaced";
  return null;
}

/**
 * A new current secret; the replaced one stays valid (deliveries carry both
 * signatures) for PREVIOUS_SECRET_VALID_MS. A secret replaced earlier than
 * that by the one now replaced stops being used at once.
 *
 * With an `idempotencyKey`, a repeat (a retry after a lost answer) does not
 * rotate again, which would cut off at once the secret the caller started
 * from and lose the one its first call made: the key of the rotation that
 * made the current secret answers that secret for PREVIOUS_SECRET_VALID_MS
 * after it, and writes nothing; the key of the rotation a later one replaced
 * is an IdempotencyConflictError while that secret still signs. Any other key
 * rotates, and the rotation stores its hash in the same conditional write.
 */
export async function rotateWebhookSecret(
  engine: Engine,
  tenantId: string,
  idempotencyKey?: string,
): Promise<TenantWebhookSecrets> {
  const keyed =
    idempotencyKey === undefined
      ? undefined
      : { key: idempotencyKey, hash: idempotencyKeyHash(idempotencyKey) };
  for (let attempt = 1; attempt <= ROTATE_ATTEMPTS; attempt++) {
    const before = await tenantWebhookSecrets(engine, tenantId);
    const now = engine.clock();
    if (keyed) {
      const earlier = earlierRotationWith(before, keyed.hash, now);
      if (earlier === "current") return before;
      if (earlier === "replaced")
        throw new IdempotencyConflictError(
          keyed.key,
          "made a secret that a later rotation has replaced; GET /webhook-secret gives the current one",
        );
    }
    const { rotationKeyHash: replacedKeyHash, ...unchanged } = before;
    const rotated = {
      ...unchanged,
      current: newWebhookSecret(),
      ...(keyed ? { rotationKeyHash: keyed.hash } : {}),
      previous: {
        secret: before.current,
        validUntil: new Date(now.getTime() + PREVIOUS_SECRET_VALID_MS).toISOString(),
        ...(replacedKeyHash === undefined ? {} : { rotationKeyHash: replacedKeyHash }),
      },
      version: before.version + 1,
      rotatedAt: now.toISOString(),
    };
    try {
      await writeRotatedWebhookSecrets(engine, before, rotated);
      return rotated;
    } catch (error) {
      if (!(error instanceof ConcurrentUpdateError)) throw error;
    }
  }
  throw new ConcurrentUpdateError(`the webhook secret of ${tenantId} is being rotated elsewhere`, {
    subject: "webhook secret",
  });
}

/** Where the worker gets the secrets a tenant's deliveries are signed with. */
export type WebhookSigningSecrets = (tenantId: string) => Promise<readonly string[]>;

export interface SecretCacheOptions {
  /** How long a tenant's secrets are reused before they are read again (a rotation shows after at most this). */
  readonly ttlMs?: number;
  /** Tenants kept at most; the least recently read go first. */
  readonly maxTenants?: number;
}

const SECRET_CACHE_TTL_MS = 30_000;

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
