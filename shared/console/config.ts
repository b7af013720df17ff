/**
 * What the console page needs to know about the server it came from, embedded
 * in the page (no request before the first paint). The browser code imports
 * these types too, so this module imports nothing.
 */
export type ConsoleAuth =
  /** A bearer key typed into the console: the sandbox's SCHEDULER_API_KEYS. */
  | { readonly kind: "key" }
  /**
   * OIDC sign-in (authorization code with PKCE, a public client): the access
   * token goes to the API as a bearer token, which the JWT authorizer checks.
   */
  | {
      readonly kind: "oidc";
      readonly issuer: string;
      readonly clientId: string;
      readonly scope: string;
    }
  /** IAM (SigV4): browsers cannot sign; the console says so and points at the CLI. */
  | { readonly kind: "iam" };

export interface ConsoleConfig {
  readonly auth: ConsoleAuth;
  /** The job types this deployment accepts, for the create form. */
  readonly jobTypes: readonly string[];
}

export const CONSOLE_PATH = "/console";
export const DOCS_PATH = "/docs";
/** Where the identity provider sends the browser back with the authorization code. */
export const CALLBACK_PATH = `${CONSOLE_PATH}/callback`;
