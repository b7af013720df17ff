import type { Clock } from "../clock.js";
import { type ConsoleAuth, plainHttpAllowed } from "../console/config.js";
import type { Logger } from "../observability.js";
import { timeLimit } from "../time-limit.js";

export interface ConsolePolicyDeps {
  readonly clock: Clock;
  readonly log: Logger;
  /** How long a page waits for the issuer's discovery document; default 3 s. */
  readonly discoveryTimeoutMs?: number;
  /** How the discovery document is read: fetch, unless a test passes one (one that loses its abort). */
  readonly fetch?: typeof fetch;
}

/**
 * The endpoints of the discovery document the console's browser code calls
 * (console/auth.ts) besides the document itself: it sends the authorization
 * code to the token endpoint, and nothing else. It reads the ID token's claims
 * as they came over TLS from that endpoint (no keys fetched), asks for no
 * userinfo, and signs out by forgetting the token (no end-session call; the next sign-in asks
 * the provider for a new login instead, console/auth.ts).
 */
const ENDPOINTS_THE_BROWSER_CALLS = ["token_endpoint"] as const;

const DISCOVERY_TIMEOUT_MS = 3_000;
/** After a failed discovery, pages go out with the issuer's origin alone for this long. */
const RETRY_DISCOVERY_AFTER_MS = 60_000;

/**
 * The console page's Content-Security-Policy, as a function the page calls per
 * request. Scripts, styles and API calls stay on the page's own origin. With
 * OIDC sign-in the browser also calls the identity provider: its discovery
 * document (at the issuer) and its token endpoint, which need not share the
 * issuer's origin (Amazon Cognito: the issuer is
 * https://cognito-idp.<region>.amazonaws.com/<pool id>, the token endpoint
 * https://<domain>.auth.<region>.amazoncognito.com/oauth2/token). So the
 * server reads the same discovery document once per process and names each
 * such origin in `connect-src`, and no other. Until it has (a failed or slow
 * discovery is logged and retried a minute later), the policy names the
 * issuer's origin alone, as it would for a provider whose endpoints all live
 * there.
 */
export function consolePolicy(auth: ConsoleAuth, deps: ConsolePolicyDeps): () => Promise<string> {
  if (auth.kind !== "oidc") {
    const policy = policyConnectingTo([]);
    return () => Promise.resolve(policy);
  }
  const issuerOrigin = new URL(auth.issuer).origin;
  const withIssuerOnly = policyConnectingTo([issuerOrigin]);
  const timeoutMs = deps.discoveryTimeoutMs ?? DISCOVERY_TIMEOUT_MS;
  const send = deps.fetch ?? fetch;

  // One discovery at a time, shared by the pages that wait for it; kept for the process's life.
  let current: { policy: Promise<string>; retryAt: number } | undefined;
  const discover = () => {
    const attempt = { policy: Promise.resolve(withIssuerOnly), retryAt: Number.POSITIVE_INFINITY };
    attempt.policy = originsTheBrowserCalls(auth.issuer, timeoutMs, send).then(
      (origins) => policyConnectingTo([issuerOrigin, ...origins]),
      (error: unknown) => {
        attempt.retryAt = deps.clock().getTime() + RETRY_DISCOVERY_AFTER_MS;
        deps.log.warn("console: could not read the issuer's discovery document", {
          issuer: auth.issuer,
          error: error instanceof Error ? error.message : String(error),
          connectSrc: `'self' ${issuerOrigin}`,
        });
        return withIssuerOnly;
      },
    );
    return attempt;
  };
  return () => {
    if (current === undefined || deps.clock().getTime() >= current.retryAt) current = discover();
    return current.policy;
  };
}

function policyConnectingTo(origins: readonly string[]): string {
  return [
    "default-src 'self'",
    ["connect-src 'self'", ...new Set(origins)].join(" "),
    "img-src 'self' data:",
    "object-src 'none'",
    "base-uri 'none'",
    // The console's forms send fetch calls (their submit events are prevented), so no form posts
    // natively; form-action does not fall back to default-src, and without it a form injected
    // into the page could post what it holds (a typed API key) to any origin.
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
}

/** The origins of ENDPOINTS_THE_BROWSER_CALLS, each https (or plain http on loopback). */
async function originsTheBrowserCalls(
  issuer: string,
  timeoutMs: number,
  send: typeof fetch,
): Promise<string[]> {
  // OpenID Connect Discovery appends the well-known path to the issuer, path and all.
  const url = new URL(
    ".well-known/openid-configuration",
    issuer.endsWith("/") ? issuer : `${issuer}/`,
  );
  // The limit ends the wait itself, the body's read too, as well as aborting: Node 20's fetch can
  // lose an abort (see TimeLimit), and every console page then waited on the discovery for good.
  const limit = timeLimit(timeoutMs);
  let document: unknown;
  try {
    const response = await limit.within(send(url, { signal: limit.signal }));
    if (!response.ok) throw new Error(`${url.href} answered ${response.status}`);
    document = await limit.within(response.json());
  } finally {
    limit.end();
  }
  if (typeof document !== "object" || document === null) {
    throw new Error(`${url.href} is not a JSON object`);
  }
  const fields = document as Partial<Record<string, unknown>>;
  return ENDPOINTS_THE_BROWSER_CALLS.map((name) => {
    const value = fields[name];
    const endpoint = typeof value === "string" && URL.canParse(value) ? new URL(value) : null;
    if (endpoint === null || !(endpoint.protocol === "https:" || plainHttpAllowed(endpoint))) {
      throw new Error(`${url.href} names no https ${name}: ${String(value).slice(0, 200)}`);
    }
    return endpoint.origin;
  });
}
