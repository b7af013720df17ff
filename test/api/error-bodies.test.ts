import type { DynamoDBDocumentClient } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunSchema } from "../../shared/api/schemas/runs.js";
import { DEFAULT_QUOTAS, type TenantQuotas } from "../../shared/config.js";
import type { Engine } from "../../shared/engine.js";
import { issueRunToken } from "../../shared/execution/async-delivery.js";
import { parseRunId } from "../../shared/keys.js";
import { finishRun } from "../../shared/storage/run-finish.js";
import { requeueRun } from "../../shared/storage/run-requeue.js";
import { startRun } from "../../shared/storage/run-start.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { JOB_TYPES } from "./support.js";

/**
 * Every documented error answer, byte for byte: status, the headers a client
 * acts on, and the exact body text. The other API suites check codes and
 * fields; this one pins messages, key order and headers, so that a change to
 * how errors are built or mapped cannot alter what a client receives.
 */
const KEY = "error-bodies-key";
const TENANT = "tenant-errors";
const NOW = new Date("2030-01-01T00:00:00.000Z");
const LATER = "2030-01-02T00:00:00Z";

let fixture: EngineFixture;
let app: ReturnType<typeof createApiApp>;
const faultClients: { destroy(): void }[] = [];

beforeAll(async () => {
  fixture = await createEngineFixture({ clock: () => NOW });
  app = appOver(fixture.engine);
});
afterAll(async () => {
  for (const clients of faultClients) clients.destroy();
  await fixture.destroy();
});

function appOver(engine: Engine) {
  return createApiApp({
    engine,
    jobTypes: JOB_TYPES,
    authenticate: bearerAuthenticator(new Map([[KEY, TENANT]])),
  });
}

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

const PINNED_HEADERS = ["content-type", "allow", "etag", "retry-after", "www-authenticate"];

async function send(
  target: ReturnType<typeof createApiApp>,
  method: string,
  path: string,
  init: { body?: string | Uint8Array; headers?: Record<string, string>; auth?: boolean } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.auth !== false) headers.Authorization = `Bearer ${KEY}`;
  if (init.body !== undefined) headers["Content-Type"] ??= "application/json";
  const response = await target.request(path, {
    method,
    headers,
    ...(init.body !== undefined ? { body: init.body } : {}),
  });
  const pinned: Record<string, string> = {};
  for (const name of PINNED_HEADERS) {
    const value = response.headers.get(name);
    if (value !== null) pinned[name] = value;
  }
  return { status: response.status, headers: pinned, body: await response.text() };
}

const call = (method: string, path: string, init?: Parameters<typeof send>[3]) =>
  send(app, method, path, init);
const json = (value: unknown) => JSON.stringify(value);
const JSON_TYPE = { "content-type": "application/json" };

