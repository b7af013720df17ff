import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ConsolePolicyDeps } from "../../shared/api/console-policy.js";
import { consoleRouter } from "../../shared/api/console-router.js";
import { docsRouter } from "../../shared/api/docs-router.js";
import { localAuthFromEnv } from "../../shared/api/local-auth.js";
import { sleep } from "../../shared/clock.js";
import { consoleAssetsFrom } from "../../shared/console/assets.js";
import {
  type ConsoleConfig,
  parseConsoleAuth,
  parseConsolePollMs,
} from "../../shared/console/config.js";
import type { Logger } from "../../shared/observability.js";

const assets = consoleAssetsFrom(
  new Map([
    ["app.js", "console.log('app')"],
    ["app.css", "body{}"],
  ]),
);

/**
 * An identity provider on loopback shaped like Amazon Cognito: the issuer
 * (with a path, like a user pool's) on one origin, its token endpoint on
 * another, and endpoints the console never calls (userinfo, end session) on a
 * third. Each test sets what the discovery document answers.
 */
let idp: Server;
let issuerOrigin: string;
let issuer: string;
let discovery: { status: number; body: Record<string, unknown> } | "no answer";
let discoveryRequests: number;
const TOKEN_ORIGIN = "http://localhost:8443";
const ELSEWHERE = "http://[::1]:9443";
const cognitoShaped = (): Record<string, unknown> => ({
  issuer,
  authorization_endpoint: `${TOKEN_ORIGIN}/oauth2/authorize`,
  token_endpoint: `${TOKEN_ORIGIN}/oauth2/token`,
  userinfo_endpoint: `${ELSEWHERE}/oauth2/userInfo`,
  end_session_endpoint: `${ELSEWHERE}/logout`,
  jwks_uri: `${issuer}/.well-known/jwks.json`,
});

beforeAll(async () => {
  idp = createServer((req, res) => {
    if (req.url !== "/eu-west-1_pool/.well-known/openid-configuration") {
      res.writeHead(404).end();
      return;
    }
    discoveryRequests += 1;
    if (discovery === "no answer") return; // Holds the request until the client gives up.
    res.writeHead(discovery.status, { "Content-Type": "application/json" });
    res.end(JSON.stringify(discovery.body));
  });
  await new Promise<void>((resolve) => idp.listen(0, "127.0.0.1", resolve));
  issuerOrigin = `http://127.0.0.1:${(idp.address() as AddressInfo).port}`;
  issuer = `${issuerOrigin}/eu-west-1_pool`;
});

afterAll(async () => {
  idp.closeAllConnections();
  await new Promise((resolve) => idp.close(resolve));
});

let now: Date;
let warnings: { message: string; fields?: Record<string, unknown> }[];
let deps: ConsolePolicyDeps;
beforeEach(() => {
  discovery = { status: 200, body: cognitoShaped() };
  discoveryRequests = 0;
  now = new Date("2026-12-01T20:00:00Z");
  warnings = [];
  const log: Logger = {
    debug() {},
    info() {},
    warn: (message, fields) => warnings.push({ message, ...(fields ? { fields } : {}) }),
    error() {},
  };
  deps = { clock: () => now, log, discoveryTimeoutMs: 500 };
});

const oidc = (): ConsoleConfig => ({
  auth: {
    kind: "oidc",
    issuer,
    clientId: "</script><script>alert(1)</script>",
    scope: "openid",
  },
  jobTypes: ["noop"],
});

const connectSrc = async (app: ReturnType<typeof consoleRouter>, path = "/console") => {
  const policy = (await app.request(path)).headers.get("Content-Security-Policy") ?? "";
  return /(?:^|; )connect-src ([^;]*)/.exec(policy)?.[1];
};

