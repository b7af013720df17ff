import * as oauth from "oauth4webapi";
import {
  CALLBACK_PATH,
  type ConsoleAuth,
  PROVIDER_TIMEOUT_MS,
  plainHttpAllowed,
} from "../shared/console/config.js";

/**
 * The credential the console sends as `Authorization: Bearer …`: a key typed
 * in (sandbox), or the access token of an OIDC sign-in (authorization code
 * with PKCE, a public client; the JWT stack). Kept in sessionStorage: other
 * tabs and other sites cannot read it, but a browser that brings a closed tab
 * back restores it with the tab, so only Sign out or the token's expiry ends it.
 */
const CREDENTIAL = "scheduler.credential";
const PENDING = "scheduler.signIn";
/**
 * Set by "Sign out" of an OIDC sign-in, in localStorage so that every tab of this browser sees it;
 * holds no secret. The console forgets the token, but the provider keeps its own session: without
 * this, the next person at the browser would be signed in as the last one by a click on "Sign in".
 */
const SIGNED_OUT = "scheduler.signedOut";

interface Credential {
  readonly token: string;
  /** Epoch ms; absent for a key. */
  readonly expiresAt?: number;
  readonly who?: string;
}

interface PendingSignIn {
  readonly verifier: string;
  readonly state: string;
  readonly nonce: string;
  readonly returnTo: string;
}

/**
 * Which sign-in this page is in, counted from its load: every sign-in and sign-out starts another.
 * An API answer to a request of an earlier one is dropped (console/api.ts).
 */
let session = 0;
export function currentSession(): number {
  return session;
}

export function currentCredential(): Credential | null {
  const raw = sessionStorage.getItem(CREDENTIAL);
  if (raw === null) return null;
  const credential = JSON.parse(raw) as Credential;
  // A token that expires within the next ten seconds would fail mid-request.
  if (credential.expiresAt !== undefined && credential.expiresAt < Date.now() + 10_000) {
    sessionStorage.removeItem(CREDENTIAL);
    return null;
  }
  return credential;
}

export function rememberKey(key: string): void {
  session += 1;
  sessionStorage.setItem(CREDENTIAL, JSON.stringify({ token: key } satisfies Credential));
}

export function signOut(): void {
  session += 1;
  sessionStorage.removeItem(CREDENTIAL);
}

/**
 * The user's own "Sign out" of an OIDC sign-in: the next sign-in in this browser asks the provider
 * to authenticate the user again (`prompt=login`) instead of reusing the session it still holds.
 * A 401 or an expired token only forgets the token: the same user signs in again as before.
 */
export function signOutOfProvider(): void {
  signOut();
  localStorage.setItem(SIGNED_OUT, "true");
}

type Oidc = Extract<ConsoleAuth, { kind: "oidc" }>;

/**
 * One request to the identity provider, read to its end, or an error naming the endpoint that did
 * not answer within PROVIDER_TIMEOUT_MS. The signal aborts the request itself, so an answer that
 * comes later is never read: it cannot send the tab to the provider or sign it in behind the
 * message.
 */
async function askProvider<T>(
  endpoint: string,
  url: URL | string,
  exchange: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const signal = AbortSignal.timeout(PROVIDER_TIMEOUT_MS);
  try {
    return await exchange(signal);
  } catch (error) {
    if (!signal.aborted) throw error;
    throw new Error(
      `${endpoint} (${String(url)}) did not answer within ${PROVIDER_TIMEOUT_MS / 1000} s; sign in again`,
    );
  }
}

async function discover(auth: Oidc): Promise<oauth.AuthorizationServer> {
  const issuer = new URL(auth.issuer);
  // Where oauth4webapi looks for it (OpenID Connect Discovery): the issuer's path, then this.
  const document = new URL(issuer);
  document.pathname = `${issuer.pathname.replace(/\/$/, "")}/.well-known/openid-configuration`;
  return askProvider(`${issuer.host}'s discovery document`, document, async (signal) => {
    const options = { [oauth.allowInsecureRequests]: plainHttpAllowed(issuer), signal };
    const response = await oauth.discoveryRequest(issuer, options);
    return oauth.processDiscoveryResponse(issuer, response);
  });
}

