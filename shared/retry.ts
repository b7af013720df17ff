/**
 * Retry decisions after a failed attempt (docs/architecture.md, "Result" and
 * "Policies"): exponential backoff, capped, with full jitter so that a batch
 * of runs failing together does not retry together.
 */

import { MAX_ATTEMPT } from "./keys.js";
import { textHead } from "./storage/stored-text.js";

export interface RetryPolicy {
  /** Attempts in total, the first one included. */
  readonly maxAttempts: number;
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = Object.freeze({
  maxAttempts: 5,
  initialDelayMs: 30_000,
  maxDelayMs: 3_600_000,
});

/** Error texts can be whole response bodies; the reason is stored on the run item. */
export const MAX_REASON_ERROR_CHARS = 500;

function assertPolicy(policy: RetryPolicy): void {
  const { maxAttempts, initialDelayMs, maxDelayMs } = policy;
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1) {
    throw new RangeError(`maxAttempts must be a positive integer: ${maxAttempts}`);
  }
  if (!Number.isSafeInteger(initialDelayMs) || initialDelayMs < 0) {
    throw new RangeError(`initialDelayMs must be a non-negative integer: ${initialDelayMs}`);
  }
  if (!Number.isSafeInteger(maxDelayMs) || maxDelayMs < 0) {
    throw new RangeError(`maxDelayMs must be a non-negative integer: ${maxDelayMs}`);
  }
}

function assertAttempt(attempt: number): void {
  if (!Number.isSafeInteger(attempt) || attempt < 1) {
    throw new RangeError(`attempt must be a positive integer: ${attempt}`);
  }
}

/**
 * The upper bound of the jittered delay after `attempt` failed:
 * min(maxDelayMs, initialDelayMs · 2^(attempt−1)).
 */
export function backoffCeiling(attempt: number, policy: RetryPolicy): number {
  assertPolicy(policy);
  assertAttempt(attempt);
  if (policy.initialDelayMs === 0) {
    return 0;
  }
  // Past 2^1023 the power is Infinity, which min() turns into the cap; the
  // exponent is clamped only so that huge attempts cost nothing to compute.
  const exponential = policy.initialDelayMs * 2 ** Math.min(attempt - 1, 1024);
  return Math.min(policy.maxDelayMs, exponential);
}

/**
 * The delay in whole milliseconds before retrying after `attempt` (1-based)
 * failed: uniform over the integers in [0, backoffCeiling(attempt)] ("full
 * jitter"). `random` returns values in [0, 1), like Math.random.
 */
export function backoffDelay(attempt: number, policy: RetryPolicy, random: () => number): number {
  const ceiling = backoffCeiling(attempt, policy);
  const draw = random();
  if (!(draw >= 0 && draw < 1)) {
    throw new RangeError(`random() must return a number in [0, 1): ${draw}`);
  }
  return Math.min(ceiling, Math.floor(draw * (ceiling + 1)));
}

export type FailureDecision =
  | {
      readonly kind: "retry";
      readonly nextAttempt: number;
      readonly dueAt: Date;
      readonly delayMs: number;
    }
  | { readonly kind: "dead"; readonly reason: string };

export interface FailureInput {
  /** The attempt that just failed, 1-based. */
  readonly attempt: number;
  readonly policy: RetryPolicy;
  readonly retryable: boolean;
  /** What went wrong, as it should read in the run's history. */
  readonly error: string;
  readonly now: Date;
  readonly random: () => number;
  /**
   * The least delay the failure asked for (a webhook receiver's `Retry-After`): the retry waits at
   * least that long, but never past the policy's `maxDelayMs`.
   */
  readonly retryAfterMs?: number;
}

function shortened(error: string): string {
  return error.length <= MAX_REASON_ERROR_CHARS
    ? error
    : // Whole characters: half of one is no Unicode text to store on the run or answer in JSON.
      `${textHead(error, MAX_REASON_ERROR_CHARS - 1)}…`;
}

/**
 * Retry a retryable failure while attempts remain; otherwise the run is dead,
 * with a reason that says which of the two it was. A non-retryable error is
 * named as such even on the last attempt, since that is the more useful why.
 */
export function decideAfterFailure(input: FailureInput): FailureDecision {
  const { attempt, policy, retryable, error, now, random } = input;
  assertPolicy(policy);
  assertAttempt(attempt);
  if (!Number.isFinite(now.getTime())) {
    throw new RangeError("now must be a valid date");
  }
  if (!retryable) {
    return { kind: "dead", reason: `non-retryable error: ${shortened(error)}` };
  }
  // Attempts are stored as four digits: past the last one there is no next attempt to store,
  // whatever the policy allows (a replayed run is its occurrence's next attempt).
  if (attempt >= Math.min(policy.maxAttempts, MAX_ATTEMPT)) {
    const attempts = attempt === 1 ? "1 attempt" : `${attempt} attempts`;
    return { kind: "dead", reason: `gave up after ${attempts}: ${shortened(error)}` };
  }
  // A handler's own ask may be anything a number is: only a positive one holds the retry back.
  const asked = input.retryAfterMs ?? 0;
  const askedMs = asked > 0 ? Math.min(Math.ceil(asked), policy.maxDelayMs) : 0;
  const delayMs = Math.max(backoffDelay(attempt, policy, random), askedMs);
  return {
    kind: "retry",
    nextAttempt: attempt + 1,
    dueAt: new Date(now.getTime() + delayMs),
    delayMs,
  };
}
