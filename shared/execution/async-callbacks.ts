import { ENV, type EngineSettings, type Env } from "../config.js";

/** Where async targets call back (`API_URL`) and the lease a heartbeat gives, for the webhook settings. */
export function asyncCallbacksFrom(
  env: Env,
  settings: EngineSettings,
): { readonly apiUrl?: string; readonly leaseSeconds: number } {
  const apiUrl = env[ENV.apiUrl];
  return {
    ...(apiUrl !== undefined && apiUrl !== "" ? { apiUrl } : {}),
    leaseSeconds: settings.leaseMs / 1000,
  };
}