describe("console pages", () => {
  it("answers every path under /console with the page, its configuration embedded inert", async () => {
    const config = oidc();
    const app = consoleRouter({ assets, config }, deps);
    for (const path of ["/console", "/console/jobs/01ABC", "/console/callback?code=x"]) {
      const response = await app.request(path);
      expect(response.status, path).toBe(200);
      const html = await response.text();
      expect(html).not.toContain("<script>alert(1)");
      const json = /<script id="console-config" type="application\/json">(.*?)<\/script>/s.exec(
        html,
      )?.[1];
      expect(JSON.parse(json ?? "")).toEqual(config);
      expect(html).toContain(`/console/assets/app.js?v=${assets.version}`);
      // Scripts and styles from the page's own origin only.
      expect(response.headers.get("Content-Security-Policy")).toContain("default-src 'self'");
    }
  });

  it("serves this build's files for a year, any other request for them unconditionally fresh", async () => {
    const app = consoleRouter({ assets, config: oidc() }, deps);
    const current = await app.request(`/console/assets/app.js?v=${assets.version}`);
    expect(current.headers.get("Cache-Control")).toBe("public, max-age=31536000, immutable");
    expect(current.headers.get("Content-Type")).toBe("text/javascript; charset=utf-8");
    expect(await current.text()).toBe("console.log('app')");
    const stale = await app.request("/console/assets/app.css?v=0000");
    expect(stale.headers.get("Cache-Control")).toBe("no-cache");
    expect((await app.request("/console/assets/secrets.json")).status).toBe(404);
  });

  it("is never framed, sniffed, named in a Referer or kept by its opener; runs no inline script; its files are not sniffed", async () => {
    const app = consoleRouter({ assets, config: oidc() }, deps);
    const directives = (policy: string | null) =>
      new Map((policy ?? "").split("; ").map((d) => [d.split(" ")[0], d.split(" ").slice(1)]));
    for (const path of ["/console", "/console/callback?code=x&state=y", "/console/jobs/01ABC"]) {
      const response = await app.request(path);
      const policy = directives(response.headers.get("Content-Security-Policy"));
      // Clickjacking: no page of another origin (or this one) may frame the console.
      expect(policy.get("frame-ancestors"), path).toEqual(["'none'"]);
      // Scripts from the page's origin only: no inline script, no eval, no <base> to move them.
      expect(policy.get("script-src") ?? policy.get("default-src"), path).toEqual(["'self'"]);
      expect(policy.get("base-uri"), path).toEqual(["'none'"]);
      expect(policy.get("object-src"), path).toEqual(["'none'"]);
      // Forms post nowhere (the console's send fetch calls); form-action has no default-src fallback.
      expect(policy.get("form-action"), path).toEqual(["'none'"]);
      expect(response.headers.get("X-Content-Type-Options"), path).toBe("nosniff");
      // The callback's address holds the authorization code: no request from it may carry it.
      expect(response.headers.get("Referrer-Policy"), path).toBe("no-referrer");
      // A page that opened the console (window.open) keeps no handle to it, so cannot later send
      // its tab to a look-alike sign-in; the OIDC sign-in navigates the tab itself, no popup.
      expect(response.headers.get("Cross-Origin-Opener-Policy"), path).toBe("same-origin");
    }
    for (const file of ["app.js", "app.css"]) {
      const response = await app.request(`/console/assets/${file}?v=${assets.version}`);
      expect(response.headers.get("X-Content-Type-Options"), file).toBe("nosniff");
    }
  });

  it("says the console was not built when the bundle carries none", async () => {
    const response = await consoleRouter({ assets: null, config: oidc() }, deps).request(
      "/console",
    );
    expect(response.status).toBe(503);
    expect(await response.text()).toContain("not built");
  });
});