async function createJob(
  body: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Promise<string> {
  const created = await call("POST", "/jobs", {
    body: json({ type: "noop", schedule: { runAt: LATER }, ...body }),
    headers,
  });
  expect(created.status, created.body).toBe(201);
  return JobSchema.parse(JSON.parse(created.body)).id;
}

describe("error bodies, byte for byte", () => {
  it("routing and credentials: 401, 404, 405", async () => {
    expect(await call("GET", "/jobs", { auth: false })).toEqual({
      status: 401,
      headers: { ...JSON_TYPE, "www-authenticate": 'Bearer realm="scheduler"' },
      body: '{"error":{"code":"unauthorized","message":"missing or unknown credentials"}}',
    });
    expect(await call("GET", "/nowhere")).toEqual({
      status: 404,
      headers: JSON_TYPE,
      body: '{"error":{"code":"not_found","message":"no route for GET /nowhere"}}',
    });
    expect(await call("DELETE", "/jobs")).toEqual({
      status: 405,
      headers: { ...JSON_TYPE, allow: "GET, HEAD, POST" },
      body: '{"error":{"code":"method_not_allowed","message":"DELETE is not allowed here; use GET, HEAD, POST"}}',
    });
  });

  it("an async target's run routes: 401 without a good run token, 409 for a run not held", async () => {
    const id = await createJob();
    const triggered = await call("POST", `/jobs/${id}/trigger`);
    const runId = RunSchema.parse(JSON.parse(triggered.body)).runId;
    // Delivered to an async target with its token, then released back to the queue (its worker
    // shut down): the token is the run's, and stale.
    const ref = parseRunId(runId);
    if (ref === null) throw new Error(`not a run id: ${runId}`);
    const started = await startRun(fixture.engine, ref, "error-bodies-worker", NOW);
    if (started.kind !== "started") throw new Error(`run ${runId} did not start`);
    const token = await issueRunToken(
      fixture.engine,
      started.run,
      { timeoutSeconds: 300, version: started.run.jobVersion },
      NOW,
    );
    await requeueRun(fixture.engine, started.run, "released: the worker shut down mid-run", NOW);
    const heartbeat = `/runs/${runId}/heartbeat`;
    const runRealm = { ...JSON_TYPE, "www-authenticate": 'Bearer realm="scheduler-run"' };

    expect(await call("POST", heartbeat, { auth: false })).toEqual({
      status: 401,
      headers: runRealm,
      body: '{"error":{"code":"unauthorized","message":"send the run token as Authorization: Bearer <token>"}}',
    });
    expect(await call("POST", heartbeat)).toEqual({
      status: 401,
      headers: runRealm,
      body: '{"error":{"code":"unauthorized","message":"run token refused: not a run token"}}',
    });
    expect(
      await call("POST", heartbeat, {
        auth: false,
        headers: { Authorization: `Bearer ${token.slice(0, -4)}AAAA` },
      }),
    ).toEqual({
      status: 401,
      headers: runRealm,
      body: '{"error":{"code":"unauthorized","message":"run token refused: it is not a token this run was given"}}',
    });
    // A run that does not exist answers the same as one that does, to a token that is not its own.
    const missingRunId = runId.replace(/-1$/, "-2");
    expect(
      await call("POST", `/runs/${missingRunId}/heartbeat`, {
        auth: false,
        headers: { Authorization: `Bearer ${token}` },
      }),
    ).toEqual({
      status: 401,
      headers: runRealm,
      body: '{"error":{"code":"unauthorized","message":"run token refused: it is not a token this run was given"}}',
    });
    expect(
      await call("POST", heartbeat, { auth: false, headers: { Authorization: `Bearer ${token}` } }),
    ).toEqual(error(409, { code: "stale_run_token", message: `run ${runId}: the run is queued` }));
  });

  it("unreadable bodies: 415, 400 malformed_json, 400 structure, 413", async () => {
    expect(
      await call("POST", "/jobs", { body: "x", headers: { "Content-Type": "text/plain" } }),
    ).toEqual(
      error(415, {
        code: "unsupported_media_type",
        message: 'send the body as JSON with "Content-Type: application/json", not "text/plain"',
      }),
    );
    expect(await call("POST", "/jobs", { body: " " })).toEqual(
      error(400, { code: "malformed_json", message: "a JSON body is required" }),
    );
    expect(await call("POST", "/jobs", { body: new Uint8Array([0x7b, 0xff, 0x7d]) })).toEqual(
      error(400, { code: "malformed_json", message: "the body is not valid UTF-8" }),
    );
    expect(await call("POST", "/jobs", { body: "{" })).toEqual(
      error(400, {
        code: "malformed_json",
        message: "the body is not valid JSON: Expected property name or '}' in JSON at position 1",
      }),
    );
    expect(
      await call("POST", "/jobs", {
        body: `{"type":"noop","payload":${"[".repeat(70)}${"]".repeat(70)}}`,
      }),
    ).toEqual(
      error(400, {
        code: "validation_failed",
        message: "the body nests deeper than 64 levels",
        field: "payload",
      }),
    );
    expect(await call("POST", "/jobs", { body: '{"__proto__":{"a":1},"type":"noop"}' })).toEqual(
      error(400, {
        code: "validation_failed",
        message: "__proto__: is not an accepted field",
        field: "__proto__",
      }),
    );
    expect(
      await call("POST", "/jobs", { body: json({ type: "noop", pad: "x".repeat(100_000) }) }),
    ).toEqual(
      error(413, { code: "payload_too_large", message: "the request body exceeds 81920 bytes" }),
    );
    expect(
      await call("POST", "/jobs", {
        body: json({ type: "noop", schedule: { runAt: LATER }, payload: "x".repeat(66_000) }),
      }),
    ).toEqual(
      error(413, {
        code: "payload_too_large",
        message: "payload is 66002 bytes serialized; at most 65536 are accepted",
        field: "payload",
      }),
    );
  });

  it("validation: every issue listed, unknown fields first, the first one named", async () => {
    expect(
      await call("POST", "/jobs", {
        body: json({ type: "noop", schedule: { runAt: LATER }, colour: "red", name: 5 }),
      }),
    ).toEqual(
      invalid([
        { field: "colour", message: 'unknown field "colour"' },
        { field: "name", message: "Invalid input: expected string, received number" },
      ]),
    );
    expect(
      await call("POST", "/jobs", {
        body: json({ type: "noop", schedule: { cron: "0 9 * *", timezone: "CET" } }),
      }),
    ).toEqual(
      invalid([
        {
          field: "schedule.cron",
          message:
            "has 4 fields, expected 5 (minute hour day-of-month month day-of-week) or 6 (second minute hour day-of-month month day-of-week)",
        },
        {
          field: "schedule.timezone",
          message:
            '"CET" is an abbreviation or legacy zone name, not a location-based IANA zone (for example "EST" is a fixed -05:00 with no daylight-saving time): use a location-based IANA name such as "America/New_York", "Europe/London" or "UTC"',
        },
      ]),
    );
    expect(
      await call("POST", "/jobs", { body: json({ type: "nope", schedule: { runAt: LATER } }) }),
    ).toEqual(
      invalid([
        {
          field: "type",
          message: 'Invalid option: expected one of "http"|"noop"|"sleep"|"fail"|"report"',
        },
      ]),
    );
    expect(
      await call("POST", "/jobs", {
        body: json({ type: "noop", schedule: { runAt: LATER }, idempotencyKey: "a" }),
        headers: { "Idempotency-Key": "b" },
      }),
    ).toEqual(
      invalid([
        {
          field: "idempotencyKey",
          message: "differs from the Idempotency-Key header; send one or make them equal",
        },
      ]),
    );
    expect(
      await call("POST", "/jobs", { body: json({ type: "http", schedule: { runAt: LATER } }) }),
    ).toEqual(
      invalid([{ field: "target", message: "is required for http jobs: give at least its url" }]),
    );
    expect(await call("GET", "/jobs?limit=0&colour=red")).toEqual(
      invalid([
        { field: "colour", message: 'unknown parameter "colour"' },
        { field: "limit", message: "Too small: expected number to be >=1" },
      ]),
    );
    expect(await call("GET", "/jobs?cursor=nonsense")).toEqual(
      invalid([{ field: "cursor", message: "is not a cursor returned by this API" }]),
    );
    expect(
      await call("POST", "/schedules/preview", { body: json({ schedule: { every: "soon" } }) }),
    ).toEqual(
      invalid([
        {
          field: "schedule.every",
          message: 'must be an ISO-8601 duration such as "PT15M", "PT1H" or "P1D"; got "soon"',
        },
      ]),
    );
    expect(
      await call("POST", "/schedules/preview", {
        body: json({ schedule: { runAt: LATER }, count: 0 }),
      }),
    ).toEqual(invalid([{ field: "count", message: "Too small: expected number to be >=1" }]));
  });

  it("a repeated query parameter: a 400 naming it as given more than once, on every route with query parameters", async () => {
    const repeated = (field: string) =>
      invalid([{ field, message: "is given more than once; give it once" }]);
    const id = await createJob();
    expect(await call("GET", "/jobs?limit=1&limit=2")).toEqual(repeated("limit"));
    expect(await call("GET", `/jobs/${id}/runs?status=succeeded&status=failed`)).toEqual(
      repeated("status"),
    );
    // Unknown parameters still come first; another parameter's issue follows the repeated one.
    expect(await call("GET", "/jobs?colour=red&status=active&status=active&limit=0")).toEqual(
      invalid([
        { field: "colour", message: 'unknown parameter "colour"' },
        { field: "status", message: "is given more than once; give it once" },
        { field: "limit", message: "Too small: expected number to be >=1" },
      ]),
    );
    // Each query parameter the document declares, given twice with a value its schema takes once
    // (an enum's first; a cursor's text is checked after the schema: "x" alone is a 400 too).
    const accepted: Record<string, string> = {
      limit: "1",
      cursor: "x",
      status: "succeeded",
      from: "2030-01-01T00:00:00Z",
      to: "2030-01-02T00:00:00Z",
      count: "1",
    };
    const document = OpenApiPaths.parse(JSON.parse((await call("GET", "/openapi.json")).body));
    const routes = new Set<string>();
    for (const [path, operations] of Object.entries(document.paths)) {
      for (const parameter of operations.get?.parameters ?? []) {
        if (parameter.in !== "query") continue;
        routes.add(path);
        const value = parameter.schema?.enum?.[0] ?? accepted[parameter.name];
        if (value === undefined) throw new Error(`no value to give ${path}'s ${parameter.name}`);
        const once = await call(
          "GET",
          `${path.replace(/\{[^}]+\}/g, id)}?${parameter.name}=${value}`,
        );
        expect(once.status === 200 || parameter.name === "cursor", `${path} ${once.body}`).toBe(
          true,
        );
        const twice = `${path.replace(/\{[^}]+\}/g, id)}?${parameter.name}=${value}&${parameter.name}=${value}`;
        expect(await call("GET", twice), twice).toEqual(repeated(parameter.name));
      }
    }
    expect([...routes].sort()).toEqual([
      "/dead-letters",
      "/jobs",
      "/jobs/{id}/preview",
      "/jobs/{id}/runs",
    ]);
  });

  it("a number in a query is plain decimal digits: any other writing is a 400 naming its parameter", async () => {
    const id = await createJob();
    const written = (value: string) =>
      `must be a whole number written in decimal digits (0-9); got ${JSON.stringify(value)}`;
    // As sent in the URL, and as the parameter reads once decoded ("+" unencoded is a space).
    const writings: [string, string][] = [
      ["0x10", "0x10"],
      ["1e1", "1e1"],
      ["%205", " 5"],
      ["5%20", "5 "],
      ["5.0", "5.0"],
      ["%2B5", "+5"],
      ["+5", " 5"],
      ["-0", "-0"],
      ["", ""],
      ["0b101", "0b101"],
      ["Infinity", "Infinity"],
    ];
    const routes: [string, string][] = [
      ["/jobs", "limit"],
      [`/jobs/${id}/runs`, "limit"],
      ["/dead-letters", "limit"],
      [`/jobs/${id}/preview`, "count"],
    ];
    for (const [path, field] of routes) {
      for (const [sent, read] of writings) {
        const answer = await call("GET", `${path}?${field}=${sent}`);
        expect(answer, `${path}?${field}=${sent}`).toEqual(
          invalid([{ field, message: written(read) }]),
        );
      }
      // Digits still read as the number they write, a leading zero included, bounds as before.
      expect((await call("GET", `${path}?${field}=05`)).status).toBe(200);
      expect(await call("GET", `${path}?${field}=0`)).toEqual(
        invalid([{ field, message: "Too small: expected number to be >=1" }]),
      );
    }
  });

  it("a query parameter the route does not declare is a 400 naming it, on every route", async () => {
    const id = await createJob();
    const triggered = await call("POST", `/jobs/${id}/trigger`);
    const runId = RunSchema.parse(JSON.parse(triggered.body)).runId;
    const document = OpenApiOperations.parse(JSON.parse((await call("GET", "/openapi.json")).body));
    const values: Record<string, string> = { id, runId, tenantId: TENANT };
    const unknown = (...names: string[]) =>
      invalid(names.map((name) => ({ field: name, message: `unknown parameter "${name}"` })));
    let operations = 0;
    for (const [template, methods] of Object.entries(document.paths)) {
      const path = template.replace(/\{([^}]+)\}/g, (_, name: string) => values[name] ?? name);
      for (const method of Object.keys(methods)) {
        operations++;
        const sent = `${path}?colour=red`;
        expect(await call(method.toUpperCase(), sent), `${method} ${sent}`).toEqual(
          unknown("colour"),
        );
      }
    }
    expect(operations).toBeGreaterThan(20);
    // A misspelt parameter does not silently do nothing; each unknown one is named once.
    expect(await call("GET", "/quotas?limt=5&x=1&x=2")).toEqual(unknown("limt", "x"));
    expect(await call("HEAD", "/health?x=1")).toMatchObject({ status: 400 });
    expect(await call("GET", `/jobs/${id}?`)).toMatchObject({ status: 200 });
  });

  it("domain errors: 404, 428, 412, 409", async () => {
    const id = await createJob();
    const cancelled = await createJob();
    expect((await call("POST", `/jobs/${cancelled}/cancel`)).status).toBe(200);
    const triggered = await call("POST", `/jobs/${id}/trigger`);
    const runId = RunSchema.parse(JSON.parse(triggered.body)).runId;
    const unknownRun = `${id}-20300101T000000000-9`;

    expect(await call("GET", "/jobs/01J9Z3V6K8N4QX2M7R5T0W1Y3B")).toEqual(
      error(404, { code: "not_found", message: "job 01J9Z3V6K8N4QX2M7R5T0W1Y3B not found" }),
    );
    expect(await call("GET", "/jobs/not!an!id")).toEqual(
      error(404, { code: "not_found", message: "job not!an!id not found" }),
    );
    expect(await call("GET", `/jobs/${id}/runs/${unknownRun}`)).toEqual(
      error(404, { code: "not_found", message: `run ${unknownRun} not found` }),
    );
    expect(await call("POST", `/dead-letters/${unknownRun}/replay`)).toEqual(
      error(404, { code: "not_found", message: `run ${unknownRun} not found` }),
    );

    const rename = json({ name: "x" });
    expect(await call("PATCH", `/jobs/${id}`, { body: rename })).toEqual(
      error(428, {
        code: "precondition_required",
        message:
          'send If-Match with the job\'s version (its ETag, e.g. "3") so that concurrent edits cannot overwrite each other',
        field: "If-Match",
      }),
    );
    expect(
      await call("PATCH", `/jobs/${id}`, { body: rename, headers: { "If-Match": '"7"' } }),
    ).toEqual(
      error(
        412,
        { code: "version_mismatch", message: "job is at version 1, not 7", field: "If-Match" },
        { etag: '"1"' },
      ),
    );
    expect(
      await call("PATCH", `/jobs/${id}`, { body: rename, headers: { "If-Match": "v1" } }),
    ).toEqual(
      invalid([
        { field: "If-Match", message: 'must be the job\'s version, such as "3"; got "v1"' },
      ]),
    );
    expect(
      await call("PATCH", `/jobs/${id}`, { body: json({}), headers: { "If-Match": '"1"' } }),
    ).toEqual(
      error(400, {
        code: "validation_failed",
        message:
          "nothing to change: give at least one of name, schedule, payload, target, retry, misfirePolicy, overlapPolicy, maxConcurrent, priority, timeoutSeconds, window, inFlight, endAt, maxRuns",
      }),
    );
    expect(
      await call("PATCH", `/jobs/${cancelled}`, { body: rename, headers: { "If-Match": '"1"' } }),
    ).toEqual(
      error(409, {
        code: "illegal_transition",
        message: "cannot edit a job that is cancelled",
        currentStatus: "cancelled",
      }),
    );
    expect(await call("POST", `/jobs/${cancelled}/resume`)).toEqual(
      error(409, {
        code: "illegal_transition",
        message: "cannot resume a job that is cancelled",
        currentStatus: "cancelled",
      }),
    );
    const keyed = { headers: { "Idempotency-Key": "same" } };
    await createJob({}, keyed.headers);
    expect(
      await call("POST", "/jobs", {
        body: json({ type: "noop", name: "other", schedule: { runAt: LATER } }),
        ...keyed,
      }),
    ).toEqual(
      error(409, {
        code: "idempotency_conflict",
        message: 'idempotency key "same" was already used with a different request',
        field: "Idempotency-Key",
      }),
    );
    expect(await call("POST", `/dead-letters/${runId}/replay`)).toEqual(
      error(409, {
        code: "not_replayable",
        message: `run ${runId} cannot be replayed: it is queued, not dead`,
      }),
    );
    expect(await call("POST", `/jobs/${id}/runs/${unknownRun}/cancel`)).toEqual(
      error(404, { code: "not_found", message: `run ${unknownRun} not found` }),
    );
    // A repeat of a cancel answers as the cancel did; a run that ended otherwise is refused.
    const runCancelled = await call("POST", `/jobs/${id}/runs/${runId}/cancel`);
    expect(runCancelled.status).toBe(200);
    expect(await call("POST", `/jobs/${id}/runs/${runId}/cancel`)).toEqual(runCancelled);
    const succeededId = RunSchema.parse(
      JSON.parse((await call("POST", `/jobs/${id}/trigger`)).body),
    ).runId;
    const ref = parseRunId(succeededId);
    if (ref === null) throw new Error(`not a run id: ${succeededId}`);
    const started = await startRun(fixture.engine, ref, "error-bodies-worker", NOW);
    if (started.kind !== "started") throw new Error(`run ${succeededId} did not start`);
    await finishRun(
      fixture.engine,
      started.run,
      { status: "SUCCEEDED", ran: true, tracked: false },
      NOW,
    );
    expect(await call("POST", `/jobs/${id}/runs/${succeededId}/cancel`)).toEqual(
      error(409, {
        code: "illegal_transition",
        message: `run ${succeededId} has already ended: it is succeeded`,
        currentStatus: "succeeded",
      }),
    );
    expect(await call("POST", `/jobs/${id}/pause`, { body: json({ running: "stop" }) })).toEqual(
      invalid([
        {
          field: "running",
          message: 'Invalid option: expected one of "finish"|"cancel"',
        },
      ]),
    );
  });

  it("quotas: 403 quota_exceeded naming the quota (and the field it refuses), 403 forbidden, 429 with Retry-After", async () => {
    const limited = (quotas: Partial<TenantQuotas>) =>
      createApiApp({
        engine: {
          ...fixture.engine,
          settings: { ...fixture.engine.settings, quotas: { ...DEFAULT_QUOTAS, ...quotas } },
        },
        jobTypes: JOB_TYPES,
        authenticate: bearerAuthenticator(new Map([[KEY, "tenant-quotas"]])),
      });
    const quotaApp = limited({ activeJobs: 2, runsPerMinute: 10, maxPriority: "normal" });
    const post = (body: Record<string, unknown>) =>
      send(quotaApp, "POST", "/jobs", {
        body: json({ type: "noop", schedule: { runAt: LATER }, ...body }),
      });
    expect((await post({})).status).toBe(201);
    expect(await post({ priority: "high" })).toEqual(
      error(403, {
        code: "quota_exceeded",
        message: "priority high is above this tenant's maxPriority quota (normal)",
        field: "priority",
        quota: "maxPriority",
      }),
    );
    expect(await post({ schedule: { every: "PT5S" } })).toEqual(
      error(403, {
        code: "quota_exceeded",
        message:
          "this job adds 12 runs per minute at its peak to the 0 of this tenant's jobs; its runsPerMinute quota is 10",
        field: "schedule",
        quota: "runsPerMinute",
      }),
    );
    expect((await post({})).status).toBe(201);
    expect(await post({})).toEqual(
      error(403, {
        code: "quota_exceeded",
        message: "this tenant has 2 active job(s); its activeJobs quota is 2",
        quota: "activeJobs",
      }),
    );
    expect(await send(quotaApp, "GET", "/tenants/tenant-quotas/quotas")).toEqual(
      error(403, {
        code: "forbidden",
        message:
          "only the deployment's admin tenants (ADMIN_TENANTS) may read or set another tenant's quotas",
      }),
    );
    // A bucket of two seconds' worth: two requests pass, the third waits for a token.
    const slow = limited({ requestsPerSecond: 1 });
    expect((await send(slow, "GET", "/quotas")).status).toBe(200);
    expect((await send(slow, "GET", "/quotas")).status).toBe(200);
    expect(await send(slow, "GET", "/quotas")).toEqual(
      error(
        429,
        {
          code: "rate_limited",
          message: "over the requestsPerSecond quota (1 requests per second); retry after 1 s",
          quota: "requestsPerSecond",
        },
        { "retry-after": "1" },
      ),
    );
  });

  it("an echoed path id keeps whole characters: a character the 64th unit cuts in two is left out", async () => {
    // No tenant id holds an emoji, so the 404 quotes the id: cut at 64 UTF-16 units, it ended in
    // the first half of one (an unpaired surrogate, "\ud83d" in the JSON), no Unicode text.
    const admin = createApiApp({
      engine: fixture.engine,
      jobTypes: JOB_TYPES,
      authenticate: bearerAuthenticator(new Map([[KEY, TENANT]])),
      adminTenants: [TENANT],
    });
    const id = `${"x".repeat(63)}\u{1F600}`;
    expect(await send(admin, "GET", `/tenants/${encodeURIComponent(id)}/quotas`)).toEqual(
      error(404, { code: "not_found", message: `no tenant ${"x".repeat(63)}` }),
    );
  });

  it("a caller its authenticator names . or .. is refused 401: /tenants/{tenantId}/quotas could never name it, the URL resolving the dot segment", async () => {
    for (const tenant of [".", ".."]) {
      const dotted = createApiApp({
        engine: fixture.engine,
        jobTypes: JOB_TYPES,
        authenticate: bearerAuthenticator(new Map([[KEY, tenant]])),
        adminTenants: [TENANT],
      });
      expect((await send(dotted, "GET", "/quotas")).status).toBe(401);
      expect(
        (
          await send(dotted, "POST", "/jobs", {
            body: json({ type: "noop", schedule: { runAt: LATER } }),
          })
        ).status,
      ).toBe(401);
    }
    // Escaped, it is still a dot segment: the request reaches the caller's own quotas, not the tenant's.
    const admin = createApiApp({
      engine: fixture.engine,
      jobTypes: JOB_TYPES,
      authenticate: bearerAuthenticator(new Map([[KEY, TENANT]])),
      adminTenants: [TENANT],
    });
    const viaDots = await send(admin, "GET", "/tenants/%2E%2E/quotas");
    expect([viaDots.status, JSON.parse(viaDots.body).tenantId]).toEqual([200, TENANT]);
  });

  it("a body that is not JSON from its first character on: the parser's message is quoted as Unicode text", async () => {
    // V8's JSON.parse names the unexpected token by its first UTF-16 unit: for an emoji, half of
    // it, an unpaired surrogate ("\ud83d" in the answer's JSON), which is no Unicode text.
    expect(await call("POST", "/jobs", { body: "\u{1F600}" })).toEqual(
      error(400, {
        code: "malformed_json",
        message: `the body is not valid JSON: Unexpected token '\uFFFD', "\u{1F600}" is not valid JSON`,
      }),
    );
  });

  it("storage faults: throttling is 503 busy, anything unforeseen a 500 that hides its details", async () => {
    const id = await createJob();
    const throttled = appOver({ ...fixture.engine, doc: failingDoc("ThrottlingException") });
    expect(await send(throttled, "GET", `/jobs/${id}`)).toEqual(
      error(
        503,
        { code: "busy", message: "the job is being changed by another request; try again" },
        { "retry-after": "1" },
      ),
    );
    // A read that DynamoDB failed with a 5xx (past the SDK's retries) or that timed out wrote
    // nothing: it is worth a retry, not a 500. A write's is not known to have written nothing.
    const unavailable = error(
      503,
      { code: "busy", message: "the scheduler's storage did not answer in time; try again" },
      { "retry-after": "1" },
    );
    const serverError = appOver({
      ...fixture.engine,
      doc: failingDoc("InternalServerError", undefined, 500),
    });
    expect(await send(serverError, "GET", `/jobs/${id}`)).toEqual(unavailable);
    const timedOut = appOver({ ...fixture.engine, doc: failingDoc("TimeoutError") });
    expect(await send(timedOut, "GET", `/jobs/${id}/runs`)).toEqual(unavailable);
    expect(await send(serverError, "POST", `/jobs/${id}/pause`)).toEqual(
      error(500, { code: "internal", message: "internal error" }),
    );
    const denied = appOver({ ...fixture.engine, doc: failingDoc("AccessDeniedException") });
    expect(await send(denied, "GET", `/jobs/${id}`)).toEqual(
      error(500, { code: "internal", message: "internal error" }),
    );
    const rotating = appOver({
      ...fixture.engine,
      doc: failingDoc("ConditionalCheckFailedException", "UpdateItemCommand"),
    });
    expect(await send(rotating, "POST", "/webhook-secret/rotate")).toEqual(
      error(
        503,
        { code: "busy", message: "the webhook secret is being rotated by another request" },
        { "retry-after": "1" },
      ),
    );
  });
});

