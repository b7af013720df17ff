import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * The run token of an async (long) run: what its target presents to
 * `POST /runs/{runId}/heartbeat` and `/complete`. It names the run (its id
 * holds the job, the occurrence and the attempt), the fence of the start that
 * delivered it, and the tenant, and is signed with HMAC-SHA256 under a key
 * derived from the tenant's webhook signing secret (the derivation keeps a
 * token and a webhook signature from ever being mistaken for each other). A
 * token made under a rotated-out secret verifies while that secret still signs
 * deliveries (a day after the rotation).
 *
 * Form: `rt1.<base64url JSON {r, f, t}>.<base64url HMAC>`.
 */

const VERSION = "rt1";
const SECRET_PREFIX = "whsec_";
const KEY_LABEL = "scheduler run token v1";

export interface RunTokenClaims {
  readonly runId: string;
  readonly fence: number;
  readonly tenantId: string;
}

function tokenKey(secret: string): Buffer {
  const raw = Buffer.from(secret.slice(SECRET_PREFIX.length), "base64");
  return createHmac("sha256", raw).update(KEY_LABEL).digest();
}

function mac(secret: string, signed: string): Buffer {
  return createHmac("sha256", tokenKey(secret)).update(signed).digest();
}

/** A token for `claims`, signed with the tenant's current secret. */
export function signRunToken(secret: string, claims: RunTokenClaims): string {
  const body = Buffer.from(
    JSON.stringify({ r: claims.runId, f: claims.fence, t: claims.tenantId }),
  ).toString("base64url");
  const signed = `${VERSION}.${body}`;
  return `${signed}.${mac(secret, signed).toString("base64url")}`;
}

/** The claims a token states, unverified (to find whose secrets verify it), or null when it is not one. */
export function readRunToken(token: string): RunTokenClaims | null {
  const [version, body, signature, ...rest] = token.split(".");
  if (version !== VERSION || body === undefined || signature === undefined || rest.length > 0)
    return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null) return null;
  const { r, f, t } = parsed as Record<string, unknown>;
  if (typeof r !== "string" || typeof t !== "string") return null;
  if (typeof f !== "number" || !Number.isInteger(f) || f < 1) return null;
  return { runId: r, fence: f, tenantId: t };
}

/** Whether one of `secrets` (the tenant's valid ones) signed `token`. */
export function runTokenSignedBy(token: string, secrets: readonly string[]): boolean {
  const cut = token.lastIndexOf(".");
  if (cut < 0) return false;
  const presented = Buffer.from(token.slice(cut + 1), "base64url");
  const signed = token.slice(0, cut);
  let valid = false;
  for (const secret of secrets) {
    const expected = mac(secret, signed);
    if (expected.length === presented.length && timingSafeEqual(expected, presented)) valid = true;
  }
  return valid;
}