describe("the console page's Content-Security-Policy", () => {
  it("lets the browser reach the issuer and a token endpoint on another origin, and nothing else there", async () => {
    const app = consoleRouter({ assets, config: oidc() }, deps);
    expect(await connectSrc(app)).toBe(`'self' ${issuerOrigin} ${TOKEN_ORIGIN}`);
    expect(await connectSrc(app, "/console/callback?code=x")).toBe(
      `'self' ${issuerOrigin} ${TOKEN_ORIGIN}`,
    );
    // Read once per process, not once per page.
    expect(discoveryRequests).toBe(1);
    expect(warnings).toEqual([]);
  });

  it("names an origin once when the token endpoint is on the issuer's", async () => {
    discovery = { status: 200, body: { ...cognitoShaped(), token_endpoint: `${issuer}/token` } };
    const app = consoleRouter({ assets, config: oidc() }, deps);
    expect(await connectSrc(app)).toBe(`'self' ${issuerOrigin}`);
  });

  it("reaches no provider without OIDC sign-in", async () => {
    for (const auth of [{ kind: "key" }, { kind: "iam" }] as const) {
      const app = consoleRouter({ assets, config: { auth, jobTypes: [] } }, deps);
      expect(await connectSrc(app)).toBe("'self'");
    }
    expect(discoveryRequests).toBe(0);
  });

  const failures: { what: string; answer: () => typeof discovery }[] = [
    { what: "an error", answer: () => ({ status: 500, body: {} }) },
    { what: "no token endpoint", answer: () => ({ status: 200, body: { issuer } }) },
    {
      what: "a plain-http token endpoint off this machine",
      answer: () => ({
        status: 200,
        body: { ...cognitoShaped(), token_endpoint: "http://id.example.com/token" },
      }),
    },
    { what: "no answer in time", answer: () => "no answer" },
  ];
  it.each(failures)(
    "names the issuer alone on $what, logs it, and reads the document again a minute later",
    async ({ answer }) => {
      discovery = answer();
      const app = consoleRouter({ assets, config: oidc() }, deps);
      expect(await connectSrc(app)).toBe(`'self' ${issuerOrigin}`);
      expect(warnings).toEqual([
        expect.objectContaining({
          message: "console: could not read the issuer's discovery document",
          fields: expect.objectContaining({ issuer }),
        }),
      ]);
      discovery = { status: 200, body: cognitoShaped() };
      now = new Date(now.getTime() + 59_000);
      expect(await connectSrc(app)).toBe(`'self' ${issuerOrigin}`);
      expect(discoveryRequests).toBe(1);
      now = new Date(now.getTime() + 1_000);
      expect(await connectSrc(app)).toBe(`'self' ${issuerOrigin} ${TOKEN_ORIGIN}`);
      expect(discoveryRequests).toBe(2);
    },
  );
});

describe("the console page's Content-Security-Policy, when fetch loses its abort", () => {
  // Node 20's fetch can lose an abort (the signals AbortSignal.any and a Request make are held
  // weakly and may be collected first): a discovery waited on so held every console page, for
  // good, as the discovery is retried only once it has failed. Fetches that ignore their signal:
  const lost: { what: string; fetch: typeof fetch }[] = [
    { what: "never answers", fetch: () => new Promise<Response>(() => undefined) },
    {
      what: "sends its headers, never its body's end",
      fetch: async () =>
        new Response(new ReadableStream({ pull: () => new Promise<void>(() => undefined) }), {
          status: 200,
        }),
    },
  ];
  it.each(lost)("the timeout ends the discovery all the same: $what", async ({ fetch }) => {
    const app = consoleRouter({ assets, config: oidc() }, { ...deps, fetch });
    const outcome = await Promise.race([
      connectSrc(app),
      sleep(3000).then(() => "still waiting after 3000 ms"),
    ]);
    expect(outcome).toBe(`'self' ${issuerOrigin}`);
    expect(warnings).toEqual([
      expect.objectContaining({
        message: "console: could not read the issuer's discovery document",
        fields: expect.objectContaining({ error: "The operation was aborted due to timeout" }),
      }),
    ]);
  });
});

