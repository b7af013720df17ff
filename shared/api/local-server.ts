import { maxHeaderSize, Server, STATUS_CODES } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { serve } from "@hono/node-server";
import { HTTPException } from "hono/http-exception";
import { ENV, type Env } from "../config.js";
import type { ConsoleAssets } from "../console/assets.js";
import { parseConsolePollMs } from "../console/config.js";
import type { Engine } from "../engine.js";
import type { JobTypeCatalog } from "../job-types/registry.js";
import { createApiApp } from "./app.js";
import { type Authenticator, adminTenantsFrom } from "./auth.js";
import { ApiError, httpAnswerOf } from "./errors.js";
import { localAuthFromEnv } from "./local-auth.js";

export interface LocalServerOptions {
  readonly engine: Engine;
  /** 0 picks a free port. */
  readonly port?: number;
  readonly hostname?: string;
  /** The accepted job types and their payload schemas (jobTypeCatalog). */
  readonly jobTypes: JobTypeCatalog;
  /**
   * Where SCHEDULER_API_KEYS (or SCHEDULER_JWT_ISSUER and SCHEDULER_JWT_AUDIENCE) are read from;
   * default process.env. Print localAuthFromEnv(env).notice at startup.
   */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Replaces the bearer keys, e.g. to accept a fixed tenant in a test. */
  readonly authenticate?: Authenticator;
  /** Serves the web console at /console with this build (buildConsoleAssets()). */
  readonly consoleAssets?: ConsoleAssets;
  /** The request-rate buckets' monotonic clock (ApiOptions.elapsedMs); default performance.now. */
  readonly elapsedMs?: () => number;
}

export interface LocalServer {
  /** e.g. http://127.0.0.1:43127, no trailing slash. */
  readonly url: string;
  close(): Promise<void>;
}

/** The API on a plain Node HTTP server, for the sandbox and for tests over real HTTP. */
export async function startLocalServer(options: LocalServerOptions): Promise<LocalServer> {
  const auth = localAuthFromEnv(options.env ?? process.env, options.engine.clock);
  const app = createApiApp({
    engine: options.engine,
    jobTypes: options.jobTypes,
    adminTenants: adminTenantsFrom(options.env ?? process.env),
    authenticate: options.authenticate ?? auth.authenticate,
    ...(options.elapsedMs ? { elapsedMs: options.elapsedMs } : {}),
    ...(options.consoleAssets
      ? {
          console: {
            assets: options.consoleAssets,
            config: {
              auth: auth.console,
              jobTypes: options.jobTypes.accepted,
              ...pollIntervalFrom(options.env ?? process.env),
            },
          },
        }
      : {}),
  });
  const hostname = options.hostname ?? "127.0.0.1";
  const named = namedHere(hostname, options.env ?? process.env);
  const fetch: typeof app.fetch = (request, ...rest) =>
    named === null || named(new URL(request.url).hostname)
      ? app.fetch(request, ...rest)
      : notNamedHere(new URL(request.url).host);
  const { server, port } = await new Promise<{ server: ReturnType<typeof serve>; port: number }>(
    (resolve, reject) => {
      const started = serve({ fetch, port: options.port ?? 0, hostname }, (info: AddressInfo) =>
        resolve({ server: started, port: info.port }),
      );
      started.once("error", reject);
    },
  );
  if (server instanceof Server) server.on("clientError", answerParseRefusal);
  const host = hostname.includes(":") ? `[${hostname}]` : hostname;
  return {
    url: `http://${host}:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        // Keep-alive sockets would hold close() open until they time out.
        if ("closeAllConnections" in server) server.closeAllConnections();
      }),
  };
}

/** A loopback name: `localhost` and the names under it (RFC 6761), 127.0.0.0/8, `[::1]`. */
function isLoopbackName(name: string): boolean {
  const host = name.toLowerCase();
  return (
    host === "localhost" ||
    host.endsWith(".localhost") ||
    host === "[::1]" ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)
  );
}

/**
 * The names a server listening on a loopback address answers to (the Host a request names): the
 * loopback names, and API_URL's host, which may be a tunnel's way in for async targets; null for a
 * server listening elsewhere, which answers every name. A web page whose own name its DNS turns to
 * 127.0.0.1 (DNS rebinding) is the same origin to the browser, so its script could otherwise call
 * the API with the well-known development key, read every job's target headers, and have http
 * jobs post to the machine's private services, which the sandbox lets webhooks reach.
 */
function namedHere(hostname: string, env: Env): ((host: string) => boolean) | null {
  if (!isLoopbackName(hostname) && hostname !== "::1") return null;
  const apiUrl = env[ENV.apiUrl]?.trim();
  const tunnel = apiUrl && URL.canParse(apiUrl) ? new URL(apiUrl).hostname.toLowerCase() : null;
  return (host) => isLoopbackName(host) || host.toLowerCase() === tunnel;
}

function notNamedHere(host: string): Response {
  const { context } = new ApiError(
    403,
    "forbidden",
    `this server answers requests to a loopback name (localhost, 127.0.0.1, [::1]) or API_URL's host, not to ${JSON.stringify(host.slice(0, 200))}`,
  );
  return Response.json(context.body, {
    status: context.status,
    headers: { "Cache-Control": "no-store" },
  });
}

