import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair, type JWTPayload, SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jwtAuthenticator } from "../../shared/api/auth.js";
import { localAuthFromEnv } from "../../shared/api/local-auth.js";
import { startLocalServer } from "../../shared/api/local-server.js";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import { createEngineFixture } from "../support/engine-fixture.js";

/**
 * The local server's JWT option (SCHEDULER_JWT_ISSUER, an adversarial review): it is to do what
 * API Gateway's JWT authorizer does before the deployed API sees a request, then map the claims
 * to a tenant as the deployed API does. An issuer on loopback serves its discovery document and
 * key set; tokens are signed with its key, or forged. API Gateway's checks are those its developer
 * guide lists for HTTP API JWT authorizers: exp after the current time, nbf and iat before it.
 */
const AUDIENCE = "scheduler-api";
let server: Server;
let issuer: string;
let sign: (claims: JWTPayload, options?: { expires?: boolean }) => Promise<string>;

beforeAll(async () => {
  const { privateKey, publicKey } = await generateKeyPair("RS256");
  const jwk = { ...(await exportJWK(publicKey)), kid: "k1", alg: "RS256", use: "sig" };
  server = createServer((req, res) => {
    res.setHeader("Content-Type", "application/json");
    if (req.url === "/.well-known/openid-configuration") {
      res.end(JSON.stringify({ issuer, jwks_uri: `${issuer}/jwks` }));
    } else if (req.url === "/jwks") {
      res.end(JSON.stringify({ keys: [jwk] }));
    } else {
      res.statusCode = 404;
      res.end("{}");
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // The claims given replace the defaults: an issuer's token for the audience, valid 5 minutes.
  sign = (claims, { expires = true } = {}) => {
    const now = Math.floor(Date.now() / 1000);
    const defaults = {
      iss: issuer,
      aud: AUDIENCE,
      iat: now,
      ...(expires ? { exp: now + 300 } : {}),
    };
    return new SignJWT({ ...defaults, ...claims })
      .setProtectedHeader({ alg: "RS256", kid: "k1" })
      .sign(privateKey);
  };
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

const tenantOf = (token: string, now?: () => Date) =>
  localAuthFromEnv(
    { SCHEDULER_JWT_ISSUER: issuer, SCHEDULER_JWT_AUDIENCE: AUDIENCE },
    now,
  ).authenticate({
    header: (name) => (name === "authorization" ? `Bearer ${token}` : undefined),
    env: {},
  });

describe("the local server's JWT option", () => {
  it("takes a token of the issuer's, for the audience, unexpired: the subject's tenant", async () => {
    expect(await tenantOf(await sign({ sub: "alice" }))).toBe("sub:alice");
  });

  it("refuses a token of another audience, an expired one, an unsigned one, one signed with the public key as an HMAC secret, and a tenant_id that reads as null, true or false or is an array", async () => {
    const signed = await sign({ sub: "alice" });
    const [header = "", payload = ""] = signed.split(".");
    const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
    const unsigned = `${encode({ alg: "none", kid: "k1" })}.${payload}.`;
    const keys = (await (await fetch(`${issuer}/jwks`)).json()) as { keys: { n: string }[] };
    const hmacHeader = encode({ alg: "HS256", kid: "k1" });
    const { createHmac } = await import("node:crypto");
    const hmac = createHmac("sha256", Buffer.from(keys.keys[0]?.n ?? "", "base64url"))
      .update(`${hmacHeader}.${payload}`)
      .digest("base64url");
    const refused = [
      await sign({ sub: "alice", aud: "another-api" }),
      await sign({ sub: "alice", exp: Math.floor(Date.now() / 1000) - 60 }),
      unsigned,
      `${hmacHeader}.${payload}.${hmac}`,
      `${header}.${payload}.${"A".repeat(342)}`,
      await sign({ sub: "alice", tenant_id: ["acme"] }),
      // Refused as API Gateway's text of a JSON null is, so that one rule holds on both paths.
      await sign({ sub: "alice", tenant_id: null }),
      await sign({ sub: "alice", tenant_id: "null" }),
      await sign({ sub: "true" }),
    ];
    expect(await Promise.all(refused.map((token) => tenantOf(token)))).toEqual(
      refused.map(() => null),
    );
  });

  it("refuses a token issued in the future, as API Gateway's authorizer does (iat must be before now)", async () => {
    const hour = 3600;
    const now = Math.floor(Date.now() / 1000);
    expect(
      await tenantOf(await sign({ sub: "alice", iat: now + hour, exp: now + 2 * hour })),
    ).toBeNull();
  });

  it("refuses a token that never expires, as API Gateway's authorizer does (exp must be after now)", async () => {
    expect(await tenantOf(await sign({ sub: "alice" }, { expires: false }))).toBeNull();
  });

  it("checks exp and iat against the clock it is given, not the machine's", async () => {
    const hour = 3600;
    const now = Math.floor(Date.now() / 1000);
    const token = await sign({ sub: "alice", iat: now + hour, exp: now + 3 * hour });
    const twoHoursOn = () => new Date(Date.now() + 2 * hour * 1000);
    const fourHoursOn = () => new Date(Date.now() + 4 * hour * 1000);
    expect([await tenantOf(token, twoHoursOn), await tenantOf(token, fourHoursOn)]).toEqual([
      "sub:alice",
      null,
    ]);
  });
});

describe("the local server's JWT option with SCHEDULER_JWT_SCOPES (the stack's jwtScopes)", () => {
  it("answers a token carrying none of the scopes 403, as API Gateway does, and one carrying one in scope or scp as before", async () => {
    const fixture = await createEngineFixture();
    const api = await startLocalServer({
      engine: fixture.engine,
      jobTypes: jobTypeCatalog({ demoTypes: false }),
      env: {
        SCHEDULER_JWT_ISSUER: issuer,
        SCHEDULER_JWT_AUDIENCE: AUDIENCE,
        SCHEDULER_JWT_SCOPES: "scheduler/api scheduler/admin",
      },
    });
    try {
      const statusOf = async (claims: JWTPayload) => {
        const response = await fetch(`${api.url}/jobs`, {
          headers: { authorization: `Bearer ${await sign({ sub: "alice", ...claims })}` },
        });
        return [
          response.status,
          ((await response.json()) as { error?: { code: string } }).error?.code,
        ];
      };
      // An ID token for the console's client carries no scope; nor does an access token for others.
      expect(await statusOf({})).toEqual([403, "forbidden"]);
      expect(await statusOf({ scope: "openid profile" })).toEqual([403, "forbidden"]);
      expect(await statusOf({ scp: ["scheduler/read"] })).toEqual([403, "forbidden"]);
      // A scope is a whole word of the claim, not a part of one.
      expect(await statusOf({ scope: "scheduler/api2" })).toEqual([403, "forbidden"]);
      expect(await statusOf({ scope: "openid scheduler/api" })).toEqual([200, undefined]);
      expect(await statusOf({ scp: ["scheduler/admin"] })).toEqual([200, undefined]);
      expect(await statusOf({ scp: "email scheduler/admin" })).toEqual([200, undefined]);
      // API Gateway reads scp when the token has one, and scope only when it has not.
      expect(await statusOf({ scope: "scheduler/api", scp: ["email"] })).toEqual([
        403,
        "forbidden",
      ]);
      // Still a 401 for a token the authorizer refuses, whatever its scopes.
      expect(await statusOf({ scope: "scheduler/api", aud: "another-api" })).toEqual([
        401,
        "unauthorized",
      ]);
    } finally {
      await api.close();
      await fixture.destroy();
    }
  });

  it("has the console ask for openid and the scopes, and refuses a console scope with none of them", () => {
    const env = {
      SCHEDULER_JWT_ISSUER: "https://id.example.com",
      SCHEDULER_JWT_AUDIENCE: AUDIENCE,
      SCHEDULER_JWT_SCOPES: "scheduler/api",
    };
    expect(localAuthFromEnv(env).console).toMatchObject({ scope: "openid scheduler/api" });
    // Each scope once, openid too.
    expect(
      localAuthFromEnv({ ...env, SCHEDULER_JWT_SCOPES: "openid scheduler/api scheduler/api" })
        .console,
    ).toMatchObject({ scope: "openid scheduler/api" });
    expect(() => localAuthFromEnv({ ...env, SCHEDULER_CONSOLE_SCOPE: "openid profile" })).toThrow(
      'SCHEDULER_CONSOLE_SCOPE "openid profile" carries none of SCHEDULER_JWT_SCOPES "scheduler/api"',
    );
  });
});

describe("the local server and the deployed API on the same token", () => {
  /**
   * A claim as API Gateway's payload 2.0 hands it to the function, as docs/deploy.md ("First
   * request") describes it: a number as its digits, true and false as those words, null as "null",
   * an array as "[a b]".
   */
  const asText = (value: unknown): string =>
    Array.isArray(value) ? `[${value.map(asText).join(" ")}]` : String(value);
  const deployed = jwtAuthenticator();
  const deployedTenantOf = (claims: Record<string, unknown>) =>
    deployed({
      env: {
        requestContext: {
          authorizer: {
            jwt: {
              claims: Object.fromEntries(Object.entries(claims).map(([k, v]) => [k, asText(v)])),
              scopes: null,
            },
          },
        },
      },
      header: () => undefined,
    });

  it("maps every claim value to the tenant the deployed API maps API Gateway's text of it to", async () => {
    const tokens: Record<string, unknown>[] = [
      { sub: "alice", tenant_id: "acme" },
      { sub: "alice" },
      { sub: "alice", tenant_id: null },
      { sub: "alice", tenant_id: true },
      { sub: "alice", tenant_id: ["acme"] },
      { sub: "alice", tenant_id: 7 },
      { sub: "alice", tenant_id: 0 },
      { sub: "alice", tenant_id: -1 },
    ];
    const local = await Promise.all(tokens.map(async (claims) => tenantOf(await sign(claims))));
    const remote = await Promise.all(tokens.map((claims) => deployedTenantOf(claims)));
    expect(tokens.map((claims, i) => [JSON.stringify(claims), local[i]])).toEqual(
      tokens.map((claims, i) => [JSON.stringify(claims), remote[i]]),
    );
  });
});

describe("SCHEDULER_JWT_SCOPES the stack's jwtScopes would refuse", () => {
  const env = { SCHEDULER_JWT_AUDIENCE: AUDIENCE, SCHEDULER_JWT_SCOPES: "scheduler/api" };

  it("is refused at start, naming it, as synth refuses jwtScopes: a tab, a quote, a line break", () => {
    for (const scopes of [
      "scheduler/api\tscheduler/admin",
      'scheduler/api "x"',
      "scheduler/api\n",
    ]) {
      expect(
        () =>
          localAuthFromEnv({ ...env, SCHEDULER_JWT_ISSUER: issuer, SCHEDULER_JWT_SCOPES: scopes }),
        JSON.stringify(scopes),
      ).toThrow("SCHEDULER_JWT_SCOPES");
    }
  });

  it("is refused without SCHEDULER_JWT_ISSUER, as synth refuses jwtScopes without jwtIssuer, not left unsaid while API keys are taken", () => {
    expect(() => localAuthFromEnv({ SCHEDULER_JWT_SCOPES: "scheduler/api" })).toThrow(
      "SCHEDULER_JWT_SCOPES",
    );
  });

  it("never answers 500: with a line break at its end (an env file's), the server refuses to start or takes a token carrying the scope", async () => {
    const fixture = await createEngineFixture();
    try {
      const started = await startLocalServer({
        engine: fixture.engine,
        jobTypes: jobTypeCatalog({ demoTypes: false }),
        env: { ...env, SCHEDULER_JWT_ISSUER: issuer, SCHEDULER_JWT_SCOPES: "scheduler/api\n" },
      }).catch((error: unknown) => error);
      if (started instanceof Error) {
        expect(started.message).toContain("SCHEDULER_JWT_SCOPES");
        return;
      }
      const api = started as Awaited<ReturnType<typeof startLocalServer>>;
      try {
        const response = await fetch(`${api.url}/jobs`, {
          headers: {
            authorization: `Bearer ${await sign({ sub: "alice", scope: "scheduler/api" })}`,
          },
        });
        expect(response.status).toBe(200);
      } finally {
        await api.close();
      }
    } finally {
      await fixture.destroy();
    }
  });
});
