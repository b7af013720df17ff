import { fromNodeProviderChain } from "@aws-sdk/credential-providers";
import { Sha256 } from "@smithy/core/checksum";
import { SignatureV4 } from "@smithy/signature-v4";
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider } from "@smithy/types";
import type { Env } from "../../shared/config.js";

/**
 * A minimal client for the documented API, for the e2e suite and the
 * benchmarks: JSON in and out, over HTTP only. It authenticates with a bearer
 * key (the sandbox, or a stack with keys) or signs every request with SigV4
 * for `execute-api` (a deployed stack's IAM-authorized API).
 */
export interface ApiResponse<T = Record<string, unknown>> {
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
  | {
      readonly kind: "iam";
      /** Default: from an execute-api host name, else AWS_REGION, else AWS_DEFAULT_REGION. */
      readonly region?: string;
      /** Default: the AWS SDK's default chain (`fromNodeProviderChain`), for `profile` if set. */
      readonly credentials?: AwsCredentialIdentity | AwsCredentialIdentityProvider;
      /** A named profile for the default chain (a second principal, e.g. another tenant). */
      readonly profile?: string;
      /** The signing time; tests fix it. Default: now. */
      readonly now?: () => Date;
    }
  /** Nothing at all: to check that an unauthenticated request is refused. */
  | { readonly kind: "none" };

export const SIGNING_SERVICE = "execute-api";

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

const EXECUTE_API_HOST =
  /^[a-z0-9-]+\.execute-api\.([a-z]{2}(?:-[a-z]+)+-\d+)\.(?:vpce\.)?amazonaws\.com(?:\.cn)?$/i;

/** The region an execute-api host name names (`abc123.execute-api.eu-west-1.amazonaws.com`), if any. */
export function regionOfHost(hostname: string): string | undefined {
  return EXECUTE_API_HOST.exec(hostname)?.[1]?.toLowerCase();
}

/**
 * The signing region: the one an execute-api host name names (a signature
 * for any other region is refused there), else AWS_REGION, else
 * AWS_DEFAULT_REGION (a custom domain names none).
 */
export function signingRegion(url: URL, env: Env = process.env): string {
  const region = regionOfHost(url.hostname) || env.AWS_REGION || env.AWS_DEFAULT_REGION;
  if (!region)
    throw new Error(
      `no region to sign requests to ${url.host} for: set AWS_REGION (the host name names none)`,
    );
  return region;
}

/** RFC 3986 percent-encoding, as SigV4's canonical query string uses it. */
function rfc3986(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

type Query = Record<string, string | string[]>;

function queryOf(params: URLSearchParams): Query {
  const query: Query = {};
  for (const [key, value] of params) {
    const seen = query[key];
    if (seen === undefined) query[key] = value;
    else query[key] = Array.isArray(seen) ? [...seen, value] : [seen, value];
  }
  return query;
}

/**
 * The query as sent: encoded as the signed canonical query is, so that no
 * reading of `+` or of characters left unescaped can differ between the two.
 */
function serializeQuery(query: Query): string {
  return Object.entries(query)
    .flatMap(([key, value]) =>
      (Array.isArray(value) ? value : [value]).map((v) => `${rfc3986(key)}=${rfc3986(v)}`),
    )
    .sort()
    .join("&");
}

/** Request headers with the values signing added (and `host`, which fetch sets from the URL). */
type Signer = (request: {
  url: URL;
  method: string;
  headers: Record<string, string>;
  body: string | undefined;
}) => Promise<Record<string, string>>;

function iamSigner(auth: Extract<ApiAuth, { kind: "iam" }>, base: URL): Signer {
  const signer = new SignatureV4({
    service: SIGNING_SERVICE,
    region: auth.region ?? signingRegion(base),
    credentials:
      auth.credentials ?? fromNodeProviderChain(auth.profile ? { profile: auth.profile } : {}),
    sha256: Sha256,
    // execute-api needs no x-amz-content-sha256 header; the body's hash is in the signature anyway.
    applyChecksum: false,
  });
  return async ({ url, method, headers, body }) => {
    const query = queryOf(url.searchParams);
    url.search = serializeQuery(query);
    const signed = await signer.sign(
      {
        method,
        protocol: url.protocol,
        hostname: url.hostname,
        ...(url.port ? { port: Number(url.port) } : {}),
        path: url.pathname,
        query,
        // Exactly the Host fetch sends: the host name, and the port unless it is the default.
        headers: { ...headers, host: url.host },
        ...(body === undefined ? {} : { body }),
      },
      { signingDate: auth.now?.() ?? new Date() },
    );
    const { host: _host, ...sent } = signed.headers;
    return sent;
  };
}

export function apiClient(baseUrl: string, auth: ApiAuth | string): Api {
  const base = baseUrl.replace(/\/$/, "");
  const how: ApiAuth = typeof auth === "string" ? { kind: "bearer", key: auth } : auth;
  const sign = how.kind === "iam" ? iamSigner(how, new URL(base)) : null;
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
