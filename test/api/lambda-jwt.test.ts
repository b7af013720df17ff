import type { ApiGatewayRequestContextV2 } from "hono/aws-lambda";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENV } from "../../shared/config.js";
import {
  createEngineFixture,
  deployedEnvironment,
  type EngineFixture,
} from "../support/engine-fixture.js";

/**
 * functions/api/handler.ts as deployed with the JWT option (API_AUTH=jwt): the claims reach it as
 * API Gateway's payload v2 hands them over, every value as text. A number is its digits, a boolean
 * "true" or "false", an array Go-style ("[a b]"); a JSON null, undocumented, is taken to be "null".
 */
let fixture: EngineFixture;
let handler: typeof import("../../functions/api/handler.js").handler;
const saved = { ...process.env };

beforeAll(async () => {
  fixture = await createEngineFixture();
  Object.assign(process.env, deployedEnvironment(fixture.engine), { [ENV.apiAuth]: "jwt" });
  ({ handler } = await import("../../functions/api/handler.js"));
});

afterAll(async () => {
  process.env = saved;
  await fixture.destroy();
});

/** GET /jobs by a token with these claims, as API Gateway invokes the function once it let it through. */
async function listJobsAs(claims: Record<string, string>) {
  const requestContext: ApiGatewayRequestContextV2 = {
    accountId: "123456789012",
    apiId: "api1",
    authentication: null,
    authorizer: { jwt: { claims, scopes: null } },
    domainName: "api1.execute-api.eu-central-1.amazonaws.com",
    domainPrefix: "api1",
    http: {
      method: "GET",
      path: "/jobs",
      protocol: "HTTP/1.1",
      sourceIp: "192.0.2.1",
      userAgent: "test",
    },
    requestId: "req-1",
    routeKey: "$default",
    stage: "$default",
    time: "07/Dec/2026:12:00:00 +0000",
    timeEpoch: Date.now(),
  };
  return handler({
    version: "2.0",
    routeKey: "$default",
    rawPath: "/jobs",
    rawQueryString: "",
    headers: { host: "api1.execute-api.eu-central-1.amazonaws.com" },
    requestContext,
    body: null,
    isBase64Encoded: false,
  });
}

describe("API Lambda (payload v2, JWT)", () => {
  it("refuses a tenant_id or sub that API Gateway made text of a JSON null, true or false: every such token would share one tenant", async () => {
    const tokens: Record<string, string>[] = [
      { sub: "alice", tenant_id: "null" },
      { sub: "bob", tenant_id: "true" },
      { sub: "carol", tenant_id: "false" },
      { sub: "null" },
      { sub: "false" },
    ];
    for (const claims of tokens) {
      const answer = await listJobsAs(claims);
      expect(answer.statusCode, JSON.stringify(claims)).toBe(401);
      expect(JSON.parse(answer.body)).toMatchObject({ error: { code: "unauthorized" } });
    }
  });

  it("takes a numeric tenant_id as its digits, the tenant of the string", async () => {
    expect((await listJobsAs({ sub: "alice", tenant_id: "7" })).statusCode).toBe(200);
    expect((await listJobsAs({ sub: "alice", tenant_id: "acme" })).statusCode).toBe(200);
    expect((await listJobsAs({ sub: "alice" })).statusCode).toBe(200);
  });
});
