import { fromNodeProviderChain } from "@aws-sdk/credential-providers";
import { Sha256 } from "@smithy/core/checksum";
import { SignatureV4 } from "@smithy/signature-v4";
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider } from "@smithy/types";
import type { Env } from "../shared/config.js";

/**
 * SigV4 for a deployed stack's IAM-authorized API (API Gateway, service
 * `execute-api`): the client's requests signed with credentials from the AWS
 * SDK's default chain (AWS_PROFILE, SSO, environment keys, an instance role).
 */
export interface SigV4Options {
  /** Default: from an execute-api host name, else AWS_REGION, else AWS_DEFAULT_REGION. */
  readonly region?: string;
  /** Default: the AWS SDK's default chain (`fromNodeProviderChain`), for `profile` if set. */
  readonly credentials?: AwsCredentialIdentity | AwsCredentialIdentityProvider;
  /** A named profile for the default chain. */
  readonly profile?: string;
  /** The signing time; tests fix it. Default: now. */
  readonly now?: () => Date;
}

const SIGNING_SERVICE = "execute-api";

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

interface RequestToSign {
  /** Its query is rewritten to the encoding that was signed. */
  readonly url: URL;
  readonly method: string;
  /** Lowercase names. */
  readonly headers: Record<string, string>;
  readonly body: string | undefined;
}

/** Request headers with the values signing added (and without `host`, which fetch sets from the URL). */
type Signer = (request: RequestToSign) => Promise<Record<string, string>>;

export function sigV4Signer(options: SigV4Options, base: URL): Signer {
  const signer = new SignatureV4({
    service: SIGNING_SERVICE,
    region: options.region ?? signingRegion(base),
    credentials:
      options.credentials ??
      fromNodeProviderChain(options.profile ? { profile: options.profile } : {}),
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
      { signingDate: options.now?.() ?? new Date() },
    );
    const { host: _host, ...sent } = signed.headers;
    return sent;
  };
}
