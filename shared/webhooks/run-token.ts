import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * The run token of an async (long) run: what its target presents to
 * `POST /runs/{runId}/heartbeat` and `/complete`. The worker makes one for each
 * delivery of the run, from 32 bytes of crypto randomness, just before it
 * delivers, and the run item keeps only its SHA-256 (`runTokenHash`, written by
 * the delivery's fenced write). Nothing else can make one: no key signs it, so
 * nothing a tenant or its receivers hold (the webhook signing secret every
 * receiver verifies deliveries with) produces a token, and a token is good for
 * the one run whose item holds its hash. The fence of the start that delivered
 * it is part of the token (and of the hash), so a token of an earlier start is
 * known for what it is (stale, not unknown).
 *
 * Form: `rt2.<fence>.<base64url of 32 random bytes>`.
 */

const VERSION = "rt2";
const SECRET_BYTES = 32;
const FORM = new RegExp(`^${VERSION}\\.([1-9][0-9]{0,15})\\.[A-Za-z0-9_-]{43}$`);

/** A new token for the delivery of a run started under `fence`. */
export function newRunToken(fence: number): string {
  return `${VERSION}.${fence}.${randomBytes(SECRET_BYTES).toString("base64url")}`;
}

/** What the run item keeps of a token: its SHA-256, base64url. */
export function runTokenHash(token: string): string {
  return createHash("sha256").update(token).digest("base64url");
}

/** The fence a token states, or null when it is not one (verified only by `runTokenMatches`). */
export function runTokenFence(token: string): number | null {
  const match = FORM.exec(token);
  return match?.[1] === undefined ? null : Number(match[1]);
}

/** Whether `token` is the one whose hash the run keeps (compared in constant time). */
export function runTokenMatches(token: string, hash: string | undefined): boolean {
  if (hash === undefined) return false;
  const expected = Buffer.from(hash, "base64url");
  const presented = createHash("sha256").update(token).digest();
  return expected.length === presented.length && timingSafeEqual(expected, presented);
}
