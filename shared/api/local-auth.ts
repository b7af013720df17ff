import { createRemoteJWKSet, type JWTPayload, jwtVerify } from "jose";
import { type Clock, systemClock } from "../clock.js";
import type { Env } from "../config.js";
import type { ConsoleAuth } from "../console/config.js";
import {
  type Authenticator,
  bearerAuthenticator,
  claimsAsText,
  defaultTenantOfClaims,
  localApiKeys,
  localAuthNotice,
  type TenantOfClaims,
} from "./auth.js";
import { ApiError } from "./errors.js";
import { defaultConsoleScope, scopesCarried, scopesRefusal } from "./oauth-scopes.js";

interface LocalJwtOptions {
  /** The OIDC issuer: its discovery document names the keys tokens are signed with. */
  readonly issuer: string;
  /** A token is accepted when its `aud` names one of these. */
  readonly audience: readonly string[];
  /** A token must carry one of these in `scope` or `scp`, when there are any (jwtScopes). */
  readonly scopes: readonly string[];
  /** The current time that `exp`, `nbf` and `iat` are checked against. */
  readonly now: Clock;
}

/**
 * The stack's JWT option on a local server: what API Gateway's JWT authorizer
 * does before the API function sees a request (signature against the
 * issuer's keys, `iss`, `aud`, an `exp` after now, and `nbf` and `iat` not
 * after now), then the same claims-to-tenant mapping as the deployed API
 * (`jwtAuthenticator`); with scopes, a token carrying none of them is a 403,
 * as API Gateway answers it. jose's own checks take a token without `exp` and
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
    const carried = scopesCarried(claims);
    if (options.scopes.length > 0 && !options.scopes.some((scope) => carried.includes(scope))) {
      const wanted = options.scopes.join(" ");
      throw new ApiError(403, "forbidden", `the token carries none of the scopes ${wanted}`, {
        headers: {
          "WWW-Authenticate": `Bearer realm="scheduler", error="insufficient_scope", scope="${wanted}"`,
        },
      });
    }
    return tenantOf(claimsAsText(claims));
  };
}

const withSlash = (url: string) => (url.endsWith("/") ? url : `${url}/`);

const LOCAL_JWT_ENV = {
  issuer: "SCHEDULER_JWT_ISSUER",
  audience: "SCHEDULER_JWT_AUDIENCE",
  consoleClientId: "SCHEDULER_CONSOLE_CLIENT_ID",
  consoleScope: "SCHEDULER_CONSOLE_SCOPE",
  scopes: "SCHEDULER_JWT_SCOPES",
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
 * SCHEDULER_CONSOLE_CLIENT_ID (default: the first audience). SCHEDULER_JWT_SCOPES
 * (space-separated) are the stack's jwtScopes: a token must carry one, and the
 * console asks for them (SCHEDULER_CONSOLE_SCOPE, default openid and them).
 */
export function localAuthFromEnv(env: Env = process.env, now: Clock = systemClock): LocalAuth {
  const issuer = env[LOCAL_JWT_ENV.issuer]?.trim();
  const audience = (env[LOCAL_JWT_ENV.audience] ?? "")
    .split(",")
    .map((a) => a.trim())
    .filter((a) => a !== "");
  const scopesText = env[LOCAL_JWT_ENV.scopes];
  if (!issuer && audience.length === 0) {
    if (scopesText !== undefined && scopesText !== "")
      throw new Error(
        `${LOCAL_JWT_ENV.scopes} applies only with ${LOCAL_JWT_ENV.issuer} and ${LOCAL_JWT_ENV.audience}, as the stack's jwtScopes only with jwtIssuer: without them the server takes API keys, which carry no scopes`,
      );
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
  const scopesWrong =
    scopesText === undefined || scopesText === "" ? null : scopesRefusal(scopesText);
  if (scopesWrong !== null) throw new Error(`${LOCAL_JWT_ENV.scopes} ${scopesWrong}`);
  const scopes = scopesText ? [...new Set(scopesText.split(" "))] : [];
  const consoleScope = env[LOCAL_JWT_ENV.consoleScope]?.trim() || defaultConsoleScope(scopes);
  // As the stack's synth: a console without one of the scopes would be refused every call.
  if (scopes.length > 0 && !scopes.some((scope) => consoleScope.split(" ").includes(scope))) {
    throw new Error(
      `${LOCAL_JWT_ENV.consoleScope} "${consoleScope}" carries none of ${LOCAL_JWT_ENV.scopes} "${scopes.join(" ")}": add one, or leave ${LOCAL_JWT_ENV.consoleScope} unset (openid and the scopes)`,
    );
  }
  return {
    authenticate: localJwtAuthenticator({ issuer, audience, scopes, now }),
    console: { kind: "oidc", issuer, clientId, scope: consoleScope },
    notice: `tokens from ${issuer} for ${audience.join(", ")} (${LOCAL_JWT_ENV.issuer}); the console signs in there as client ${clientId}`,
  };
}
