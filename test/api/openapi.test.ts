import SwaggerParser from "@apidevtools/swagger-parser";
import type { OpenAPIV3 } from "openapi-types";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema, RunSchema } from "../../shared/api/schemas/runs.js";
import { issueRunToken } from "../../shared/execution/async-delivery.js";
import { parseRunId } from "../../shared/keys.js";
import { startRun } from "../../shared/storage/run-start.js";
import { type ApiHarness, deadRunVia, KEY_A, KEY_B, type Reply, startApi } from "./support.js";

/**
 * The served OpenAPI document is valid OpenAPI 3.x, documents every route,
 * and its examples are true: a request built from each operation (parameter
 * examples, the request body's example) is accepted by the running API.
 */
let api: ApiHarness;
let document: OpenAPIV3.Document;
let deadRunId: string;

beforeAll(async () => {
  api = await startApi();
  const reply = await api.call("GET", "/openapi.json", { key: null });
  expect(reply.status).toBe(200);
  document = reply.body as OpenAPIV3.Document;
  const { jobId } = await deadRunVia(api);
  const dead = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`)).body);
  deadRunId = dead.items[0]?.runId ?? "";
});
afterAll(() => api.close());

const METHODS = ["get", "post", "patch", "put", "delete"] as const;

/** Starts the run as a worker would and makes the token its async target would be handed. */
async function runTokenOfStarted(runId: string): Promise<string> {
  const ref = parseRunId(runId);
  if (ref === null) throw new Error(`not a run id: ${runId}`);
  const engine = api.fixture.engine;
  const started = await startRun(engine, ref, "openapi-test", engine.clock());
  if (started.kind !== "started") throw new Error(`run ${runId} did not start`);
  return issueRunToken(
    engine,
    started.run,
    { timeoutSeconds: 300, version: started.run.jobVersion },
    engine.clock(),
  );
}

function operations(doc: OpenAPIV3.Document) {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    METHODS.flatMap((method) => {
      const operation = item?.[method];
      return operation ? [{ path, method, operation }] : [];
    }),
  );
}

describe("OpenAPI document", () => {
  it("validates as OpenAPI 3.x", async () => {
    expect(document.openapi).toMatch(/^3\.\d+\.\d+$/);
    await expect(SwaggerParser.validate(structuredClone(document))).resolves.toBeDefined();
  });

  it("documents every route, with the error shape on every error response", async () => {
    const listed = operations(document).map(
      ({ method, path }) => `${method.toUpperCase()} ${path}`,
    );
    expect(listed.sort()).toEqual(
      [
        "GET /health",
        "POST /jobs",
        "POST /jobs:batch",
        "GET /jobs",
        "GET /jobs/{id}",
        "PATCH /jobs/{id}",
        "DELETE /jobs/{id}",
        "POST /jobs/{id}/pause",
        "POST /jobs/{id}/resume",
        "POST /jobs/{id}/cancel",
        "POST /jobs/{id}/trigger",
        "GET /jobs/{id}/runs",
        "GET /jobs/{id}/runs/{runId}",
        "POST /jobs/{id}/runs/{runId}/cancel",
        "GET /jobs/{id}/preview",
        "POST /schedules/preview",
        "GET /dead-letters",
        "POST /dead-letters/{runId}/replay",
        "GET /webhook-secret",
        "POST /webhook-secret/rotate",
        "POST /runs/{runId}/heartbeat",
        "POST /runs/{runId}/complete",
        "GET /quotas",
        "GET /tenants/{tenantId}/quotas",
        "PUT /tenants/{tenantId}/quotas",
      ].sort(),
    );
    for (const { operation } of operations(document)) {
      expect(operation.operationId).toBeTruthy();
      for (const [status, response] of Object.entries(operation.responses)) {
        if (Number(status) < 400) continue;
        const schema = (response as OpenAPIV3.ResponseObject).content?.["application/json"]?.schema;
        expect(schema).toEqual({ $ref: "#/components/schemas/Error" });
      }
    }
    const create = document.components?.schemas?.CreateJobRequest as OpenAPIV3.SchemaObject;
    const type = create.properties?.type as OpenAPIV3.SchemaObject;
    expect(type.enum).toEqual(["http", "noop", "sleep", "fail", "report"]);
    expect(create.additionalProperties).toBe(false);
  });

  it("states that a run's durationMs is never negative, as runDto never answers one", () => {
    const run = document.components?.schemas?.Run as OpenAPIV3.SchemaObject;
    const durationMs = run.properties?.durationMs as OpenAPIV3.SchemaObject;
    expect(durationMs).toMatchObject({ type: "number", minimum: 0 });
    expect(RunSchema.shape.durationMs.safeParse(-1).success).toBe(false);
  });

  it("every authenticated operation declares the 429 and the 503 any of them can answer", () => {
    const secured = operations(document).filter(({ operation }) => operation.security?.length);
    expect(secured.length).toBeGreaterThan(20);
    for (const { method, path, operation } of secured) {
      expect(Object.keys(operation.responses), `${method} ${path}`).toEqual(
        expect.arrayContaining(["401", "429", "503"]),
      );
    }
  });

  it("an async target's run routes declare the 400 a runId longer than any run's is answered", async () => {
    const tooLong = "x".repeat(201);
    for (const action of ["heartbeat", "complete"] as const) {
      const reply = await api.call("POST", `/runs/${tooLong}/${action}`, {
        key: "rt2.1.token",
        body: { status: "succeeded" },
      });
      expect(reply.status, `${action}: ${reply.text}`).toBe(400);
      const operation = document.paths[`/runs/{runId}/${action}`]?.post;
      expect(Object.keys(operation?.responses ?? {}), action).toContain("400");
    }
  });

  it("accepts a request built from each operation's parameters and example", async () => {
    const dereferenced = (await SwaggerParser.dereference(
      structuredClone(document),
    )) as OpenAPIV3.Document;
    for (const { path, method, operation } of operations(dereferenced)) {
      // Fresh state per operation, so that each example meets the state it expects (version 1, active).
      const job = JobSchema.parse(
        (
          await api.call("POST", "/jobs", {
            body: { type: "noop", schedule: { cron: "0 0 1 1 *", timezone: "UTC" } },
          })
        ).body,
      );
      const run = RunSchema.parse((await api.call("POST", `/jobs/${job.id}/trigger`)).body);
      const realValues: Record<string, string> = {
        id: job.id,
        runId: path.startsWith("/dead-letters") ? deadRunId : run.runId,
      };

      let url = path;
      const query = new URLSearchParams();
      const headers: Record<string, string> = {};
      for (const raw of operation.parameters ?? []) {
        const parameter = raw as OpenAPIV3.ParameterObject;
        const schema = parameter.schema as OpenAPIV3.SchemaObject | undefined;
        const example = realValues[parameter.name] ?? parameter.example ?? schema?.example;
        if (parameter.in === "path") {
          expect(example, `${path}: path parameter ${parameter.name} has no example`).toBeDefined();
          url = url.replace(`{${parameter.name}}`, encodeURIComponent(String(example)));
        } else if (example !== undefined && parameter.in === "query") {
          query.set(parameter.name, String(example));
        } else if (example !== undefined && parameter.in === "header") {
          headers[parameter.name] = String(example);
        }
      }
      const content = (operation.requestBody as OpenAPIV3.RequestBodyObject | undefined)?.content;
      const bodySchema = content?.["application/json"]?.schema as
        | OpenAPIV3.SchemaObject
        | undefined;
      if (content)
        expect(bodySchema?.example, `${method} ${path}: body has no example`).toBeDefined();
      const secured = (operation.security ?? []).length > 0;
      // An async target's routes take a run token for a RUNNING run, not the tenant's key.
      const byRunToken = JSON.stringify(operation.security) === JSON.stringify([{ runToken: [] }]);
      if (byRunToken) headers.Authorization = `Bearer ${await runTokenOfStarted(run.runId)}`;

      const reply = await api.call(
        method.toUpperCase(),
        `${url}${query.size > 0 ? `?${query}` : ""}`,
        {
          key: secured && !byRunToken ? KEY_A : null,
          headers,
          ...(bodySchema?.example !== undefined ? { body: bodySchema.example } : {}),
        },
      );
      expect(
        reply.status,
        `${method.toUpperCase()} ${url}: ${reply.text.slice(0, 300)}`,
      ).toBeLessThan(300);
      expect(Object.keys(operation.responses)).toContain(String(reply.status));
    }
  });
  it("declares every status and every Location, ETag and Retry-After header the API answers with", async () => {
    /** The answer's status is one its operation declares, and so is each of these headers it carries. */
    const declared = (method: string, path: string, reply: Reply) => {
      const operation = document.paths[path]?.[method as (typeof METHODS)[number]];
      const response = operation?.responses[String(reply.status)] as
        | OpenAPIV3.ResponseObject
        | undefined;
      expect(response, `${method} ${path} answered ${reply.status}: ${reply.text}`).toBeDefined();
      const names = Object.keys(response?.headers ?? {}).map((name) => name.toLowerCase());
      for (const header of ["location", "etag", "retry-after"])
        if (reply.headers.get(header) !== null)
          expect(names, `${method} ${path} ${reply.status} sends ${header}`).toContain(header);
    };
    const body = { type: "noop", schedule: { cron: "0 0 1 1 *", timezone: "UTC" } };
    const headers = { "Idempotency-Key": `declared-${Date.now()}` };
    const created = await api.call("POST", "/jobs", { body, headers });
    declared("post", "/jobs", created);
    declared("post", "/jobs", await api.call("POST", "/jobs", { body, headers }));
    const { id } = JobSchema.parse(created.body);
    declared("get", "/jobs/{id}", await api.call("GET", `/jobs/${id}`));
    const ifMatch = (version: number) => ({ "If-Match": `"${version}"` });
    const edit = (version: number) =>
      api.call("PATCH", `/jobs/${id}`, { body: { name: "x" }, headers: ifMatch(version) });
    declared("patch", "/jobs/{id}", await edit(1));
    declared("patch", "/jobs/{id}", await edit(1));
    declared("post", "/jobs/{id}/pause", await api.call("POST", `/jobs/${id}/pause`));
    declared("post", "/jobs/{id}/resume", await api.call("POST", `/jobs/${id}/resume`));
    const trigger = { headers: { "Idempotency-Key": "declared-trigger" } };
    declared("post", "/jobs/{id}/trigger", await api.call("POST", `/jobs/${id}/trigger`, trigger));
    declared("post", "/jobs/{id}/trigger", await api.call("POST", `/jobs/${id}/trigger`, trigger));
    declared("post", "/jobs/{id}/cancel", await api.call("POST", `/jobs/${id}/cancel`));
    const { jobId } = await deadRunVia(api);
    const [dead] = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`)).body).items;
    const replay = await api.call("POST", `/dead-letters/${dead?.runId}/replay`);
    expect(replay.status, replay.text).toBe(202);
    declared("post", "/dead-letters/{runId}/replay", replay);

    // Tenant B, held to normal priority and three requests a second: quota refusals, then 429s.
    const capped = await api.call("PUT", "/tenants/tenant-b/quotas", {
      body: { maxPriority: "normal", requestsPerSecond: 3 },
    });
    expect(capped.status, capped.text).toBe(200);
    const asB = { key: KEY_B };
    const high = await api.call("POST", "/jobs", { ...asB, body: { ...body, priority: "high" } });
    expect(high.status, high.text).toBe(403);
    declared("post", "/jobs", high);
    const own = JobSchema.parse((await api.call("POST", "/jobs", { ...asB, body })).body);
    const raise = await api.call("PATCH", `/jobs/${own.id}`, {
      ...asB,
      body: { priority: "high" },
      headers: ifMatch(own.version),
    });
    expect(raise.status, raise.text).toBe(403);
    declared("patch", "/jobs/{id}", raise);
    const flood = await Promise.all(
      Array.from({ length: 12 }, () => api.call("GET", `/jobs/${own.id}`, asB)),
    );
    const limited = flood.find((reply) => reply.status === 429);
    expect(limited, "no request was over tenant B's rate").toBeDefined();
    if (limited) declared("get", "/jobs/{id}", limited);
  });
});
