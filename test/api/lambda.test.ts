import type { ApiGatewayRequestContextV2 } from "hono/aws-lambda";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { METRICS } from "../../shared/observability.js";
import {
  createEngineFixture,
  deployedEnvironment,
  type EngineFixture,
} from "../support/engine-fixture.js";
import { yearlyCronHalfAYearAway } from "../support/time-of-day.js";

/** A yearly cron that never falls due while the file runs (time-of-day.ts). */
const YEARLY_CRON = yearlyCronHalfAYearAway();

/**
 * functions/api/handler.ts as API Gateway invokes it: HTTP API payload v2
 * events, IAM authorization, the tenant taken from requestContext.authorizer.iam.
 * The handler builds its engine from the environment, as deployed.
 */
let fixture: EngineFixture;
let handler: typeof import("../../functions/api/handler.js").handler;
const saved = { ...process.env };

beforeAll(async () => {
  fixture = await createEngineFixture();
  const { engine } = fixture;
  Object.assign(process.env, deployedEnvironment(engine));
  ({ handler } = await import("../../functions/api/handler.js"));
});

afterAll(async () => {
  process.env = saved;
  await fixture.destroy();
});

const ROLE_SESSION = "arn:aws:sts::123456789012:assumed-role/Reporter/session-1";

function event(
  method: string,
  path: string,
  options: { body?: unknown; userArn?: string | null; query?: string } = {},
) {
  const userArn = options.userArn === undefined ? ROLE_SESSION : options.userArn;
  const requestContext: ApiGatewayRequestContextV2 = {
    accountId: "123456789012",
    apiId: "api1",
    authentication: null,
    authorizer:
      userArn === null
        ? {}
        : {
            iam: {
              accessKey: "ASIAEXAMPLE",
              accountId: "123456789012",
              callerId: "AROAEXAMPLE:session-1",
              cognitoIdentity: null,
              principalOrgId: null,
              userArn,
              userId: "AROAEXAMPLE:session-1",
            },
          },
    domainName: "api1.execute-api.eu-central-1.amazonaws.com",
    domainPrefix: "api1",
    http: { method, path, protocol: "HTTP/1.1", sourceIp: "192.0.2.1", userAgent: "test" },
    requestId: "req-1",
    routeKey: "$default",
    stage: "$default",
    time: "29/Nov/2026:12:00:00 +0000",
    timeEpoch: Date.now(),
  };
  return {
    version: "2.0",
    routeKey: "$default",
    rawPath: path,
    rawQueryString: options.query ?? "",
    headers: {
      host: "api1.execute-api.eu-central-1.amazonaws.com",
      ...(options.body !== undefined ? { "content-type": "application/json" } : {}),
    },
    requestContext,
    body: options.body !== undefined ? JSON.stringify(options.body) : null,
    isBase64Encoded: false,
  };
}

/** The EMF documents (CloudWatch metrics) a call writes to stdout, as Lambda hands them to CloudWatch. */
async function emfWrittenBy(call: () => Promise<unknown>): Promise<Record<string, unknown>[]> {
  const written: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
    written.push(String(chunk));
    return write(chunk, ...rest);
  }) as typeof process.stdout.write;
  try {
    await call();
  } finally {
    process.stdout.write = write;
  }
  return written
    .flatMap((text) => text.split("\n"))
    .flatMap((line) => {
      try {
        const parsed: unknown = JSON.parse(line);
        return typeof parsed === "object" && parsed !== null && "_aws" in parsed
          ? [parsed as Record<string, unknown>]
          : [];
      } catch {
        return [];
      }
    });
}

