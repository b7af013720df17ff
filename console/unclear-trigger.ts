import { currentCredential } from "./auth.js";

/**
 * Where the Idempotency-Key of a job's trigger whose outcome was unclear (no answer, or a 5xx such
 * as API Gateway's 502 or 504: it may have queued its run) is kept, so that "Trigger now" pressed
 * again, on the job's page revisited too, is the same trigger, answered with that run. In
 * sessionStorage, as the credential (this tab only; gone with it), under the caller signed in and
 * the job: another caller in this tab (signed in after a sign-out) neither sees nor sends it.
 */
const PREFIX = "scheduler.unclearTrigger";

/**
 * The caller signed in: the OIDC subject, else the key's FNV-1a digest (the key itself sits in
 * sessionStorage beside it; a digest keeps it out of one more place). Null when signed out.
 */
function caller(): string | null {
  const credential = currentCredential();
  if (credential === null) return null;
  if (credential.who !== undefined) return `sub:${credential.who}`;
  let hash = 0x811c9dc5;
  for (let i = 0; i < credential.token.length; i += 1) {
    hash = Math.imul(hash ^ credential.token.charCodeAt(i), 0x01000193) >>> 0;
  }
  return `key:${hash.toString(16)}`;
}

/** The job's unclear trigger for the caller signed in now, to repeat and to settle. */
export interface UnclearTrigger {
  /** The key kept, or null when no trigger of the job is unclear. */
  readonly key: () => string | null;
  /** Kept from before a trigger is sent until it is answered or refused. */
  readonly keep: (key: string) => void;
  readonly forget: () => void;
}

export function unclearTrigger(jobId: string): UnclearTrigger {
  const who = caller();
  // Fixed when asked: an answer that settles it after a sign-in of another caller settles this one.
  const slot = who === null ? null : `${PREFIX}.${who}.${jobId}`;
  return {
    key: () => (slot === null ? null : sessionStorage.getItem(slot)),
    keep: (key) => {
      if (slot !== null) sessionStorage.setItem(slot, key);
    },
    forget: () => {
      if (slot !== null) sessionStorage.removeItem(slot);
    },
  };
}
