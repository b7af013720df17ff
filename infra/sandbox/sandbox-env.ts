import { DEFAULT_LOW_PRIORITY_SHARE, ENV, type Env } from "../../shared/config.js";
import { decimalDigitsValue, decimalNumberValue } from "../../shared/decimal-digits.js";
import type { SecretCacheOptions } from "../../shared/webhooks/secrets.js";

/*
 * What the sandbox reads from the environment, kept out of sandbox.ts, which loads the whole engine
 * and the AWS SDK: `npm start` (main.ts) checks these and refuses a bad one at once, before it
 * loads any of that.
 */

const SETTING_OVERRIDES = [
  ENV.shardCount,
  ENV.maxShardCount,
  ENV.lookaheadSeconds,
  ENV.leaseSeconds,
  ENV.misfireGraceSeconds,
  ENV.retentionDays,
  ENV.deadLetterRetentionDays,
  ENV.minIntervalMs,
  ENV.quotaActiveJobs,
  ENV.quotaRunsPerMinute,
  ENV.quotaConcurrentRuns,
  ENV.quotaRequestsPerSecond,
  ENV.quotaMaxPriority,
  ENV.oneOffClaimWrites,
];

/**
 * The settings the sandbox takes from the environment, as the handlers read them: `npm start`
 * checks them before the emulators start, so a refused one is a line naming it, not a stack trace.
 */
export function sandboxSettingOverrides(env: Env): Record<string, string> {
  return pickDefined(env, SETTING_OVERRIDES);
}

function pickDefined(env: Env, names: readonly string[]): Record<string, string> {
  return Object.fromEntries(
    names.flatMap((n) => (env[n] ? [[n, env[n]] as [string, string]] : [])),
  );
}

/**
 * How long the worker reuses a tenant's webhook secrets (WEBHOOK_SECRET_CACHE_SECONDS; unset, the
 * deployed worker's 30 s): a test that rotates a secret sets it short rather than wait 30 s.
 */
export function secretCacheFrom(env: Env): SecretCacheOptions {
  const raw = env.WEBHOOK_SECRET_CACHE_SECONDS;
  if (raw === undefined || raw === "") return {};
  const value = decimalDigitsValue(raw);
  if (value === undefined || value > 3600)
    throw new Error(
      `WEBHOOK_SECRET_CACHE_SECONDS must be a whole number from 0 to 3600 written in decimal digits, got "${raw}"`,
    );
  return { ttlMs: value * 1000 };
}

/** The worker loop's starvation guard: the share of its slots normal and low each keep (0 to 0.5). */
export function lowPriorityShareFrom(env: Env): number {
  const raw = env.LOW_PRIORITY_SHARE;
  if (raw === undefined || raw === "") return DEFAULT_LOW_PRIORITY_SHARE;
  const value = decimalNumberValue(raw);
  if (value === undefined || value > 0.5)
    throw new Error(
      `LOW_PRIORITY_SHARE must be a number from 0 to 0.5 written in decimal digits, such as 0.25, got "${raw}"`,
    );
  return value;
}