describe("API reference", () => {
  const document = {
    info: { title: "T", version: "1", description: "<img src=x onerror=alert(1)>" },
    paths: {
      "/things/{id}": {
        get: {
          operationId: "getThing",
          summary: "One thing",
          tags: ["things"],
          parameters: [{ name: "id", in: "path", required: true, schema: { type: "string" } }],
          responses: {
            200: {
              description: "The thing",
              content: { "application/json": { schema: { $ref: "#/components/schemas/Thing" } } },
              headers: {
                ETag: { schema: { type: "string" }, description: "Its version" },
                "Retry-After": { schema: { type: "integer" }, description: "<b>Seconds</b>" },
              },
            },
          },
        },
      },
    },
    components: {
      schemas: {
        Thing: {
          type: "object",
          required: ["id"],
          properties: {
            id: { type: "string" },
            tags: { type: "array", items: { type: "string" } },
          },
        },
      },
    },
  };

  it("renders each operation and schema as escaped HTML that loads nothing", async () => {
    const response = await docsRouter(() => document).request("/docs");
    expect(response.status).toBe(200);
    expect(response.headers.get("Content-Security-Policy")).toContain("default-src 'none'");
    const html = await response.text();
    expect(html).toContain('id="getThing"');
    expect(html).toContain('<a href="#schema-Thing">Thing</a>');
    expect(html).toContain("array of string");
    expect(html).not.toContain("<img");
    expect(html).toContain("&lt;img src=x onerror=alert(1)&gt;");
    expect(html).not.toMatch(/<script|<link|src="http/);
  });

  it("is never framed or sniffed, and runs no script at all", async () => {
    const response = await docsRouter(() => document).request("/docs");
    const policy = response.headers.get("Content-Security-Policy") ?? "";
    expect(policy.split("; ")).toEqual(
      expect.arrayContaining([
        "default-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
      ]),
    );
    expect(policy).not.toMatch(/script-src/);
    expect(response.headers.get("X-Content-Type-Options")).toBe("nosniff");
  });

  it("names each response's headers (ETag, Location, Retry-After) with their descriptions", async () => {
    const html = await (await docsRouter(() => document).request("/docs")).text();
    expect(html).toContain("<code>ETag</code>: Its version");
    expect(html).toContain("<code>Retry-After</code>: &lt;b&gt;Seconds&lt;/b&gt;");
  });
});

describe("local authentication", () => {
  it("takes bearer keys unless an issuer and audience are given", () => {
    expect(localAuthFromEnv({}).console).toEqual({ kind: "key" });
    expect(
      localAuthFromEnv({
        SCHEDULER_JWT_ISSUER: "http://127.0.0.1:9000",
        SCHEDULER_JWT_AUDIENCE: "api, cli",
      }).console,
    ).toEqual({ kind: "oidc", issuer: "http://127.0.0.1:9000", clientId: "api", scope: "openid" });
  });

  it.each([
    { SCHEDULER_JWT_ISSUER: "http://127.0.0.1:9000" },
    { SCHEDULER_JWT_AUDIENCE: "api" },
    { SCHEDULER_JWT_ISSUER: "not a url", SCHEDULER_JWT_AUDIENCE: "api" },
  ])("refuses half a JWT configuration: %o", (env) => {
    expect(() => localAuthFromEnv(env)).toThrow(/go together/);
  });
});

describe("the console's sign-in as the stack hands it over", () => {
  it("reads CONSOLE_AUTH, IAM when unset, and refuses anything else", () => {
    expect(parseConsoleAuth(undefined)).toEqual({ kind: "iam" });
    const oidcAuth = {
      kind: "oidc",
      issuer: "https://id.example.com",
      clientId: "c",
      scope: "openid",
    };
    expect(parseConsoleAuth(JSON.stringify(oidcAuth))).toEqual(oidcAuth);
    expect(() => parseConsoleAuth('{"kind":"oidc","issuer":"https://id.example.com"}')).toThrow(
      /CONSOLE_AUTH is not a console sign-in/,
    );
  });
});

describe("the console's live poll interval as the sandbox is given it", () => {
  it("reads SCHEDULER_CONSOLE_POLL_MS, none when unset or empty, and refuses anything under 100 ms or not whole", () => {
    expect(parseConsolePollMs(undefined)).toBeUndefined();
    expect(parseConsolePollMs("")).toBeUndefined();
    expect(parseConsolePollMs("250")).toBe(250);
    for (const text of ["99", "0", "-250", "2.5e2x", "250.5", "fast"])
      expect(() => parseConsolePollMs(text), text).toThrow(/SCHEDULER_CONSOLE_POLL_MS must be/);
  });
});
