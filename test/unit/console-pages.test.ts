import { describe, expect, it } from "vitest";
import { consoleRouter } from "../../shared/api/console-router.js";
import { docsRouter } from "../../shared/api/docs-router.js";
import { localAuthFromEnv } from "../../shared/api/local-auth.js";
import { consoleAssetsFrom } from "../../shared/console/assets.js";
import { type ConsoleConfig, parseConsoleAuth } from "../../shared/console/config.js";

const assets = consoleAssetsFrom(
  new Map([
    ["app.js", "console.log('app')"],
    ["app.css", "body{}"],
  ]),
);
const oidc: ConsoleConfig = {
  auth: {
    kind: "oidc",
    issuer: "https://id.example.com/realms/a",
    clientId: "</script><script>alert(1)</script>",
    scope: "openid",
  },
  jobTypes: ["noop"],
};

describe("console pages", () => {
  it("answers every path under /console with the page, its configuration embedded inert", async () => {
    const app = consoleRouter({ assets, config: oidc });
    for (const path of ["/console", "/console/jobs/01ABC", "/console/callback?code=x"]) {
      const response = await app.request(path);
      expect(response.status, path).toBe(200);
      const html = await response.text();
      expect(html).not.toContain("<script>alert(1)");
      const json = /<script id="console-config" type="application\/json">(.*?)<\/script>/s.exec(
        html,
      )?.[1];
      expect(JSON.parse(json ?? "")).toEqual(oidc);
      expect(html).toContain(`/console/assets/app.js?v=${assets.version}`);
      // Scripts and styles from the page's own origin only; the issuer may be called for sign-in.
      expect(response.headers.get("Content-Security-Policy")).toContain(
        "connect-src 'self' https://id.example.com;",
      );
      expect(response.headers.get("Content-Security-Policy")).toContain("default-src 'self'");
    }
  });

  it("serves this build's files for a year, any other request for them unconditionally fresh", async () => {
    const app = consoleRouter({ assets, config: oidc });
    const current = await app.request(`/console/assets/app.js?v=${assets.version}`);
    expect(current.headers.get("Cache-Control")).toBe("public, max-age=31536000, immutable");
    expect(current.headers.get("Content-Type")).toBe("text/javascript; charset=utf-8");
    expect(await current.text()).toBe("console.log('app')");
    const stale = await app.request("/console/assets/app.css?v=0000");
    expect(stale.headers.get("Cache-Control")).toBe("no-cache");
    expect((await app.request("/console/assets/secrets.json")).status).toBe(404);
  });

  it("says the console was not built when the bundle carries none", async () => {
    const response = await consoleRouter({ assets: null, config: oidc }).request("/console");
    expect(response.status).toBe(503);
    expect(await response.text()).toContain("not built");
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
