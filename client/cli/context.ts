import { type Command, InvalidArgumentError } from "commander";
import { bearerKeyProblem } from "../auth.js";
import { type ClientAuth, SchedulerClient } from "../index.js";
import { isLoopback, plainHttpKeyProblem } from "../plain-http.js";
import { signingRegion } from "../sigv4.js";
import { MAX_TIMEOUT_MS } from "../transport.js";
import { CliExit, EXIT } from "./exit-codes.js";
import { type CliIo, json, type OutputFormat } from "./output.js";

export const DEFAULT_API = "http://127.0.0.1:3000";
/** The sandbox's key when SCHEDULER_API_KEYS is unset (shared/api/auth.ts). */
export const SANDBOX_KEY = "local-dev-key";

export interface GlobalFlags {
  readonly api?: string;
  readonly key?: string;
  readonly profile?: string;
  readonly region?: string;
  /** --request-timeout, in seconds. */
  readonly requestTimeout?: number;
  readonly allowInsecureHttp?: boolean;
  readonly output: OutputFormat;
}

/** A number of seconds above 0, fractions allowed (`0.5`), up to the longest timer the client takes. */
export function positiveSeconds(raw: string): number {
  const value = Number(raw);
  const most = Math.floor(MAX_TIMEOUT_MS / 1000);
  if (raw.trim() === "" || !Number.isFinite(value) || value <= 0 || value > most)
    throw new InvalidArgumentError(
      `"${raw}" is not a number of seconds above 0 and up to ${most}.`,
    );
  return value;
}

/**
 * A bearer key over plain http to a host that is not loopback (plainHttpKeyProblem) is refused,
 * before any request, unless the user says --allow-insecure-http.
 */
function plainHttpCheck(source: string, api: URL, flags: GlobalFlags): void {
  const problem = plainHttpKeyProblem(api);
  if (problem === null || flags.allowInsecureHttp) return;
  throw new CliExit(
    EXIT.usage,
    `${source}: ${problem}: use an https URL, or --allow-insecure-http`,
  );
}

/**
 * How to authenticate: a key (--key, SCHEDULER_API_KEY) is sent as a bearer
 * token; else a profile (--profile) signs with SigV4; else a loopback API
 * (the sandbox) gets the sandbox's development key; else SigV4 with the AWS
 * SDK's default credential chain (AWS_PROFILE, SSO, environment keys, a role).
 */
export function authFrom(flags: GlobalFlags, api: string, io: CliIo): ClientAuth {
  // An empty --key (`--key "$KEY"` with KEY unset) is refused below, not read as no key: another
  // key, the sandbox's or SigV4's, would be sent in its place. An empty SCHEDULER_API_KEY is unset.
  const key = flags.key ?? (io.env.SCHEDULER_API_KEY || undefined);
  if (key !== undefined) {
    const source = flags.key !== undefined ? "--key" : "SCHEDULER_API_KEY";
    const problem = bearerKeyProblem(key);
    if (problem !== null) throw new CliExit(EXIT.usage, `${source}: ${problem}`);
    plainHttpCheck(source, new URL(api), flags);
    return { kind: "bearer", key };
  }
  const sigv4 = {
    kind: "sigv4" as const,
    ...(flags.profile ? { profile: flags.profile } : {}),
    ...(flags.region ? { region: flags.region } : {}),
  };
  if (flags.profile) return sigv4;
  if (isLoopback(new URL(api).hostname)) return { kind: "bearer", key: SANDBOX_KEY };
  return sigv4;
}

/**
 * The API's URL from --api, else SCHEDULER_API_URL, else the sandbox's. One that is not an
 * http(s) URL (`127.0.0.1:3000`, `localhost`) is a usage error naming where it came from, before
 * any request: fetch would otherwise fail as if the API were down, or the URL parser with no name.
 * So is one with a user name or password in it.
 */
function apiUrlFrom(flags: GlobalFlags, io: CliIo): string {
  const [source, api] =
    flags.api !== undefined
      ? ["--api", flags.api]
      : io.env.SCHEDULER_API_URL !== undefined
        ? ["SCHEDULER_API_URL", io.env.SCHEDULER_API_URL]
        : ["the default", DEFAULT_API];
  const protocol = URL.canParse(api) ? new URL(api).protocol : null;
  if (protocol !== "http:" && protocol !== "https:")
    throw new CliExit(
      EXIT.usage,
      `${source}: ${JSON.stringify(api)} is not an http(s) URL, such as ${DEFAULT_API} or the stack's ApiUrl`,
    );
  // fetch refuses such a URL on every request, quoting it whole: the password would be printed.
  const url = new URL(api);
  if (url.username !== "" || url.password !== "")
    throw new CliExit(
      EXIT.usage,
      `${source}: the URL holds a user name or password (${url.protocol}//…@${url.host}), which is not sent: give the URL without it, and the credentials with --key, SCHEDULER_API_KEY or --profile`,
    );
  return api;
}

/**
 * The auth with the region SigV4 signs for: --region, else the one an execute-api host names, else
 * AWS_REGION or AWS_DEFAULT_REGION. None (a custom domain, the sandbox with --profile) is a usage
 * error naming --region, before any request: it was thrown as a failure (exit 1).
 */
function withRegion(auth: ClientAuth, api: string, io: CliIo): ClientAuth {
  if (auth.kind !== "sigv4" || auth.region !== undefined) return auth;
  try {
    return { ...auth, region: signingRegion(new URL(api), io.env) };
  } catch (error) {
    throw new CliExit(EXIT.usage, `${(error as Error).message}, or give --region`);
  }
}

/** What every command's action gets: the client for the global flags, and how to print. */
class CommandContext {
  readonly client: SchedulerClient;
  readonly format: OutputFormat;

  constructor(
    readonly io: CliIo,
    flags: GlobalFlags,
  ) {
    const api = apiUrlFrom(flags, io);
    this.client = new SchedulerClient({
      baseUrl: api,
      auth: withRegion(authFrom(flags, api, io), api, io),
      ...(flags.requestTimeout === undefined
        ? {}
        : { timeoutMs: Math.ceil(flags.requestTimeout * 1000) }),
      // The CLI's clock is the client's: a Retry-After date's `try again in N s` counts from it.
      retry: { ...(io.retrySleep && { sleep: io.retrySleep }), ...(io.now && { now: io.now }) },
    });
    this.format = flags.output;
  }

  /** JSON as the API answered it, or `table(value)` for people. */
  print<T>(value: T, table: (value: T) => string): void {
    this.io.stdout(`${this.format === "json" ? json(value) : table(value)}\n`);
  }
}

/** The context for the command whose action runs (its own options merged with the program's). */
export function contextOf(command: Command, io: CliIo): CommandContext {
  return new CommandContext(io, command.optsWithGlobals<GlobalFlags>());
}
