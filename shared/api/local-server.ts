import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import type { ConsoleAssets } from "../console/assets.js";
import type { Engine } from "../engine.js";
import type { JobTypeCatalog } from "../job-types/registry.js";
import { createApiApp } from "./app.js";
import { type Authenticator, adminTenantsFrom } from "./auth.js";
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
}

export interface LocalServer {
  /** e.g. http://127.0.0.1:43127, no trailing slash. */
  readonly url: string;
  close(): Promise<void>;
}

/** The API on a plain Node HTTP server, for the sandbox and for tests over real HTTP. */
export async function startLocalServer(options: LocalServerOptions): Promise<LocalServer> {
  const auth = localAuthFromEnv(options.env ?? process.env);
  const app = createApiApp({
    engine: options.engine,
    jobTypes: options.jobTypes,
    adminTenants: adminTenantsFrom(options.env ?? process.env),
    authenticate: options.authenticate ?? auth.authenticate,
    ...(options.consoleAssets
      ? {
          console: {
            assets: options.consoleAssets,
            config: { auth: auth.console, jobTypes: options.jobTypes.accepted },
          },
        }
      : {}),
  });
  const hostname = options.hostname ?? "127.0.0.1";
  const { server, port } = await new Promise<{ server: ReturnType<typeof serve>; port: number }>(
    (resolve, reject) => {
      const started = serve(
        { fetch: app.fetch, port: options.port ?? 0, hostname },
        (info: AddressInfo) => resolve({ server: started, port: info.port }),
      );
      started.once("error", reject);
    },
  );
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
