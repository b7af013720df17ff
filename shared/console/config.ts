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
  /**
   * How often the live pages poll, in place of their own intervals (the job and its runs 2 s, the
   * lists 3 s): the sandbox's SCHEDULER_CONSOLE_POLL_MS, which the console's tests set short so
   * that what they wait for lands sooner. Unset (a deployed stack, the sandbox by default): their own.
   */
  readonly pollIntervalMs?: number;
}

export const CONSOLE_PATH = "/console";
export const DOCS_PATH = "/docs";
/** Where the identity provider sends the browser back with the authorization code. */
export const CALLBACK_PATH = `${CONSOLE_PATH}/callback`;

/**
 * How long the console's sign-in waits for each of the identity provider's answers (its discovery
 * document, its token endpoint) before it tells the user so: a person is watching the page.
 */
export const PROVIDER_TIMEOUT_MS = 15_000;

/** SCHEDULER_CONSOLE_POLL_MS: unset or empty is none; anything but a whole number of 100 or more throws. */
export function parseConsolePollMs(text: string | undefined): number | undefined {
  if (text === undefined || text === "") return undefined;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 100)
    throw new Error(
      `SCHEDULER_CONSOLE_POLL_MS must be a whole number of milliseconds, 100 or more: ${text}`,
    );
  return value;
}

/**
 * Plain http is for an identity provider on this machine only (a local one in
 * development); anywhere else the console talks to it over https.
 */
export function plainHttpAllowed(url: URL): boolean {
  return url.protocol === "http:" && ["localhost", "127.0.0.1", "[::1]"].includes(url.hostname);
}

/**
 * The console's sign-in as the stack hands it to the API function (CONSOLE_AUTH,
 * JSON); unset means IAM, where the console can only explain itself.
 */
export function parseConsoleAuth(text: string | undefined): ConsoleAuth {
  if (text === undefined || text === "") return { kind: "iam" };
  const value = JSON.parse(text) as Partial<Record<string, unknown>>;
  if (value.kind === "iam" || value.kind === "key") return { kind: value.kind };
  const { issuer, clientId, scope } = value;
  if (
    value.kind === "oidc" &&
    typeof issuer === "string" &&
    typeof clientId === "string" &&
    typeof scope === "string"
  ) {
    return { kind: "oidc", issuer, clientId, scope };
  }
  throw new Error(`CONSOLE_AUTH is not a console sign-in: ${text.slice(0, 200)}`);
}