const redirectUri = () => new URL(CALLBACK_PATH, location.origin).href;

/** Off to the identity provider; it sends the browser back to /console/callback. */
export async function startSignIn(auth: Oidc, returnTo: string): Promise<void> {
  const server = await discover(auth);
  if (server.authorization_endpoint === undefined) {
    throw new Error(`${auth.issuer} has no authorization endpoint`);
  }
  const pending: PendingSignIn = {
    verifier: oauth.generateRandomCodeVerifier(),
    state: oauth.generateRandomState(),
    nonce: oauth.generateRandomNonce(),
    returnTo,
  };
  sessionStorage.setItem(PENDING, JSON.stringify(pending));
  const url = new URL(server.authorization_endpoint);
  url.searchParams.set("client_id", auth.clientId);
  url.searchParams.set("redirect_uri", redirectUri());
  url.searchParams.set("response_type", "code");
  url.searchParams.set("scope", auth.scope);
  url.searchParams.set("state", pending.state);
  url.searchParams.set("nonce", pending.nonce);
  url.searchParams.set("code_challenge", await oauth.calculatePKCECodeChallenge(pending.verifier));
  url.searchParams.set("code_challenge_method", "S256");
  if (localStorage.getItem(SIGNED_OUT) !== null) url.searchParams.set("prompt", "login");
  location.assign(url.href);
}

/** Back from the identity provider: the code and the verifier become an access token. */
export async function finishSignIn(auth: Oidc, callback: URL): Promise<string> {
  const raw = sessionStorage.getItem(PENDING);
  sessionStorage.removeItem(PENDING);
  if (raw === null) throw new Error("no sign-in was started in this tab; sign in again");
  const pending = JSON.parse(raw) as PendingSignIn;
  const server = await discover(auth);
  const client: oauth.Client = { client_id: auth.clientId };
  const params = authResponse(auth, server, client, callback, pending.state);
  const tokens = await askProvider(
    `${new URL(auth.issuer).host}'s token endpoint`,
    server.token_endpoint ?? auth.issuer,
    async (signal) => {
      const options = {
        [oauth.allowInsecureRequests]: plainHttpAllowed(new URL(auth.issuer)),
        signal,
      };
      const response = await oauth.authorizationCodeGrantRequest(
        server,
        client,
        oauth.None(),
        params,
        redirectUri(),
        pending.verifier,
        options,
      );
      return oauth.processAuthorizationCodeResponse(server, client, response, {
        expectedNonce: pending.nonce,
      });
    },
  );
  const claims = oauth.getValidatedIdTokenClaims(tokens);
  const credential: Credential = {
    token: tokens.access_token,
    ...(tokens.expires_in !== undefined
      ? { expiresAt: Date.now() + tokens.expires_in * 1000 }
      : {}),
    ...(typeof claims?.sub === "string" ? { who: claims.sub } : {}),
  };
  session += 1;
  sessionStorage.setItem(CREDENTIAL, JSON.stringify(credential));
  localStorage.removeItem(SIGNED_OUT);
  return pending.returnTo;
}

/**
 * The callback's parameters once its state is the tab's own. An error the provider sent back (the
 * user declined, the client is misconfigured) names the provider and quotes it: the library's own
 * message says only that there was one. Checked after the state, so the quoted text is the
 * provider's, not a link's.
 */
function authResponse(
  auth: Oidc,
  server: oauth.AuthorizationServer,
  client: oauth.Client,
  callback: URL,
  state: string,
): URLSearchParams {
  try {
    return oauth.validateAuthResponse(server, client, callback, state);
  } catch (error) {
    if (!(error instanceof oauth.AuthorizationResponseError)) throw error;
    const description = error.error_description ? `: ${error.error_description}` : "";
    throw new Error(
      `${new URL(auth.issuer).host} did not sign you in (${error.error}${description}); sign in again`,
    );
  }
}
