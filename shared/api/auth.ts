import { createHash, timingSafeEqual } from "node:crypto";
import { ENV, type Env } from "../config.js";

/**
 * Who is calling, as a tenant id, or null to answer 401. Every job belongs to
 * a tenant, and every read and write is scoped to the caller's.
 *
 * `env` is whatever the server adapter hands the app: the Lambda adapter's
 * `{ event, requestContext, lambdaContext }`, or Node's `{ incoming, outgoing }`.
 */
export type Authenticator = (request: AuthRequest) => string | null | Promise<string | null>;

interface AuthRequest {
  header(name: string): string | undefined;
  readonly env: unknown;
}

// Tenant ids go into storage keys joined by "#" (IDEMP#<tenant>#<key>), so "#" would make them
// ambiguous. "|" is in: Auth0 names its users provider|id (auth0|5f7c…, google-oauth2|1046…).
const TENANT_ID = /^[A-Za-z0-9._:/@+=,|-]{1,256}$/;
/** What a tenant id may hold, as messages say it (no comma where commas separate tenants). */
export const TENANT_ID_CHARS = "1 to 256 letters, digits and ._:/@+=|-, not . or ..";

/**
 * `.` and `..` are refused although their characters are a tenant id's: in a path they are dot
 * segments, which a URL resolves (escaped too), so `/tenants/{tenantId}/quotas` could never name
 * such a tenant and no admin could read or set its quotas.
 */
export function isValidTenantId(tenantId: string): boolean {
  return TENANT_ID.test(tenantId) && tenantId !== "." && tenantId !== "..";
}

/**
 * The tenants that may read and set any tenant's quota override (`ADMIN_TENANTS`, comma-separated
 * tenant ids as the authenticator names them, e.g. an operator role's ARN); none when unset. An
 * entry that is no tenant id is refused: no caller could ever be it, so its admin would be no one.
 */
export function adminTenantsFrom(env: Env = process.env): readonly string[] {
  const tenants = (env[ENV.adminTenants] ?? "")
    .split(",")
    .map((t) => t.trim())
    .filter((t) => t !== "");
  for (const tenant of tenants) {
    if (!isValidTenantId(tenant)) {
      throw new Error(
        `${ENV.adminTenants}: "${tenant.slice(0, 300)}" is not a tenant id (${TENANT_ID_CHARS})`,
      );
    }
  }
  return tenants;
}

// ---------------------------------------------------------------- local: bearer keys

const API_KEYS_ENV = "SCHEDULER_API_KEYS";
export const DEV_API_KEY = "local-dev-key";
const DEV_TENANT = "default";

export interface LocalApiKeys {
  /** key → tenant */
  readonly keys: ReadonlyMap<string, string>;
  /** True when SCHEDULER_API_KEYS is unset and only the development key is accepted. */
  readonly usingDevKey: boolean;
}

/** `SCHEDULER_API_KEYS="key1=tenantA,key2=tenantB"`; unset or empty → `local-dev-key` for tenant `default`. */
export function localApiKeys(env: Env = process.env): LocalApiKeys {
  const raw = env[API_KEYS_ENV]?.trim();
  if (!raw) return { keys: new Map([[DEV_API_KEY, DEV_TENANT]]), usingDevKey: true };
  const keys = new Map<string, string>();
  // Where each key was listed (1-based). A refusal names entries by their place and the tenant,
  // never the key: it is printed to the sandbox's stderr, and from there to whatever keeps it.
  const places = new Map<string, number>();
  for (const [index, entry] of raw.split(",").entries()) {
    const at = entry.indexOf("=");
    const key = entry.slice(0, at).trim();
    const tenant = entry.slice(at + 1).trim();
    // A key ends at its first '=': a key holding one (base64 padding) would be cut there and its
    // rest read as a tenant starting with '=', so such a tenant is refused rather than guessed at.
    if (
      at < 1 ||
      key === "" ||
      !/^[\x21-\x7E]+$/.test(key) ||
      tenant.startsWith("=") ||
      !isValidTenantId(tenant)
    ) {
      const given = at < 0 ? "no =tenant" : `tenant ${JSON.stringify(tenant.slice(0, 300))}`;
      throw new Error(
        `${API_KEYS_ENV}: entry ${index + 1} (${given}) is not key=tenant (key: visible ASCII without spaces or '='; tenant: ${TENANT_ID_CHARS})`,
      );
    }
    const first = places.get(key);
    if (first !== undefined)
      throw new Error(`${API_KEYS_ENV}: entries ${first} and ${index + 1} list the same key`);
    places.set(key, index + 1);
    keys.set(key, tenant);
  }
  return { keys, usingDevKey: false };
}

