import { ENV, type Env } from "../config.js";

/**
 * DEMO_JOB_TYPES: "true" lets the API accept the demo types (`sleep`, `fail`),
 * "false" refuses them with a 400 naming `type`; unset gives `fallback` (false
 * for a deployed API, true for the sandbox). A module of its own so that only
 * what serves the API reads it.
 */
export function demoJobTypesFrom(env: Env, fallback: boolean): boolean {
  const raw = env[ENV.demoJobTypes];
  if (raw === undefined || raw === "") return fallback;
  if (raw === "true") return true;
  if (raw === "false") return false;
  throw new Error(`${ENV.demoJobTypes} must be "true" or "false", got "${raw}"`);
}
