import { type SigV4Options, sigV4Signer } from "../../client/sigv4.js";
import type { Env } from "../../shared/config.js";

/**
 * A minimal client for the documented API, for the e2e suite and the
 * benchmarks: JSON in and out, over HTTP only. It authenticates with a bearer
 * key (the sandbox, or a stack with keys) or signs every request with SigV4
 * for `execute-api` (a deployed stack's IAM-authorized API).
 */
interface ApiResponse<T = Record<string, unknown>> {
  readonly status: number;
  readonly headers: Headers;
  readonly body: T;
}

export type Api = <T = Record<string, unknown>>(
  method: string,
  path: string,
  body?: unknown,
  headers?: Record<string, string>,
) => Promise<ApiResponse<T>>;

export type ApiAuth =
  | { readonly kind: "bearer"; readonly key: string }
  /** SigV4 (client/sigv4.ts); `profile` names a second principal, e.g. another tenant. */
  | ({ readonly kind: "iam" } & SigV4Options)
  /** Nothing at all: to check that an unauthenticated request is refused. */
  | { readonly kind: "none" };

/**
 * How a remote run (SCHEDULER_API_URL) authenticates: `SCHEDULER_API_AUTH`
 * (`iam` or `bearer`) when set, else IAM when SCHEDULER_API_URL is set and
 * none of `keyVariables` is, else bearer.
 */
export function authModeFromEnv(
  env: Env = process.env,
  keyVariables: readonly string[] = ["SCHEDULER_API_KEY"],
): "iam" | "bearer" {
  const explicit = env.SCHEDULER_API_AUTH?.trim().toLowerCase();
  if (explicit === "iam" || explicit === "bearer") return explicit;
  if (explicit) throw new Error(`SCHEDULER_API_AUTH must be "iam" or "bearer", not "${explicit}"`);
  const hasKey = keyVariables.some((name) => Boolean(env[name]));
  return env.SCHEDULER_API_URL && !hasKey ? "iam" : "bearer";
}

export function apiClient(baseUrl: string, auth: ApiAuth | string): Api {
  const base = baseUrl.replace(/\/$/, "");
  const how: ApiAuth = typeof auth === "string" ? { kind: "bearer", key: auth } : auth;
  const sign = how.kind === "iam" ? sigV4Signer(how, new URL(base)) : null;
  return async function api<T = Record<string, unknown>>(
    method: string,
    path: string,
    body?: unknown,
    extra: Record<string, string> = {},
  ): Promise<ApiResponse<T>> {
    const url = new URL(`${base}${path}`);
    const text = body === undefined ? undefined : JSON.stringify(body);
    let headers: Record<string, string> = {
      ...(how.kind === "bearer" ? { Authorization: `Bearer ${how.key}` } : {}),
      ...(text === undefined ? {} : { "Content-Type": "application/json" }),
      ...extra,
    };
    if (sign) {
      const lower = Object.fromEntries(
        Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]),
      );
      headers = await sign({ url, method, headers: lower, body: text });
    }
    const response = await fetch(url, {
      method,
      headers,
      ...(text === undefined ? {} : { body: text }),
    });
    const received = await response.text();
    return {
      status: response.status,
      headers: response.headers,
      body: (received ? JSON.parse(received) : null) as T,
    };
  };
}
