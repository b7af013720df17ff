import type { Command } from "commander";
import { type ClientAuth, SchedulerClient } from "../index.js";
import { type CliIo, json, type OutputFormat } from "./output.js";

export const DEFAULT_API = "http://127.0.0.1:3000";
/** The sandbox's key when SCHEDULER_API_KEYS is unset (shared/api/auth.ts). */
export const SANDBOX_KEY = "local-dev-key";

export interface GlobalFlags {
  readonly api?: string;
  readonly key?: string;
  readonly profile?: string;
  readonly region?: string;
  readonly output: OutputFormat;
}

const LOOPBACK = new Set(["localhost", "127.0.0.1", "[::1]"]);

/**
 * How to authenticate: a key (--key, SCHEDULER_API_KEY) is sent as a bearer
 * token; else a profile (--profile) signs with SigV4; else a loopback API
 * (the sandbox) gets the sandbox's development key; else SigV4 with the AWS
 * SDK's default credential chain (AWS_PROFILE, SSO, environment keys, a role).
 */
export function authFrom(flags: GlobalFlags, api: string, io: CliIo): ClientAuth {
  const key = flags.key ?? io.env.SCHEDULER_API_KEY;
  if (key) return { kind: "bearer", key };
  const sigv4 = {
    kind: "sigv4" as const,
    ...(flags.profile ? { profile: flags.profile } : {}),
    ...(flags.region ? { region: flags.region } : {}),
  };
  if (flags.profile) return sigv4;
  if (LOOPBACK.has(new URL(api).hostname)) return { kind: "bearer", key: SANDBOX_KEY };
  return sigv4;
}

/** What every command's action gets: the client for the global flags, and how to print. */
class CommandContext {
  readonly client: SchedulerClient;
  readonly format: OutputFormat;

  constructor(
    readonly io: CliIo,
    flags: GlobalFlags,
  ) {
    const api = flags.api ?? io.env.SCHEDULER_API_URL ?? DEFAULT_API;
    this.client = new SchedulerClient({ baseUrl: api, auth: authFrom(flags, api, io) });
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
