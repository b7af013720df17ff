import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import type { Engine } from "../engine.js";
import type { JobTypeCatalog } from "../job-types/registry.js";
import { createApiApp } from "./app.js";
import { type Authenticator, bearerAuthenticator, localApiKeys } from "./auth.js";

export interface LocalServerOptions {
  readonly engine: Engine;
  /** 0 picks a free port. */
  readonly port?: number;
  readonly hostname?: string;
  /** The accepted job types and their payload schemas (jobTypeCatalog). */
  readonly jobTypes: JobTypeCatalog;
  /** Where SCHEDULER_API_KEYS is read from; default process.env. Print localAuthNotice(env) at startup. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Replaces the bearer keys, e.g. to accept a fixed tenant in a test. */
  readonly authenticate?: Authenticator;
}

export interface LocalServer {
  /** e.g. http://127.0.0.1:43127, no trailing slash. */
  readonly url: string;
  close(): Promise<void>;
}

/** The API on a plain Node HTTP server, for the sandbox and for tests over real HTTP. */
export async function startLocalServer(options: LocalServerOptions): Promise<LocalServer> {
  const authenticate =
    options.authenticate ?? bearerAuthenticator(localApiKeys(options.env ?? process.env).keys);
  const app = createApiApp({ engine: options.engine, jobTypes: options.jobTypes, authenticate });
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
