/**
 * The OAuth scopes a JWT-authorized route requires (the stack's `jwtScopes`, the local server's
 * SCHEDULER_JWT_SCOPES), read one way for both, so that the local server takes what the deployed
 * API takes.
 */

/** Scope tokens (RFC 6749: visible ASCII but `"` and `\`), one space between each two. */
export const OAUTH_SCOPES = /^[\x21\x23-\x5B\x5D-\x7E]+( [\x21\x23-\x5B\x5D-\x7E]+)*$/;

/** API Gateway's quota of authorization scopes on one route; it cannot be raised. */
const MAX_SCOPES_PER_ROUTE = 10;

/** Why `text` (space-separated scopes) is no route's scopes, or null when it is. */
export function scopesRefusal(text: string): string | null {
  if (!OAUTH_SCOPES.test(text)) {
    return `must be space-separated OAuth scopes (visible ASCII but " and \\, one space between two), got ${JSON.stringify(text.slice(0, 100))}`;
  }
  const distinct = new Set(text.split(" ")).size;
  return distinct > MAX_SCOPES_PER_ROUTE
    ? `names ${distinct} scopes, and API Gateway takes at most ${MAX_SCOPES_PER_ROUTE} on a route`
    : null;
}

/** What the console asks for unless told: openid, and the scopes its calls need one of. */
export const defaultConsoleScope = (scopes: readonly string[]): string =>
  [...new Set(["openid", ...scopes])].join(" ");

/**
 * The scopes a token carries as API Gateway reads them: its `scp` claim when it has one, else its
 * `scope`; a claim's text split at white space, or an array's strings (Okta's `scp`).
 */
export function scopesCarried(claims: Readonly<Record<string, unknown>>): string[] {
  const claim = claims.scp !== undefined ? claims.scp : claims.scope;
  if (typeof claim === "string") return claim.split(/\s+/).filter((scope) => scope !== "");
  return Array.isArray(claim) ? claim.filter((scope) => typeof scope === "string") : [];
}