/** The console's live poll interval, when SCHEDULER_CONSOLE_POLL_MS sets one (ConsoleConfig). */
function pollIntervalFrom(env: Readonly<Record<string, string | undefined>>): {
  pollIntervalMs?: number;
} {
  const pollIntervalMs = parseConsolePollMs(env.SCHEDULER_CONSOLE_POLL_MS);
  return pollIntervalMs === undefined ? {} : { pollIntervalMs };
}

/** A refusal of Node's HTTP parser, as it throws it (`reason` is llhttp's words for what it met). */
type ParseError = Error & { readonly code?: string; readonly reason?: string };

/** The status Node itself answers each refusal with, and what the answer says. */
function refusalOf(error: ParseError): { status: 400 | 408 | 413 | 431; message: string } {
  switch (error.code) {
    case "HPE_HEADER_OVERFLOW":
      return {
        status: 431,
        message: `the request's headers are over the ${maxHeaderSize} bytes this server reads; send smaller ones`,
      };
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return {
        status: 413,
        message: "the request's chunk extensions are over what this server reads",
      };
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { status: 408, message: "the request did not arrive in time; send it again" };
    default:
      return {
        status: 400,
        message: `the request is not HTTP/1.1 the server can read: ${error.reason ?? error.code ?? error.message}`,
      };
  }
}

/**
 * A request Node's HTTP parser refuses (headers over its limit, a request line or header that is
 * no HTTP, a request not received in time) never reaches the app: Node answers it itself with a
 * bare status line and no body. Answered here instead in the API's one error shape, its status
 * and code as the app gives a refusal of the HTTP layer (httpAnswerOf), then the connection
 * closes, as Node closes it. As Node does, nothing is written to a connection whose peer has gone
 * or whose answer to an earlier request has begun: a second answer there would corrupt the first.
 */
function answerParseRefusal(error: ParseError, socket: Duplex): void {
  const inFlight = Reflect.get(socket, "_httpMessage") as { headersSent?: boolean } | null;
  if (error.code === "ECONNRESET" || !socket.writable || inFlight?.headersSent === true) {
    socket.destroy();
    return;
  }
  const refusal = refusalOf(error);
  const { status, body } = httpAnswerOf(new HTTPException(refusal.status, refusal));
  const text = JSON.stringify(body);
  socket.end(
    [
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ""}`,
      "Content-Type: application/json",
      `Content-Length: ${Buffer.byteLength(text, "utf8")}`,
      "Cache-Control: no-store",
      "Connection: close",
      "",
      text,
    ].join("\r\n"),
    () => socket.destroy(),
  );
}