/** What a local server should print at startup, or null when keys are configured. */
export function localAuthNotice(env: Env = process.env): string | null {
  return localApiKeys(env).usingDevKey
    ? `${API_KEYS_ENV} is not set: accepting "Authorization: Bearer ${DEV_API_KEY}" for tenant "${DEV_TENANT}"`
    : null;
}

const digest = (value: string) => createHash("sha256").update(value).digest();

/** `Authorization: Bearer <key>`, compared in constant time against every configured key. */
export function bearerAuthenticator(keys: ReadonlyMap<string, string>): Authenticator {
  const known = [...keys].map(([key, tenant]) => ({ digest: digest(key), tenant }));
  return ({ header }) => {
    const match = /^Bearer +(\S+)\s*$/i.exec(header("authorization") ?? "");
    const presented = match?.[1];
    if (presented === undefined) return null;
    const candidate = digest(presented);
    let tenant: string | null = null;
    for (const entry of known) {
      if (timingSafeEqual(entry.digest, candidate)) tenant = entry.tenant;
    }
    return tenant;
  };
}

// ---------------------------------------------------------------- AWS: IAM principal

/** `requestContext.authorizer.iam` of an API Gateway HTTP API (payload v2) request with IAM auth. */
interface IamPrincipal {
  readonly accountId: string;
  readonly userArn: string;
  readonly userId?: string;
  readonly callerId?: string;
  readonly principalOrgId?: string | null;
}

/**
 * The mapping hook: which tenant an IAM principal acts for; null refuses it
 * (401). Replace it in functions/api/handler.ts to map principals your way,
 * e.g. several roles onto one tenant, or an organisation onto one tenant.
 */
export type TenantOfPrincipal = (principal: IamPrincipal) => string | null;

/**
 * The default: the principal itself. An assumed-role session
 * (`arn:aws:sts::123456789012:assumed-role/Reporter/i-0abc`) maps to its role
 * (`arn:aws:iam::123456789012:role/Reporter`), since each session has its own
 * name but all act for the same service; users and roots map to their ARN.
 * Any other principal is refused: a federated user
 * (`arn:aws:sts::123456789012:federated-user/bob`) is named by whoever called
 * GetFederationToken, and any IAM user allowed to call it may choose the same
 * name, so the name is no tenant's.
 */
export const defaultTenantOfPrincipal: TenantOfPrincipal = ({ userArn }) => {
  const assumed = /^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role\/([^/]+)\/[^/]+$/.exec(userArn);
  if (assumed) {
    const [, partition, account, role] = assumed;
    return `arn:${partition}:iam::${account}:role/${role}`;
  }
  return /^arn:aws[a-z-]*:iam::\d+:(user\/.+|root)$/.test(userArn) ? userArn : null;
};

export function iamAuthenticator(
  tenantOf: TenantOfPrincipal = defaultTenantOfPrincipal,
): Authenticator {
  return ({ env }) => {
    const principal = iamPrincipalOf(env);
    return principal ? tenantOf(principal) : null;
  };
}

// ---------------------------------------------------------------- AWS: JWT claims

/** `requestContext.authorizer.jwt.claims` of a request the HTTP API's JWT authorizer let through. */
export type JwtClaims = Readonly<Record<string, unknown>>;