/** The one error shape: `{"error":{...}}` with the keys in the order given. */
function error(
  status: number,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): Answer {
  return { status, headers: { ...JSON_TYPE, ...headers }, body: JSON.stringify({ error: body }) };
}

/** The GET operations' parameters of the OpenAPI document, as far as the tests read them. */
const OpenApiPaths = z.object({
  paths: z.record(
    z.string(),
    z.object({
      get: z
        .object({
          parameters: z
            .array(
              z.object({
                name: z.string(),
                in: z.string(),
                schema: z.object({ enum: z.array(z.string()).optional() }).optional(),
              }),
            )
            .optional(),
        })
        .optional(),
    }),
  ),
});

/** Every operation of the OpenAPI document, by path and method. */
const OpenApiOperations = z.object({
  paths: z.record(z.string(), z.record(z.string(), z.unknown())),
});

/** A 400 listing `issues`, named by the first. */
function invalid(issues: readonly { field: string; message: string }[]): Answer {
  const [first] = issues;
  if (first === undefined) throw new Error("invalid: no issues");
  return error(400, {
    code: "validation_failed",
    message: `${first.field}: ${first.message}`,
    field: first.field,
    issues,
  });
}

/** A document client whose requests fail with `name` (only `command` requests, when given). */
function failingDoc(
  name: string,
  command?: string,
  httpStatusCode?: number,
): DynamoDBDocumentClient {
  const clients = createTestClients();
  faultClients.push(clients);
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (command !== undefined && context.commandName !== command) return next(args);
      throw Object.assign(new Error(`injected ${name}`), {
        name,
        ...(httpStatusCode === undefined ? {} : { $metadata: { httpStatusCode } }),
      });
    },
    { step: "initialize", name: "injectedFault" },
  );
  return clients.doc;
}
