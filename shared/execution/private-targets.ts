import { ENV, type Env } from "../config.js";

/**
 * ALLOW_PRIVATE_TARGETS: "true" lets webhooks reach loopback and private
 * addresses, "false" refuses all but public ones; unset gives `fallback`
 * (false for a deployed worker, true for the sandbox). A module of its own so
 * that only what delivers webhooks (the worker, the sandbox) reads it.
 */
export function allowPrivateTargetsFrom(env: Env, fallback: boolean): boolean {
  const raw = env[ENV.allowPrivateTargets];
  if (raw === undefined || raw === "") return fallback;
  if (raw === "true") return true;
  if (raw === "false") return false;
  throw new Error(`${ENV.allowPrivateTargets} must be "true" or "false", got "${raw}"`);
}