describe("API Lambda (payload v2, IAM)", () => {
  it("publishes the metrics of each request before it answers: a fast-path claim's Claims", async () => {
    // Due in seconds: the create claims it at once (the dashboard's "claimed (fast path)").
    const runAt = new Date(Date.now() + 5_000).toISOString();
    const documents = await emfWrittenBy(() =>
      handler(
        event("POST", "/jobs", {
          body: { type: "noop", schedule: { runAt } },
          // A tenant of its own: the other tests list theirs.
          userArn: "arn:aws:sts::123456789012:assumed-role/Metered/session-1",
        }),
      ),
    );
    const claims = documents.filter((document) => METRICS.claims in document);
    expect(claims.map((document) => [document.service, document[METRICS.claims]])).toEqual([
      ["scheduler-api", 1],
    ]);
  });

  it("creates and reads a job as the calling role, whatever the session", async () => {
    const created = await handler(
      event("POST", "/jobs", {
        body: { type: "noop", schedule: { cron: "0 9 * * *", timezone: "Europe/Berlin" } },
      }),
    );
    expect(created.statusCode).toBe(201);
    const job = JSON.parse(created.body) as { id: string };
    expect(created.headers?.location).toBe(`/jobs/${job.id}`);
    const stored = (await fixture.jobs()).find((j) => j.jobId === job.id);
    expect(stored?.tenantId).toBe("arn:aws:iam::123456789012:role/Reporter");

    const otherSession = "arn:aws:sts::123456789012:assumed-role/Reporter/session-2";
    const read = await handler(event("GET", `/jobs/${job.id}`, { userArn: otherSession }));
    expect(read.statusCode).toBe(200);
    const listed = await handler(event("GET", "/jobs", { query: "limit=5" }));
    expect(JSON.parse(listed.body).items.map((j: { id: string }) => j.id)).toEqual([job.id]);
  });

  it("another principal is another tenant: 404, never 403", async () => {
    const mine = await handler(
      event("POST", "/jobs", {
        body: { type: "noop", schedule: { cron: YEARLY_CRON, timezone: "UTC" } },
      }),
    );
    const { id } = JSON.parse(mine.body) as { id: string };
    const stranger = "arn:aws:iam::999999999999:user/mallory";
    expect((await handler(event("GET", `/jobs/${id}`, { userArn: stranger }))).statusCode).toBe(
      404,
    );
    expect(
      (await handler(event("POST", `/jobs/${id}/cancel`, { userArn: stranger }))).statusCode,
    ).toBe(404);
  });

  it("401 without an IAM principal; /health and errors keep their shapes", async () => {
    const refused = await handler(event("GET", "/jobs", { userArn: null }));
    expect(refused.statusCode).toBe(401);
    expect(JSON.parse(refused.body)).toMatchObject({ error: { code: "unauthorized" } });
    expect((await handler(event("GET", "/health", { userArn: null }))).statusCode).toBe(200);
    const bad = await handler(
      event("POST", "/jobs", { body: { type: "noop", schedule: { cron: "x", timezone: "UTC" } } }),
    );
    expect(bad.statusCode).toBe(400);
    expect(JSON.parse(bad.body)).toMatchObject({ error: { field: "schedule.cron" } });
    // API Gateway hands the query as sent (rawQueryString): a repeated parameter is named as such.
    const repeated = await handler(event("GET", "/jobs", { query: "limit=1&limit=2" }));
    expect(repeated.statusCode).toBe(400);
    expect(JSON.parse(repeated.body)).toMatchObject({
      error: { field: "limit", message: "limit: is given more than once; give it once" },
    });
  });

  it("a route that takes no body refuses one API Gateway hands over base64-encoded (isBase64Encoded), and takes `{}` and an empty body so encoded", async () => {
    const userArn = "arn:aws:sts::123456789012:assumed-role/Base64/session-1";
    const made = await handler(
      event("POST", "/jobs", {
        body: { type: "noop", schedule: { cron: YEARLY_CRON, timezone: "UTC" } },
        userArn,
      }),
    );
    expect(made.statusCode, made.body).toBe(201);
    const { id } = JSON.parse(made.body) as { id: string };
    const encoded = (text: string) => ({
      ...event("POST", `/jobs/${id}/trigger`, { body: {}, userArn }),
      body: Buffer.from(text).toString("base64"),
      isBase64Encoded: true,
    });
    const refused = await handler(encoded('{"running": "finish"}'));
    expect(refused.statusCode, refused.body).toBe(400);
    expect(JSON.parse(refused.body)).toMatchObject({
      error: {
        field: "running",
        message: "running: is not an accepted field: this request takes no body",
      },
    });
    const runsOf = async () =>
      (await fixture.runs()).filter((r) => r.jobId === id).map((r) => r.status);
    expect(await runsOf()).toEqual([]);
    const empty = await handler(encoded("{}"));
    expect(empty.statusCode, empty.body).toBe(202);
    const none = await handler(encoded(""));
    expect(none.statusCode, none.body).toBe(202);
    expect(await runsOf()).toEqual(["QUEUED", "QUEUED"]);
  });

  /**
   * A request on a route without an authorizer (infra/constructs/api.ts): its routeKey names the
   * route and its requestContext has no `authorizer` at all. Hono's type requires the field, so
   * the event is built from one that has it and passed on without it.
   */
  function unauthorizedRouteEvent(method: string, path: string, body?: unknown) {
    const withAuthorizer = event(
      method,
      path,
      body === undefined ? { userArn: null } : { body, userArn: null },
    );
    const { authorizer: _omitted, ...requestContext } = withAuthorizer.requestContext;
    return {
      ...withAuthorizer,
      routeKey: `${method} ${path}`,
      requestContext: { ...requestContext, routeKey: `${method} ${path}` },
    } as unknown as Parameters<typeof handler>[0];
  }

  it("answers GET /health and GET /openapi.json without authorizer context, and refuses the rest", async () => {
    const health = await handler(unauthorizedRouteEvent("GET", "/health"));
    expect(health.statusCode).toBe(200);
    expect(JSON.parse(health.body)).toEqual({ status: "ok" });
    // Uptime monitors often probe with HEAD: the same answer, without the body.
    const probe = await handler(unauthorizedRouteEvent("HEAD", "/health"));
    expect(probe.statusCode).toBe(200);
    expect(probe.body).toBe("");
    const document = await handler(unauthorizedRouteEvent("GET", "/openapi.json"));
    expect(document.statusCode).toBe(200);
    expect((JSON.parse(document.body) as { openapi: string }).openapi).toMatch(/^3\./);
    const jobsBefore = (await fixture.jobs()).length;
    const refused: [string, string, unknown?][] = [
      ["GET", "/jobs"],
      ["GET", "/quotas"],
      ["GET", "/webhook-secret"],
      ["GET", "/health/"],
      ["GET", "/openapi.json/x"],
      ["POST", "/jobs", { type: "noop", schedule: { cron: "0 9 * * *", timezone: "UTC" } }],
      // A public route's path whose dot segments (escaped as %2e, which the app's URL resolves as
      // dots) lead out of it: the app judges the path it routes, not the route API Gateway matched.
      ["GET", "/console/%2e%2e/jobs"],
      ["GET", "/health/%2e%2e/webhook-secret"],
      ["GET", "/docs/%2E%2E/quotas"],
      [
        "POST",
        "/runs/x/%2e%2e/%2e%2e/jobs",
        { type: "noop", schedule: { cron: "0 9 * * *", timezone: "UTC" } },
      ],
    ];
    for (const [method, path, body] of refused) {
      const answer = await handler(unauthorizedRouteEvent(method, path, body));
      expect(answer.statusCode, `${method} ${path}`).toBe(401);
      expect(JSON.parse(answer.body)).toMatchObject({ error: { code: "unauthorized" } });
    }
    expect((await fixture.jobs()).length).toBe(jobsBefore);
  });

  it("answers a page of large jobs within Lambda's 6 MB response, the rest on the next page", async () => {
    // A payload of quotes: 64 KiB as JSON, and each quote escaped once more in Lambda's response.
    const payload = '"'.repeat(32_000);
    const userArn = "arn:aws:sts::123456789012:assumed-role/Bulky/session-1";
    const jobs = Array.from({ length: 25 }, () => ({
      type: "noop",
      schedule: { cron: "0 9 * * *", timezone: "UTC" },
      payload,
    }));
    const created: string[] = [];
    for (let batch = 0; batch < 2; batch++) {
      const answer = await handler(event("POST", "/jobs:batch", { body: { jobs }, userArn }));
      expect(answer.statusCode).toBe(200);
      const { results } = JSON.parse(answer.body) as { results: { job?: { id: string } }[] };
      created.push(...results.flatMap((r) => (r.job ? [r.job.id] : [])));
    }
    expect(created).toHaveLength(50);
    const listed: string[] = [];
    let cursor: string | null = null;
    do {
      // The console's page: 50 jobs.
      const query: string = `limit=50${cursor ? `&cursor=${cursor}` : ""}`;
      const answer = await handler(event("GET", "/jobs", { userArn, query }));
      expect(answer.statusCode).toBe(200);
      expect(Buffer.byteLength(JSON.stringify(answer))).toBeLessThanOrEqual(LAMBDA_RESPONSE_BYTES);
      const page = JSON.parse(answer.body) as {
        items: { id: string }[];
        nextCursor: string | null;
      };
      listed.push(...page.items.map((job) => job.id));
      cursor = page.nextCursor;
    } while (cursor !== null);
    expect(listed.sort()).toEqual(created.sort());
  });
});

/** The most a synchronous Lambda invocation may answer (its response payload limit). */
const LAMBDA_RESPONSE_BYTES = 6 * 1024 * 1024;