/** The mapping hook for JWT callers: which tenant the token acts for; null refuses it (401). */
export type TenantOfClaims = (claims: JwtClaims) => string | null;

/** The prefix of tenants named by a token's subject, so they cannot be named by a `tenant_id` claim. */
const SUBJECT_TENANT_PREFIX = "sub:";

/**
 * API Gateway hands the function every claim as text: a JSON true or false as these words, and a
 * null (undocumented) likely as "null" (Go's "<nil>" holds characters no id takes), so each would
 * name one tenant shared by every token of the issuer that carries it. Refused as they are written, lowercase: JSON's literals have no other
 * case, so "Null" is an issuer's own string, not a stringified literal. Numbers arrive as their
 * digits, the tenant of the string; arrays ("[a b]") and objects hold characters no id takes.
 */
const STRINGIFIED_LITERALS: ReadonlySet<unknown> = new Set(["null", "true", "false"]);

/**
 * The claims of a verified token as API Gateway's payload 2.0 hands them to the function: each value
 * as text (a number as its digits, true and false as those words, null as "null", an array as
 * "[a b]"), so that a local server judges a token's JSON as the deployed API judges its text.
 */
export function claimsAsText(claims: Readonly<Record<string, unknown>>): JwtClaims {
  const asText = (value: unknown): string =>
    Array.isArray(value) ? `[${value.map(asText).join(" ")}]` : String(value);
  return Object.fromEntries(Object.entries(claims).map(([key, value]) => [key, asText(value)]));
}

/** A claim's value as a tenant's name: a string, none of the texts a non-string becomes. */
const nameOf = (claim: unknown): string | null =>
  typeof claim === "string" && !STRINGIFIED_LITERALS.has(claim) ? claim : null;

/**
 * The default: the `tenant_id` claim when the issuer puts one in its tokens,
 * else `sub:<sub>` (for a client-credentials token, the client). The two never
 * meet: a `tenant_id` starting with `sub:` is refused, so a token without the
 * claim whose subject happens to equal another tenant's id acts only as
 * `sub:<that id>`, never as that tenant. Either claim reading `null`, `true`
 * or `false` is refused, whether the issuer wrote it so or API Gateway made it
 * text (STRINGIFIED_LITERALS), so the local server and the deployed API agree.
 */
export const defaultTenantOfClaims: TenantOfClaims = (claims) => {
  if (claims.tenant_id !== undefined) {
    const tenant = nameOf(claims.tenant_id);
    return tenant !== null && !tenant.startsWith(SUBJECT_TENANT_PREFIX) && isValidTenantId(tenant)
      ? tenant
      : null;
  }
  const sub = nameOf(claims.sub);
  if (sub === null || sub === "") return null;
  const tenant = `${SUBJECT_TENANT_PREFIX}${sub}`;
  return isValidTenantId(tenant) ? tenant : null;
};

/** API Gateway has already verified the token's signature, issuer and audience. */
export function jwtAuthenticator(tenantOf: TenantOfClaims = defaultTenantOfClaims): Authenticator {
  return ({ env }) => {
    const claims = field(field(field(field(env, "requestContext"), "authorizer"), "jwt"), "claims");
    return typeof claims === "object" && claims !== null ? tenantOf(claims as JwtClaims) : null;
  };
}

function field(value: unknown, key: string): unknown {
  return typeof value === "object" && value !== null
    ? (value as Record<string, unknown>)[key]
    : undefined;
}

function iamPrincipalOf(env: unknown): IamPrincipal | null {
  const iam = field(field(field(env, "requestContext"), "authorizer"), "iam");
  const userArn = field(iam, "userArn");
  const accountId = field(iam, "accountId");
  if (typeof userArn !== "string" || typeof accountId !== "string") return null;
  const optional = (key: string) => {
    const value = field(iam, key);
    return typeof value === "string" ? value : undefined;
  };
  return {
    userArn,
    accountId,
    userId: optional("userId"),
    callerId: optional("callerId"),
    principalOrgId: optional("principalOrgId") ?? null,
  };
}
