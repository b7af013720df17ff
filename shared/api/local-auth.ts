import { createRemoteJWKSet, type JWTPayload, jwtVerify } from "jose";
import { type Clock, systemClock } from "../clock.js";
import type { Env } from "../config.js";
import type { ConsoleAuth } from "../console/config.js";
import {
  type Authenticator,
  bearerAuthenticator,
  defaultTenantOfClaims,
  type JwtClaims,
  localApiKeys,
  localAuthNotice,
  type TenantOfClaims,
} from "./auth.js";

interface LocalJwtOptions {
  /** The OIDC issuer: its discovery document names the keys tokens are signed with. */
  readonly issuer: string;
  /** A token is accepted when its `aud` names one of these. */
  readonly audience: readonly string[];
  /** The current time that `exp`, `nbf` and `iat` are checked against. */
  readonly now: Clock;
}

/**
 * The stack's JWT option on a local server: what API Gateway's JWT authorizer
 * does before the API function sees a request (signature against the
 * issuer's keys, `iss`, `aud`, an `exp` after now, and `nbf` and `iat` not
 * after now), then the same claims-to-tenant mapping as the deployed API
 * (`jwtAuthenticator`). jose's own checks take a token without `exp` and
 * leave `iat` unchecked without `maxTokenAge`; the authorizer refuses both, so
 * a token the local server takes would be refused once deployed.
 */
function localJwtAuthenticator(
  options: LocalJwtOptions,
  tenantOf: TenantOfClaims = defaultTenantOfClaims,
): Authenticator {
  let keys: ReturnType<typeof createRemoteJWKSet> | undefined;
  const keySet = async () => {
    if (keys) return keys;
    const discovery = new URL(".well-known/openid-configuration", withSlash(options.issuer));
    const response = await fetch(discovery);
    if (!response.ok) throw new Error(`${discovery}: ${response.status}`);
    const { jwks_uri: jwksUri } = (await response.json()) as { jwks_uri?: unknown };
    if (typeof jwksUri !== "string") throw new Error(`${discovery} names no jwks_uri`);
    keys = createRemoteJWKSet(new URL(jwksUri));
    return keys;
  };
  return async ({ header }) => {
    const token = /^Bearer +(\S+)\s*$/i.exec(header("authorization") ?? "")?.[1];
    if (token === undefined) return null;
    const now = options.now();
    let claims: JWTPayload;
    try {
      ({ payload: claims } = await jwtVerify(token, await keySet(), {
        issuer: options.issuer,
        audience: [...options.audience],
        requiredClaims: ["exp"],
        currentDate: now,
      }));
    } catch {
      return null;
    }
    // jose has checked that an iat present is a number; with no clock tolerance, as for exp and nbf.
    if (claims.iat !== undefined && claims.iat > Math.floor(now.getTime() / 1000)) return null;
    return tenantOf(claims as JwtClaims);
  };
}

const withSlash = (url: string) => (url.endsWith("/") ? url : `${url}/`);

const LOCAL_JWT_ENV = {
  issuer: "SCHEDULER_JWT_ISSUER",
  audience: "SCHEDULER_JWT_AUDIENCE",
  consoleClientId: "SCHEDULER_CONSOLE_CLIENT_ID",
  consoleScope: "SCHEDULER_CONSOLE_SCOPE",
} as const;

export interface LocalAuth {
  readonly authenticate: Authenticator;
  /** How the console signs in against this server. */
  readonly console: ConsoleAuth;
  /** What the server should print at startup about it. */
  readonly notice: string | null;
}

/**
 * Bearer keys (SCHEDULER_API_KEYS), or, with SCHEDULER_JWT_ISSUER and
 * SCHEDULER_JWT_AUDIENCE set, the stack's JWT option: tokens from that issuer,
 * and the console signing in there as the public client
 * SCHEDULER_CONSOLE_CLIENT_ID (default: the first audience).
 */
export function localAuthFromEnv(env: Env = process.env, now: Clock = systemClock): LocalAuth {
  const issuer = env[LOCAL_JWT_ENV.issuer]?.trim();
  const audience = (env[LOCAL_JWT_ENV.audience] ?? "")
    .split(",")
    .map((a) => a.trim())
    .filter((a) => a !== "");
  if (!issuer && audience.length === 0) {
    return {
      authenticate: bearerAuthenticator(localApiKeys(env).keys),
      console: { kind: "key" },
      notice: localAuthNotice(env),
    };
  }
  const clientId = env[LOCAL_JWT_ENV.consoleClientId]?.trim() || audience[0] || "";
  if (!issuer || !URL.canParse(issuer) || audience.length === 0 || clientId === "") {
    throw new Error(
      `${LOCAL_JWT_ENV.issuer} (an issuer URL) and ${LOCAL_JWT_ENV.audience} (comma-separated audiences) go together`,
    );
  }
  return {
    authenticate: localJwtAuthenticator({ issuer, audience, now }),
    console: {
      kind: "oidc",
      issuer,
      clientId,
      scope: env[LOCAL_JWT_ENV.consoleScope]?.trim() || "openid",
    },
    notice: `tokens from ${issuer} for ${audience.join(", ")} (${LOCAL_JWT_ENV.issuer}); the console signs in there as client ${clientId}`,
  };
}
