import { request } from "node:http";
import { connect } from "node:net";
import { GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobPageSchema, JobSchema } from "../../shared/api/schemas/jobs.js";
import { PreviewSchema } from "../../shared/api/schemas/previews.js";
import { RunPageSchema, RunSchema } from "../../shared/api/schemas/runs.js";
import { sleep } from "../../shared/clock.js";
import { runId as runIdOf, runSortKey } from "../../shared/keys.js";
import {
  type ApiHarness,
  deadRunVia,
  expectError,
  inMinutes,
  KEY_A,
  KEY_B,
  laterJob,
  type Reply,
  runOnce,
  startApi,
} from "./support.js";

/**
 * The HTTP contract, over real HTTP against the local server, DynamoDB Local
 * and the SQS emulator: every endpoint, every documented error. Responses are
 * parsed with the same schemas the OpenAPI document is generated from, so the
 * document cannot drift from what is served.
 */
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

const job = (reply: Reply) => JobSchema.parse(reply.body);

async function create(body: Record<string, unknown>, headers: Record<string, string> = {}) {
  const reply = await api.call("POST", "/jobs", { body, headers });
  expect(reply.status, reply.text).toBe(201);
  return job(reply);
}

async function itemCounts() {
  const [jobs, due, runs] = await Promise.all([
    api.fixture.jobs(),
    api.fixture.dueEntries(),
    api.fixture.runs(),
  ]);
  return { jobs: jobs.length, due: due.length, runs: runs.length };
}

describe("service endpoints and routing", () => {
  it("GET /health and GET /openapi.json need no credentials", async () => {
    const health = await api.call("GET", "/health", { key: null });
    expect(health.status).toBe(200);
    expect(health.body).toEqual({ status: "ok" });
    const doc = await api.call("GET", "/openapi.json", { key: null });
    expect(doc.status).toBe(200);
    expect((doc.body as { openapi: string }).openapi).toMatch(/^3\./);
  });

  it("401 without credentials, with an unknown key, or with another scheme", async () => {
    const variants: Record<string, string>[] = [
      {},
      { Authorization: "Bearer nope" },
      { Authorization: "Basic a2V5LWZvci1hOg==" },
    ];
    for (const headers of variants) {
      const reply = await api.call("GET", "/jobs", { key: null, headers });
      expectError(reply, 401, { code: "unauthorized" });
      expect(reply.headers.get("www-authenticate")).toMatch(/^Bearer/);
    }
    expectError(await api.call("POST", "/jobs", { key: null, body: laterJob() }), 401);
  });

  it("404 for unknown routes, 405 with Allow for a wrong method on a known path", async () => {
    expectError(await api.call("GET", "/nope"), 404, { code: "not_found" });
    expectError(await api.call("GET", "/jobs/x/y/z"), 404);
    expectError(await api.call("GET", "/jobs/"), 404);
    const onJobs = await api.call("DELETE", "/jobs");
    expectError(onJobs, 405, { code: "method_not_allowed" });
    expect(onJobs.headers.get("allow")).toBe("GET, HEAD, POST");
    const onJob = await api.call("PUT", "/jobs/01ABC", { body: {} });
    expectError(onJob, 405);
    expect(onJob.headers.get("allow")).toBe("DELETE, GET, HEAD, PATCH");
    expect((await api.call("GET", "/jobs/01ABC/pause")).headers.get("allow")).toBe("POST");
    expectError(await api.call("POST", "/health", { key: null }), 405);
  });

  it("answers only requests that name it by a loopback name: another Host, as a page whose name its DNS turned to 127.0.0.1 sends, is 403", async () => {
    const { port } = new URL(api.server.url);
    // fetch sets Host from the URL: the request is made as a browser would make it to a page's own name.
    const ask = (host: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const sent = request(
          {
            host: "127.0.0.1",
            port,
            path: "/jobs",
            headers: { Host: host, Authorization: `Bearer ${KEY_A}` },
          },
          (answer) => {
            let body = "";
            answer.setEncoding("utf8");
            answer.on("data", (chunk: string) => {
              body += chunk;
            });
            answer.on("end", () => resolve({ status: answer.statusCode ?? 0, body }));
          },
        );
        sent.on("error", reject);
        sent.end();
      });
    for (const host of [
      `127.0.0.1:${port}`,
      `localhost:${port}`,
      `[::1]:${port}`,
      "app.localhost",
    ]) {
      expect((await ask(host)).status, host).toBe(200);
    }
    for (const host of [
      `attacker.example:${port}`,
      "attacker.example",
      `localhost.attacker.example:${port}`,
      `127.0.0.1.nip.io:${port}`,
    ]) {
      const refused = await ask(host);
      expect(refused.status, host).toBe(403);
      expect(JSON.parse(refused.body)).toMatchObject({ error: { code: "forbidden" } });
    }
  });
});

describe("POST /jobs", () => {
  it("creates a job with the documented defaults, Location and ETag", async () => {
    const reply = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: { cron: "0 9 * * *", timezone: "Europe/Berlin" } },
    });
    expect(reply.status).toBe(201);
    const created = job(reply);
    expect(reply.headers.get("location")).toBe(`/jobs/${created.id}`);
    expect(reply.headers.get("etag")).toBe('"1"');
    expect(created).toMatchObject({
      name: "noop",
      type: "noop",
      status: "active",
      priority: "normal",
      timeoutSeconds: 300,
      version: 1,
      payload: null,
      target: null,
      lastRun: null,
      policies: {
        retry: { maxAttempts: 5, initialDelaySeconds: 30, maxDelaySeconds: 3600 },
        misfirePolicy: "fire_once",
        overlapPolicy: "skip",
        maxConcurrent: 1,
        inFlight: "skip",
      },
    });
    // 09:00 in Berlin is 07:00 or 08:00 UTC depending on DST.
    expect(created.nextRunAt).toMatch(/T0[78]:00:00\.000Z$/);
    const stored = (await api.fixture.jobs()).find((j) => j.jobId === created.id);
    expect(stored?.tenantId).toBe("tenant-a");
  });

  it("stores every given field, converting retry seconds to the engine's milliseconds", async () => {
    const created = await create({
      name: "reports",
      type: "report",
      schedule: { every: "PT1H", startAt: "2030-01-01T00:00:00+02:00" },
      payload: { nested: { list: [1, 2.5, "ü"], empty: "" } },
      retry: { maxAttempts: 3, initialDelaySeconds: 10, maxDelaySeconds: 60 },
      misfirePolicy: "skip",
      overlapPolicy: "allow",
      maxConcurrent: 4,
      priority: "high",
      timeoutSeconds: 885,
    });
    expect(created).toMatchObject({
      name: "reports",
      type: "report",
      schedule: { every: "PT1H", startAt: "2029-12-31T22:00:00.000Z" },
      payload: { nested: { list: [1, 2.5, "ü"], empty: "" } },
      priority: "high",
      timeoutSeconds: 885,
      policies: {
        retry: { maxAttempts: 3, initialDelaySeconds: 10, maxDelaySeconds: 60 },
        misfirePolicy: "skip",
        overlapPolicy: "allow",
        maxConcurrent: 4,
      },
    });
    const stored = (await api.fixture.jobs()).find((j) => j.jobId === created.id);
    expect(stored?.policies.retry).toEqual({
      maxAttempts: 3,
      initialDelayMs: 10_000,
      maxDelayMs: 60_000,
    });
  });

  it("normalizes an every schedule without startAt, so its occurrences are fixed", async () => {
    const created = await create({ type: "noop", schedule: { every: "P1D" } });
    expect(created.schedule).toEqual({ every: "P1D", startAt: expect.stringMatching(/\.000Z$/) });
    const stored = (await api.fixture.jobs()).find((j) => j.jobId === created.id);
    expect(stored?.schedule).toEqual(created.schedule);
  });

  it("adjusts only defaults to keep initialDelay ≤ maxDelay", async () => {
    const low = await create(laterJob({ retry: { maxDelaySeconds: 10 } }));
    expect(low.policies.retry).toMatchObject({ initialDelaySeconds: 10, maxDelaySeconds: 10 });
    const high = await create(laterJob({ retry: { initialDelaySeconds: 7200 } }));
    expect(high.policies.retry).toMatchObject({ initialDelaySeconds: 7200, maxDelaySeconds: 7200 });
  });

  it("requires a target for http jobs only, and keeps it", async () => {
    const target = {
      url: "https://example.com/hook",
      headers: { Authorization: "Bearer t", "X-Team": "ops" },
      timeoutSeconds: 10,
    };
    const created = await create(laterJob({ type: "http", target, payload: { a: 1 } }));
    expect(created.target).toEqual(target);
    expectError(await api.call("POST", "/jobs", { body: laterJob({ type: "http" }) }), 400, {
      field: "target",
    });
    expectError(await api.call("POST", "/jobs", { body: laterJob({ target }) }), 400, {
      field: "target",
    });
  });

  it("keeps target headers named as Object's own properties (constructor, toString): create, edit, batch", async () => {
    const headers = { constructor: "c", toString: "t", valueOf: "v", hasOwnProperty: "h" };
    const http = (target: Record<string, unknown>) =>
      laterJob({ type: "http", target: { url: "https://example.com/hook", ...target } });
    const created = await create(http({ headers }));
    expect(created.target?.headers).toEqual(headers);
    const edited = await api.call("PATCH", `/jobs/${created.id}`, {
      body: { target: { url: "https://example.com/other", headers: { constructor: "d" } } },
      headers: { "If-Match": '"1"' },
    });
    expect(edited.status, edited.text).toBe(200);
    expect(job(edited).target?.headers).toEqual({ constructor: "d" });
    const batched = await api.call("POST", "/jobs:batch", { body: { jobs: [http({ headers })] } });
    expect(batched.text).toContain('"status":201');
    const listed = JobPageSchema.parse((await api.call("GET", "/jobs?limit=100")).body);
    const stored = listed.items.filter((j) =>
      Object.hasOwn(j.target?.headers ?? {}, "constructor"),
    );
    expect(stored.map((j) => j.target?.headers)).toEqual([headers, { constructor: "d" }]);
  });

  it("defaults the name to the type, and a payload of exactly 64 KiB is accepted", async () => {
    const payload = "x".repeat(64 * 1024 - 2);
    const created = await create(laterJob({ payload }));
    expect(created.name).toBe("noop");
    expect(created.payload).toBe(payload);
  });

  it("keeps __proto__ and constructor keys inside the payload as plain data", async () => {
    const raw = `{"type":"noop","schedule":{"runAt":"${inMinutes(600)}"},"payload":{"__proto__":{"polluted":true},"constructor":{"prototype":1}}}`;
    const reply = await api.call("POST", "/jobs", {
      raw,
      headers: { "Content-Type": "application/json" },
    });
    expect(reply.status, reply.text).toBe(201);
    expect(reply.text).toContain(
      '"payload":{"__proto__":{"polluted":true},"constructor":{"prototype":1}}',
    );
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it.each([
    ["unknown field", laterJob({ colour: "red" }), "colour"],
    ["unknown nested field", laterJob({ retry: { maxAttempts: 2, jitter: true } }), "retry.jitter"],
    ["missing type", { schedule: { runAt: inMinutes(60) } }, "type"],
    ["unregistered type", laterJob({ type: "nope" }), "type"],
    ["missing schedule", { type: "noop" }, "schedule"],
    ["bad cron", laterJob({ schedule: { cron: "61 * * * *", timezone: "UTC" } }), "schedule.cron"],
    ["cron macro", laterJob({ schedule: { cron: "@hourly", timezone: "UTC" } }), "schedule.cron"],
    [
      "bad zone",
      laterJob({ schedule: { cron: "0 9 * * *", timezone: "Mars/Olympus" } }),
      "schedule.timezone",
    ],
    [
      "abbreviated zone",
      laterJob({ schedule: { cron: "0 9 * * *", timezone: "EST" } }),
      "schedule.timezone",
    ],
    ["cron without zone", laterJob({ schedule: { cron: "0 9 * * *" } }), "schedule.timezone"],
    [
      "runAt without offset",
      laterJob({ schedule: { runAt: "2030-01-01T09:00:00" } }),
      "schedule.runAt",
    ],
    ["runAt not a date", laterJob({ schedule: { runAt: "tomorrow" } }), "schedule.runAt"],
    [
      "runAt year 0500",
      laterJob({ schedule: { runAt: "0500-01-01T00:00:00Z" } }),
      "schedule.runAt",
    ],
    [
      "runAt past 9999",
      laterJob({ schedule: { runAt: "9999-12-31T23:00:00-05:00" } }),
      "schedule.runAt",
    ],
    ["mixed kinds", laterJob({ schedule: { runAt: inMinutes(5), every: "PT1H" } }), "schedule"],
    // A whole runAt beside a cron without its zone: still two kinds, not an unknown field "cron".
    [
      "mixed kinds, one incomplete",
      laterJob({ schedule: { runAt: inMinutes(5), cron: "0 9 * * *" } }),
      "schedule",
    ],
    [
      "mixed kinds, the other incomplete",
      laterJob({ schedule: { every: "PT1H", cron: "0 9 * * *" } }),
      "schedule",
    ],
    ["every in months", laterJob({ schedule: { every: "P1M" } }), "schedule.every"],
    ["every too often", laterJob({ schedule: { every: "PT0.5S" } }), "schedule.every"],
    [
      "cron too long",
      laterJob({ schedule: { cron: "* ".repeat(200), timezone: "UTC" } }),
      "schedule.cron",
    ],
    ["maxAttempts 0", laterJob({ retry: { maxAttempts: 0 } }), "retry.maxAttempts"],
    ["maxAttempts 101", laterJob({ retry: { maxAttempts: 101 } }), "retry.maxAttempts"],
    ["maxAttempts 2.5", laterJob({ retry: { maxAttempts: 2.5 } }), "retry.maxAttempts"],
    [
      "negative delay",
      laterJob({ retry: { initialDelaySeconds: -1 } }),
      "retry.initialDelaySeconds",
    ],
    [
      "initial above max",
      laterJob({ retry: { initialDelaySeconds: 100, maxDelaySeconds: 50 } }),
      "retry.initialDelaySeconds",
    ],
    ["timeout 0", laterJob({ timeoutSeconds: 0 }), "timeoutSeconds"],
    ["timeout 901", laterJob({ timeoutSeconds: 901 }), "timeoutSeconds"],
    ["maxConcurrent without allow", laterJob({ maxConcurrent: 3 }), "maxConcurrent"],
    [
      "maxConcurrent 101",
      laterJob({ overlapPolicy: "allow", maxConcurrent: 101 }),
      "maxConcurrent",
    ],
    ["bad misfire", laterJob({ misfirePolicy: "sometimes" }), "misfirePolicy"],
    ["bad overlap", laterJob({ overlapPolicy: "queue" }), "overlapPolicy"],
    ["bad priority", laterJob({ priority: "urgent" }), "priority"],
    ["name not a string", laterJob({ name: 42 }), "name"],
    ["name too long", laterJob({ name: "n".repeat(201) }), "name"],
    [
      "ftp target",
      laterJob({ type: "http", target: { url: "ftp://example.com/x" } }),
      "target.url",
    ],
    ["relative target", laterJob({ type: "http", target: { url: "/hook" } }), "target.url"],
    [
      "reserved header",
      laterJob({
        type: "http",
        target: { url: "https://e.com", headers: { "Content-Type": "text/plain" } },
      }),
      "target.headers.Content-Type",
    ],
    [
      "header with CR LF",
      laterJob({ type: "http", target: { url: "https://e.com", headers: { "X-A": "a\r\nB: c" } } }),
      "target.headers.X-A",
    ],
    [
      "header name with a space",
      laterJob({ type: "http", target: { url: "https://e.com", headers: { "X A": "a" } } }),
      "target.headers.X A",
    ],
    [
      "51 headers",
      laterJob({
        type: "http",
        target: {
          url: "https://e.com",
          headers: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`X-H${i}`, "v"])),
        },
      }),
      "target.headers",
    ],
    [
      "header value over 4096",
      laterJob({
        type: "http",
        target: { url: "https://e.com", headers: { "X-A": "v".repeat(4097) } },
      }),
      "target.headers.X-A",
    ],
    [
      "header name over 256",
      laterJob({
        type: "http",
        target: { url: "https://e.com", headers: { ["X".repeat(257)]: "v" } },
      }),
      `target.headers.${"X".repeat(257)}`,
    ],
    [
      "url over 2048",
      laterJob({ type: "http", target: { url: `https://e.com/${"p".repeat(2040)}` } }),
      "target.url",
    ],
    ["idempotencyKey with spaces", laterJob({ idempotencyKey: "a b" }), "idempotencyKey"],
    ["body is an array", [laterJob()], "body"],
  ])("400 naming the field: %s", async (_name, body, field) => {
    const reply = await api.call("POST", "/jobs", { body });
    const error = expectError(reply, 400, { code: "validation_failed" });
    if (field !== "") expect(error.field).toBe(field);
    expect(error.message.length).toBeGreaterThan(field.length);
  });

  it("413 for a payload over 64 KiB and for a body over the limit", async () => {
    const over = await api.call("POST", "/jobs", {
      body: laterJob({ payload: "x".repeat(64 * 1024) }),
    });
    expectError(over, 413, { code: "payload_too_large", field: "payload" });
    const huge = await api.call("POST", "/jobs", {
      body: laterJob({ payload: "x".repeat(300 * 1024) }),
    });
    expectError(huge, 413, { code: "payload_too_large" });
  });

  it("413 for an oversized chunked body without Content-Length, read no further than the limit", async () => {
    const { port } = new URL(api.server.url);
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), "127.0.0.1", () => {
        socket.write(
          "POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer key-for-a\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        );
        const chunk = "a".repeat(16 * 1024);
        for (let i = 0; i < 8; i++) socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
        socket.write("0\r\n\r\n");
      });
      let data = "";
      socket.on("data", (d) => {
        data += d.toString();
      });
      socket.on("end", () => resolve(data));
      socket.on("error", (e) => (data ? resolve(data) : reject(e)));
    });
    expect(reply).toMatch(/^HTTP\/1\.1 413/);
    expect(reply).toContain('"code":"payload_too_large"');
  });

  it("415 for a body that is not JSON, 400 for malformed or empty JSON", async () => {
    for (const type of [
      "text/plain",
      "application/x-www-form-urlencoded",
      "application/jsonx",
      "json",
    ]) {
      const reply = await api.call("POST", "/jobs", {
        raw: JSON.stringify(laterJob()),
        headers: { "Content-Type": type },
      });
      expectError(reply, 415, { code: "unsupported_media_type" });
    }
    expectError(await api.call("POST", "/jobs", { raw: JSON.stringify(laterJob()) }), 415);
    const json = { "Content-Type": "application/json" };
    expectError(await api.call("POST", "/jobs", { raw: '{"type":', headers: json }), 400, {
      code: "malformed_json",
    });
    expectError(await api.call("POST", "/jobs", { raw: "", headers: json }), 400, {
      code: "malformed_json",
    });
    expectError(
      await api.call("POST", "/jobs", { raw: new Uint8Array([0x7b, 0xff, 0x7d]), headers: json }),
      400,
      {
        code: "malformed_json",
      },
    );
    const charset = await api.call("POST", "/jobs", {
      raw: JSON.stringify(laterJob()),
      headers: { "Content-Type": "application/json; charset=utf-8" },
    });
    expect(charset.status).toBe(201);
  });

  it("400 for deep nesting and for a __proto__ field outside the payload", async () => {
    const deep = laterJob({ payload: JSON.parse(`${"[".repeat(100)}${"]".repeat(100)}`) });
    expectError(await api.call("POST", "/jobs", { body: deep }), 400, {
      code: "validation_failed",
      field: "payload",
    });
    const json = { "Content-Type": "application/json" };
    const proto = `{"type":"noop","schedule":{"runAt":"${inMinutes(60)}"},"__proto__":{"admin":true}}`;
    expectError(await api.call("POST", "/jobs", { raw: proto, headers: json }), 400, {
      field: "__proto__",
    });
    const inHeaders = `{"type":"http","schedule":{"runAt":"${inMinutes(60)}"},"target":{"url":"https://e.com","headers":{"__proto__":"x"}}}`;
    expectError(await api.call("POST", "/jobs", { raw: inHeaders, headers: json }), 400, {
      field: "target.headers.__proto__",
    });
  });

  it("400 naming the field for text with an unpaired UTF-16 surrogate outside the payload, which is no Unicode text to store", async () => {
    const json = { "Content-Type": "application/json" };
    const lone = String.raw`a\ud800b`;
    const inName = `{"type":"noop","name":"${lone}","schedule":{"runAt":"${inMinutes(60)}"}}`;
    expectError(await api.call("POST", "/jobs", { raw: inName, headers: json }), 400, {
      code: "validation_failed",
      field: "name",
    });
    const inHeaderName = `{"type":"http","schedule":{"runAt":"${inMinutes(60)}"},"target":{"url":"https://e.com","headers":{"x-${String.raw`\udc00`}":"v"}}}`;
    expectError(await api.call("POST", "/jobs", { raw: inHeaderName, headers: json }), 400, {
      field: "target.headers",
    });
    // A payload is stored and delivered as JSON text, where the escape survives as written.
    const inPayload = `{"type":"noop","schedule":{"runAt":"${inMinutes(60)}"},"payload":{"note":"${lone}"}}`;
    expect((await api.call("POST", "/jobs", { raw: inPayload, headers: json })).status).toBe(201);
  });

  it("400 naming where it is for a number past ±1.8e308, which reads as infinity and JSON writes as null", async () => {
    const json = { "Content-Type": "application/json" };
    const before = await itemCounts();
    const inPayload = `{"type":"report","schedule":{"runAt":"${inMinutes(60)}"},"payload":{"amounts":[1,-1e400]}}`;
    expectError(await api.call("POST", "/jobs", { raw: inPayload, headers: json }), 400, {
      code: "validation_failed",
      field: "payload.amounts.1",
    });
    const inField = `{"type":"noop","schedule":{"every":"PT1H"},"maxRuns":1e400}`;
    expectError(await api.call("POST", "/jobs", { raw: inField, headers: json }), 400, {
      field: "maxRuns",
    });
    expect(await itemCounts()).toEqual(before);
    const made = await create({
      type: "report",
      schedule: { runAt: inMinutes(60) },
      payload: { amount: 1 },
    });
    const edit = await api.call("PATCH", `/jobs/${made.id}`, {
      raw: '{"payload":{"amount":1e400}}',
      headers: { ...json, "If-Match": `"${made.version}"` },
    });
    expectError(edit, 400, { code: "validation_failed", field: "payload.amount" });
    const after = job(await api.call("GET", `/jobs/${made.id}`));
    expect([after.version, after.payload]).toEqual([made.version, { amount: 1 }]);
    // The largest double stands, and a number that underflows reads as 0, as JSON.parse reads it.
    const held = `{"type":"report","schedule":{"runAt":"${inMinutes(60)}"},"payload":{"big":1.7976931348623157e308,"tiny":1e-400}}`;
    const reply = await api.call("POST", "/jobs", { raw: held, headers: json });
    expect(reply.status, reply.text).toBe(201);
    expect(job(reply).payload).toEqual({ big: Number.MAX_VALUE, tiny: 0 });
  });

  it("writes nothing for any request that fails", async () => {
    const before = await itemCounts();
    await api.call("POST", "/jobs", {
      body: laterJob({ schedule: { cron: "bad", timezone: "UTC" } }),
    });
    await api.call("POST", "/jobs", { body: laterJob({ payload: "x".repeat(70_000) }) });
    await api.call("POST", "/jobs", {
      body: laterJob({ maxConcurrent: 2 }),
      headers: { "Idempotency-Key": "k-fail" },
    });
    await api.call("POST", "/jobs", { key: null, body: laterJob() });
    expect(await itemCounts()).toEqual(before);
  });

  it("Idempotency-Key: same key and body → 200 with the same job; other body → 409", async () => {
    const body = laterJob({ name: "once", schedule: { every: "PT1H" } });
    const first = await api.call("POST", "/jobs", {
      body,
      headers: { "Idempotency-Key": "idem-1" },
    });
    expect(first.status).toBe(201);
    const again = await api.call("POST", "/jobs", {
      body,
      headers: { "Idempotency-Key": "idem-1" },
    });
    expect(again.status).toBe(200);
    expect(job(again).id).toBe(job(first).id);
    expect(again.headers.get("location")).toBe(`/jobs/${job(first).id}`);
    // The key may travel in the body instead; it is not part of what is compared.
    const inBody = await api.call("POST", "/jobs", { body: { ...body, idempotencyKey: "idem-1" } });
    expect(inBody.status).toBe(200);
    expect(job(inBody).id).toBe(job(first).id);
    const other = await api.call("POST", "/jobs", {
      body: { ...body, name: "twice" },
      headers: { "Idempotency-Key": "idem-1" },
    });
    expectError(other, 409, { code: "idempotency_conflict" });
    const mismatch = await api.call("POST", "/jobs", {
      body: { ...body, idempotencyKey: "idem-2" },
      headers: { "Idempotency-Key": "idem-1" },
    });
    expectError(mismatch, 400, { field: "idempotencyKey" });
    expectError(
      await api.call("POST", "/jobs", { body, headers: { "Idempotency-Key": "bad key" } }),
      400,
      {
        field: "Idempotency-Key",
      },
    );
    const named = (await api.fixture.jobs()).filter((j) => j.name === "once" || j.name === "twice");
    expect(named).toHaveLength(1);
  });
});

describe("GET /jobs and GET /jobs/{id}", () => {
  let tenantJobs: string[];
  beforeAll(async () => {
    const created = [];
    for (let i = 0; i < 5; i++) created.push(await create(laterJob({ name: `page-${i}` }), {}));
    tenantJobs = created.map((j) => j.id);
  });

  it("pages through the caller's jobs newest first with an opaque cursor", async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query: string = cursor ? `?limit=2&cursor=${encodeURIComponent(cursor)}` : "?limit=2";
      const reply = await api.call("GET", `/jobs${query}`);
      expect(reply.status).toBe(200);
      const page = JobPageSchema.parse(reply.body);
      expect(page.items.length).toBeLessThanOrEqual(2);
      seen.push(...page.items.map((j) => j.id));
      cursor = page.nextCursor;
      pages++;
    } while (cursor && pages < 100);
    expect(new Set(seen).size).toBe(seen.length);
    const positions = tenantJobs.map((id) => seen.indexOf(id));
    expect(positions.every((p) => p >= 0)).toBe(true);
    expect([...positions].sort((a, b) => b - a)).toEqual(positions);
  });

  it("filters by status, filling the page across filtered reads", async () => {
    const paused = tenantJobs[1] ?? "";
    expect((await api.call("POST", `/jobs/${paused}/pause`)).status).toBe(200);
    const reply = await api.call("GET", "/jobs?status=paused&limit=5");
    const page = JobPageSchema.parse(reply.body);
    expect(page.items.map((j) => j.id)).toContain(paused);
    expect(page.items.every((j) => j.status === "paused")).toBe(true);
  });

  it("a cursor is bound to its status filter: reused under another it is a 400 naming cursor", async () => {
    const pageOf = async (query: string) => {
      const reply = await api.call("GET", `/jobs?${query}`);
      expect(reply.status).toBe(200);
      return JobPageSchema.parse(reply.body);
    };
    const active = await pageOf("status=active&limit=1");
    const unfiltered = await pageOf("limit=1");
    const misuse = [
      `cursor=${active.nextCursor}`,
      `status=paused&cursor=${active.nextCursor}`,
      `status=active&cursor=${unfiltered.nextCursor}`,
    ];
    for (const query of misuse) {
      const reply = await api.call("GET", `/jobs?${query}`);
      expect(expectError(reply, 400, { field: "cursor" }).message).toMatch(/other filters/);
    }
    // Under its own filter the cursor goes on after its page.
    const next = await pageOf(`status=active&limit=1&cursor=${active.nextCursor}`);
    expect(next.items).toHaveLength(1);
    expect(next.items[0]?.status).toBe("active");
    expect(next.items[0]?.id).not.toBe(active.items[0]?.id);
    expect((await pageOf(`limit=1&cursor=${unfiltered.nextCursor}`)).items).toHaveLength(1);
  });

  it("a cursor reshaped, from another listing with the same filter text, or another tenant's is a 400 naming cursor", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const made = await create(laterJob());
      ids.push(made.id);
      await api.call("POST", `/jobs/${made.id}/trigger`);
      await api.call("POST", `/jobs/${made.id}/trigger`);
      expect((await api.call("POST", `/jobs/${made.id}/cancel`)).status).toBe(200);
    }
    const cursorOf = async (path: string) => {
      const reply = await api.call("GET", path);
      expect(reply.status, reply.text).toBe(200);
      const next = (reply.body as { nextCursor: string | null }).nextCursor;
      expect(next).not.toBeNull();
      return next ?? "";
    };
    const decoded = (cursor: string) =>
      JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as Record<string, string>;
    const encoded = (key: Record<string, string>) =>
      Buffer.from(JSON.stringify(key)).toString("base64url");
    const cancelledJobs = await cursorOf("/jobs?status=cancelled&limit=1");
    const cancelledRuns = await cursorOf(`/jobs/${ids[0]}/runs?status=cancelled&limit=1`);
    const plain = await cursorOf("/jobs?limit=1");
    // Both listings bind the text "status=CANCELLED": the key's shape still tells them apart.
    expect(decoded(cancelledJobs).filter).toBe(decoded(cancelledRuns).filter);
    const { filter: _filter, ...unbound } = decoded(cancelledJobs);
    const misuse: [string, string, RegExp][] = [
      [`/jobs?status=cancelled&cursor=${cancelledRuns}`, "cursor", /this listing/],
      [`/jobs/${ids[0]}/runs?status=cancelled&cursor=${cancelledJobs}`, "cursor", /this listing/],
      // As a filtered page's cursor was before it carried its filter.
      [`/jobs?status=cancelled&cursor=${encoded(unbound)}`, "cursor", /other filters/],
      [
        `/jobs?cursor=${encoded({ ...decoded(plain), filter: "status=ACTIVE" })}`,
        "cursor",
        /other filters/,
      ],
      [
        `/jobs?status=cancelled&cursor=${encoded({ ...decoded(cancelledJobs), x: "y" })}`,
        "cursor",
        /this listing/,
      ],
      [`/jobs?status=CANCELLED&cursor=${cancelledJobs}`, "status", /expected one of/],
      [
        `/jobs?status=cancelled&status=active&cursor=${cancelledJobs}`,
        "status",
        /given more than once/,
      ],
    ];
    for (const [path, field, message] of misuse) {
      const reply = await api.call("GET", path);
      expect(expectError(reply, 400, { field }).message, path).toMatch(message);
    }
    const asB = await api.call("GET", `/jobs?status=cancelled&cursor=${cancelledJobs}`, {
      key: KEY_B,
    });
    expect(expectError(asB, 400, { field: "cursor" }).message).toMatch(/this listing/);
  });

  it.each([
    ["?status=PAUSED", "status"],
    ["?status=sleeping", "status"],
    ["?limit=0", "limit"],
    ["?limit=101", "limit"],
    ["?limit=ten", "limit"],
    ["?cursor=%%%", "cursor"],
    [`?cursor=${Buffer.from('{"pk":"JOB#x"}').toString("base64url")}`, "cursor"],
    [`?cursor=${Buffer.from("[1]").toString("base64url")}`, "cursor"],
    // The caller's own partition, with a sort key of 600 characters but 1,200 bytes: past what
    // DynamoDB takes as a key (1,024 bytes), so it must be refused here, not there (a 500).
    [
      `?cursor=${Buffer.from(
        JSON.stringify({
          tenantPk: "TENANT#tenant-a",
          tenantSk: "é".repeat(600),
          pk: "x",
          sk: "x",
        }),
      ).toString("base64url")}`,
      "cursor",
    ],
    // The caller's own partition, its table key naming another job than its index key, or no job.
    ...[
      { pk: "JOB#01M8XKJWK02XZ7528W23E0KWCF", sk: "JOB" },
      { pk: "JOB#01M8XKJWK02XZ7528W23E0KWCE", sk: "RUN#x" },
    ].map((tableKey): [string, string] => [
      `?cursor=${Buffer.from(
        JSON.stringify({
          tenantPk: "TENANT#tenant-a",
          tenantSk: "01M8XKJWK02XZ7528W23E0KWCE",
          ...tableKey,
        }),
      ).toString("base64url")}`,
      "cursor",
    ]),
    ["?colour=red", "colour"],
  ])("400 for GET /jobs%s", async (query, field) => {
    expectError(await api.call("GET", `/jobs${query}`), 400, { field });
  });

  it("a dead-letters cursor whose table key names another run than its index key is a 400 naming cursor", async () => {
    const runId = "01M8XKJWK02XZ7528W23E0KWCE-20261203T092959000-1";
    const cursor = (pk: string, sk: string) =>
      Buffer.from(
        JSON.stringify({
          deadPk: "DEAD#tenant-a",
          deadSk: `2026-12-03T09:30:00.000Z#${runId}`,
          pk,
          sk,
        }),
      ).toString("base64url");
    const mismatched = await api.call(
      "GET",
      `/dead-letters?cursor=${cursor("JOB#01M8XKJWK02XZ7528W23E0KWCF", "RUN#20261203T092959000#1")}`,
    );
    expectError(mismatched, 400, { field: "cursor" });
    // A cursor the listing handed out still pages on.
    await deadRunVia(api);
    const first = RunPageSchema.parse((await api.call("GET", "/dead-letters?limit=1")).body);
    expect(first.nextCursor).not.toBeNull();
    const next = await api.call("GET", `/dead-letters?limit=1&cursor=${first.nextCursor}`);
    expect(next.status, next.text).toBe(200);
  });

  it("GET /jobs/{id} returns the job with its ETag; 404 for unknown and malformed ids", async () => {
    const id = tenantJobs[0] ?? "";
    const reply = await api.call("GET", `/jobs/${id}`);
    expect(reply.status).toBe(200);
    expect(job(reply).id).toBe(id);
    expect(reply.headers.get("etag")).toBe('"1"');
    expectError(await api.call("GET", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ"), 404, {
      code: "not_found",
    });
    expectError(await api.call("GET", `/jobs/${"x".repeat(5000)}`), 404);
    expectError(await api.call("GET", "/jobs/%E2%98%83"), 404);
  });

  it("no answer holding tenant data may be stored by a cache: a job's target headers are its receiver's credentials", async () => {
    const secretJob = await create(
      laterJob({
        type: "http",
        target: {
          url: "https://example.com/hook",
          headers: { Authorization: "Bearer rcv-s3cret" },
        },
      }),
      {},
    );
    const answers = [
      await api.call("GET", `/jobs/${secretJob.id}`),
      await api.call("GET", "/jobs?limit=100"),
      await api.call("GET", `/jobs/${secretJob.id}/runs`),
      await api.call("GET", `/jobs/${secretJob.id}/preview`),
      await api.call("GET", "/dead-letters"),
      await api.call("GET", "/quotas"),
      await api.call("PATCH", `/jobs/${secretJob.id}`, {
        body: { name: "renamed" },
        headers: { "If-Match": '"1"' },
      }),
      await api.call("POST", `/jobs/${secretJob.id}/pause`),
      // An error answer too: it may name what the request held.
      await api.call("GET", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ"),
    ];
    expect(answers[0]?.text).toContain("rcv-s3cret");
    expect(answers.map((a) => [a.status, a.headers.get("cache-control")])).toEqual(
      answers.map((a) => [a.status, "no-store"]),
    );
    // The public documents stay cacheable as they were.
    expect(
      (await api.call("GET", "/openapi.json", { key: null })).headers.get("cache-control"),
    ).toBeNull();
  });

  it("GET /jobs/{id} carries lastRun once a run has finished", async () => {
    const created = await create({ type: "noop", schedule: { runAt: new Date().toISOString() } });
    await runOnce(api, created.id);
    const reply = await api.call("GET", `/jobs/${created.id}`);
    const after = job(reply);
    expect(after.lastRun).toMatchObject({
      status: "succeeded",
      attempt: 1,
      scheduledFor: "runAt" in created.schedule ? created.schedule.runAt : "",
    });
    expect(after.status).toBe("completed");
  });

  it("GET /jobs/{id} and GET /jobs carry a recurring job's lastRun as soon as its run has finished", async () => {
    const created = await create(
      laterJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" }, name: "recurring lastRun" }),
    );
    const triggered = await api.call("POST", `/jobs/${created.id}/trigger`);
    expect(triggered.status).toBe(202);
    await runOnce(api, created.id);
    const expected = {
      runId: (triggered.body as { runId: string }).runId,
      status: "succeeded",
      attempt: 1,
    };
    expect(job(await api.call("GET", `/jobs/${created.id}`)).lastRun).toMatchObject(expected);
    const listed = await api.call("GET", "/jobs?limit=100");
    const items = (listed.body as { items: { id: string; lastRun: unknown }[] }).items;
    expect(items.find((item) => item.id === created.id)?.lastRun).toMatchObject(expected);
  });
});

describe("a schedule holding a field of a kind it is not", () => {
  // A user writing a runAt in UTC adds "timezone": "UTC"; "unknown field" did not say that only
  // cron takes one. Every route that takes a schedule answers the same.
  const misplaced = [
    [
      { runAt: inMinutes(60), timezone: "UTC" },
      "schedule.timezone",
      /^schedule\.timezone: only a cron schedule takes a timezone .*runAt.*offset/,
    ],
    [
      { every: "PT1H", timezone: "Europe/Berlin" },
      "schedule.timezone",
      /^schedule\.timezone: only a cron schedule takes a timezone .*elapsed time/,
    ],
    [
      { cron: "0 9 * * *", timezone: "UTC", startAt: inMinutes(60) },
      "schedule.startAt",
      /^schedule\.startAt: only an every schedule takes a startAt /,
    ],
  ] as const;
  const answers = async (schedule: Record<string, unknown>) => {
    const target = await create(laterJob());
    const batch = await api.call("POST", "/jobs:batch", {
      body: { jobs: [laterJob({ schedule })] },
    });
    expect(batch.status, batch.text).toBe(200);
    const [result] = (batch.body as { results: { error?: { field?: string; message: string } }[] })
      .results;
    return [
      expectError(await api.call("POST", "/jobs", { body: laterJob({ schedule }) }), 400),
      result?.error,
      expectError(
        await api.call("PATCH", `/jobs/${target.id}`, {
          body: { schedule },
          headers: { "If-Match": '"1"' },
        }),
        400,
      ),
      expectError(await api.call("POST", "/schedules/preview", { body: { schedule } }), 400),
    ];
  };

  it.each(misplaced)(
    "%j: names the field and the kind that takes it",
    async (schedule, field, message) => {
      const before = await itemCounts();
      const refusals = await answers(schedule);
      expect(refusals.map((error) => error?.field)).toEqual([field, field, field, field]);
      for (const error of refusals) expect(error?.message).toMatch(message);
      // The PATCH's target job (one per case) is all that was written.
      expect(await itemCounts()).toMatchObject({ jobs: before.jobs + 1 });
    },
  );
});

describe("PATCH /jobs/{id}", () => {
  it("edits at the current version; 428 without If-Match, 412 when stale, 400 when unreadable", async () => {
    const created = await create(laterJob({ schedule: { cron: "0 9 * * *", timezone: "UTC" } }));
    const path = `/jobs/${created.id}`;
    const body = {
      schedule: { cron: "30 10 * * *", timezone: "Asia/Tokyo" },
      retry: { maxAttempts: 2 },
    };
    expectError(await api.call("PATCH", path, { body }), 428, { code: "precondition_required" });
    const stale = await api.call("PATCH", path, { body, headers: { "If-Match": '"7"' } });
    expectError(stale, 412, { code: "version_mismatch" });
    expect(stale.headers.get("etag")).toBe('"1"');
    expectError(await api.call("PATCH", path, { body, headers: { "If-Match": "latest" } }), 400, {
      field: "If-Match",
    });
    const edited = await api.call("PATCH", path, { body, headers: { "If-Match": '"1"' } });
    expect(edited.status, edited.text).toBe(200);
    expect(edited.headers.get("etag")).toBe('"2"');
    expect(job(edited)).toMatchObject({
      version: 2,
      schedule: { cron: "30 10 * * *", timezone: "Asia/Tokyo" },
      policies: { retry: { maxAttempts: 2, initialDelaySeconds: 30, maxDelaySeconds: 3600 } },
    });
    expect(job(edited).nextRunAt).toMatch(/T01:30:00\.000Z$/);
    // The same edit sent again (its answer lost) answers the job it wrote; another body is stale.
    const repeated = await api.call("PATCH", path, { body, headers: { "If-Match": '"1"' } });
    expect(repeated.status, repeated.text).toBe(200);
    expect(repeated.headers.get("etag")).toBe('"2"');
    expect(job(repeated)).toEqual(job(edited));
    expectError(
      await api.call("PATCH", path, { body: { name: "other" }, headers: { "If-Match": '"1"' } }),
      412,
    );
  });

  it("merges retry into the stored policy: a max below the stored initial is refused unless the edit lowers it too", async () => {
    const created = await create(laterJob());
    const path = `/jobs/${created.id}`;
    const lowered = await api.call("PATCH", path, {
      body: { retry: { maxDelaySeconds: 10 } },
      headers: { "If-Match": '"1"' },
    });
    const error = expectError(lowered, 400, { code: "validation_failed" });
    expect(JSON.stringify(error)).toMatch(/retry\.(initialDelaySeconds|maxDelaySeconds)/);
    expect(job(await api.call("GET", path)).version).toBe(1);
    const both = await api.call("PATCH", path, {
      body: { retry: { initialDelaySeconds: 5, maxDelaySeconds: 10 } },
      headers: { "If-Match": '"1"' },
    });
    expect(both.status, both.text).toBe(200);
    expect(job(both).policies).toMatchObject({
      retry: { maxAttempts: 5, initialDelaySeconds: 5, maxDelaySeconds: 10 },
    });
  });

  it("accepts W/ and bare versions, stores inFlight and the other policies", async () => {
    const created = await create(laterJob());
    const path = `/jobs/${created.id}`;
    const first = await api.call("PATCH", path, {
      body: {
        inFlight: "complete",
        overlapPolicy: "allow",
        maxConcurrent: 3,
        misfirePolicy: "fire_all",
      },
      headers: { "If-Match": 'W/"1"' },
    });
    expect(job(first).policies).toMatchObject({
      inFlight: "complete",
      overlapPolicy: "allow",
      maxConcurrent: 3,
      misfirePolicy: "fire_all",
    });
    const second = await api.call("PATCH", path, {
      body: {
        name: "renamed",
        priority: "low",
        timeoutSeconds: 30,
        payload: { v: 2 },
        overlapPolicy: "skip",
      },
      headers: { "If-Match": "2" },
    });
    expect(job(second)).toMatchObject({
      name: "renamed",
      priority: "low",
      timeoutSeconds: 30,
      payload: { v: 2 },
      version: 3,
      policies: { overlapPolicy: "skip", maxConcurrent: 1, inFlight: "complete" },
    });
    const stored = (await api.fixture.jobs()).find((j) => j.jobId === created.id);
    expect(stored?.policies.inFlight).toBe("complete");
  });

  it("edits an http job's target and refuses a target on other types", async () => {
    const http = await create(laterJob({ type: "http", target: { url: "https://a.example/x" } }));
    const edited = await api.call("PATCH", `/jobs/${http.id}`, {
      body: { target: { url: "https://b.example/y", timeoutSeconds: 5 } },
      headers: { "If-Match": '"1"' },
    });
    expect(job(edited).target).toEqual({ url: "https://b.example/y", timeoutSeconds: 5 });
    const noop = await create(laterJob());
    const refused = await api.call("PATCH", `/jobs/${noop.id}`, {
      body: { target: { url: "https://b.example/y" } },
      headers: { "If-Match": '"1"' },
    });
    expectError(refused, 400, { field: "target" });
  });

  it.each([
    ["empty body", {}, undefined],
    ["type cannot change", { type: "http" }, "type"],
    ["unknown field", { colour: "red" }, "colour"],
    ["bad cron", { schedule: { cron: "* * *", timezone: "UTC" } }, "schedule.cron"],
    ["maxConcurrent without allow", { maxConcurrent: 2 }, "maxConcurrent"],
    ["bad inFlight", { inFlight: "abort" }, "inFlight"],
    [
      "delays conflict with the stored ones",
      { retry: { maxDelaySeconds: 5 } },
      "retry.maxDelaySeconds",
    ],
  ])("400 for %s, and nothing changes", async (_name, body, field) => {
    const created = await create(laterJob());
    const reply = await api.call("PATCH", `/jobs/${created.id}`, {
      body,
      headers: { "If-Match": '"1"' },
    });
    const error = expectError(reply, 400);
    if (field !== undefined) expect(error.field).toBe(field);
    expect(job(await api.call("GET", `/jobs/${created.id}`)).version).toBe(1);
  });

  it("413 for a payload over the limit, 415 without JSON, 404 for unknown jobs, 409 when cancelled", async () => {
    const created = await create(laterJob());
    const path = `/jobs/${created.id}`;
    const headers = { "If-Match": '"1"' };
    expectError(
      await api.call("PATCH", path, { body: { payload: "y".repeat(66_000) }, headers }),
      413,
      {
        field: "payload",
      },
    );
    expectError(
      await api.call("PATCH", path, {
        raw: "name=x",
        headers: { ...headers, "Content-Type": "text/plain" },
      }),
      415,
    );
    expectError(
      await api.call("PATCH", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ", { body: { name: "x" }, headers }),
      404,
    );
    await api.call("POST", `${path}/cancel`);
    const cancelled = await api.call("PATCH", path, { body: { name: "x" }, headers });
    const error = expectError(cancelled, 409, { code: "illegal_transition" });
    expect(error.currentStatus).toBe("cancelled");
  });
});

describe("pause, resume, cancel, trigger", () => {
  it("moves through the lifecycle; repeats are harmless; illegal moves are 409 with the status", async () => {
    const created = await create(laterJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" } }));
    const path = `/jobs/${created.id}`;
    const paused = await api.call("POST", `${path}/pause`);
    expect(job(paused).status).toBe("paused");
    expect(paused.headers.get("etag")).toBe('"1"');
    expect(job(await api.call("POST", `${path}/pause`)).status).toBe("paused");
    const triggerPaused = expectError(await api.call("POST", `${path}/trigger`), 409, {
      code: "illegal_transition",
    });
    expect(triggerPaused.currentStatus).toBe("paused");
    const resumed = job(await api.call("POST", `${path}/resume`));
    expect(resumed.status).toBe("active");
    expect(resumed.nextRunAt).toBe(created.nextRunAt);
    expect(job(await api.call("POST", `${path}/resume`)).status).toBe("active");
    const cancelled = job(await api.call("POST", `${path}/cancel`));
    expect(cancelled).toMatchObject({ status: "cancelled", nextRunAt: null });
    expect(job(await api.call("POST", `${path}/cancel`)).status).toBe("cancelled");
    for (const action of ["resume", "pause", "trigger"]) {
      const error = expectError(await api.call("POST", `${path}/${action}`), 409, {
        code: "illegal_transition",
      });
      expect(error.currentStatus).toBe("cancelled");
    }
    expect(await api.fixture.dueEntries()).not.toContainEqual(
      expect.objectContaining({ jobId: created.id }),
    );
  });

  it("404 for unknown or malformed job ids on every action", async () => {
    for (const action of ["pause", "resume", "cancel", "trigger"]) {
      expectError(await api.call("POST", `/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ/${action}`), 404);
      expectError(await api.call("POST", `/jobs/bad%20id/${action}`), 404);
    }
  });

  it("trigger queues one extra run now (202, Location), listed and readable under runs", async () => {
    const created = await create(laterJob());
    const reply = await api.call("POST", `/jobs/${created.id}/trigger`);
    expect(reply.status).toBe(202);
    const run = RunSchema.parse(reply.body);
    expect(run).toMatchObject({ jobId: created.id, status: "queued", attempt: 1, jobVersion: 1 });
    expect(reply.headers.get("location")).toBe(`/jobs/${created.id}/runs/${run.runId}`);
    await runOnce(api, created.id);
    const read = RunSchema.parse(
      (await api.call("GET", `/jobs/${created.id}/runs/${run.runId}`)).body,
    );
    expect(read).toMatchObject({ runId: run.runId, status: "succeeded", workerId: "w", fence: 1 });
    expect(read.durationMs).toBeGreaterThanOrEqual(0);
  });
});

describe("DELETE /jobs/{id}", () => {
  it("cancels and removes the job (204): not read, listed or changed after; its runs stay readable; a repeat is 404", async () => {
    const created = await create(
      laterJob({ schedule: { every: "PT1H", startAt: inMinutes(120) } }),
    );
    const path = `/jobs/${created.id}`;
    const triggered = RunSchema.parse((await api.call("POST", `${path}/trigger`)).body);

    const deleted = await api.call("DELETE", path);
    expect(deleted.status, deleted.text).toBe(204);
    expect(deleted.text).toBe("");

    expectError(await api.call("GET", path), 404, { code: "not_found" });
    const listed = JobPageSchema.parse((await api.call("GET", "/jobs?limit=100")).body);
    expect(listed.items.map((j) => j.id)).not.toContain(created.id);
    for (const action of ["pause", "resume", "cancel", "trigger"]) {
      expectError(await api.call("POST", `${path}/${action}`), 404);
    }
    expectError(
      await api.call("PATCH", path, { body: { name: "x" }, headers: { "If-Match": '"1"' } }),
      404,
    );
    expectError(await api.call("GET", `${path}/preview`), 404);
    // The history stays until it expires: the triggered run, cancelled by the delete.
    const runs = RunPageSchema.parse((await api.call("GET", `${path}/runs`)).body);
    expect(runs.items.map((r) => [r.runId, r.status])).toEqual([[triggered.runId, "cancelled"]]);
    const run = RunSchema.parse((await api.call("GET", `${path}/runs/${triggered.runId}`)).body);
    expect(run).toMatchObject({ status: "cancelled", reason: "job cancelled" });
    expect(await api.fixture.dueEntries()).not.toContainEqual(
      expect.objectContaining({ jobId: created.id }),
    );

    expectError(await api.call("DELETE", path), 404, { code: "not_found" });
  });

  it("a create repeating the idempotency key of a deleted job is a 409 naming why", async () => {
    const body = laterJob();
    const headers = { "Idempotency-Key": "deleted-later" };
    const created = await create(body, headers);
    expect((await api.call("DELETE", `/jobs/${created.id}`)).status).toBe(204);
    const repeat = expectError(await api.call("POST", "/jobs", { body, headers }), 409, {
      code: "idempotency_conflict",
    });
    expect(repeat.message).toContain(`created job ${created.id}, which was deleted`);
  });

  it("deletes a cancelled and a completed job alike; 404 for unknown and malformed ids", async () => {
    const cancelled = await create(laterJob());
    await api.call("POST", `/jobs/${cancelled.id}/cancel`);
    expect((await api.call("DELETE", `/jobs/${cancelled.id}`)).status).toBe(204);
    const done = await create({ type: "noop", schedule: { runAt: new Date().toISOString() } });
    await runOnce(api, done.id);
    expect(job(await api.call("GET", `/jobs/${done.id}`)).status).toBe("completed");
    expect((await api.call("DELETE", `/jobs/${done.id}`)).status).toBe(204);
    expectError(await api.call("GET", `/jobs/${done.id}`), 404);
    expectError(await api.call("DELETE", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ"), 404);
    expectError(await api.call("DELETE", "/jobs/bad%20id"), 404);
    expectError(await api.call("DELETE", `/jobs/${done.id}`, { key: null }), 401);
  });

  it("a dead letter of a deleted job stays listed and cannot be replayed: 409 naming why", async () => {
    const { jobId } = await deadRunVia(api);
    const dead = RunPageSchema.parse((await api.call("GET", "/dead-letters")).body).items.find(
      (r) => r.jobId === jobId,
    );
    expect((await api.call("DELETE", `/jobs/${jobId}`)).status).toBe(204);
    const listed = RunPageSchema.parse((await api.call("GET", "/dead-letters")).body);
    expect(listed.items.map((r) => r.runId)).toContain(dead?.runId);
    const refused = expectError(
      await api.call("POST", `/dead-letters/${dead?.runId}/replay`),
      409,
      { code: "not_replayable" },
    );
    expect(refused.message).toMatch(/its job was deleted/);
  });
});

describe("runs", () => {
  let jobId: string;
  let runIds: string[];
  beforeAll(async () => {
    const created = await create(laterJob());
    jobId = created.id;
    runIds = [];
    for (let i = 0; i < 3; i++) {
      const reply = await api.call("POST", `/jobs/${jobId}/trigger`);
      runIds.push(RunSchema.parse(reply.body).runId);
      await sleep(5);
    }
  });

  it("lists a job's runs newest first, with a cursor", async () => {
    const first = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs?limit=2`)).body);
    expect(first.items.map((r) => r.runId)).toEqual([runIds[2], runIds[1]]);
    expect(first.nextCursor).not.toBeNull();
    const second = RunPageSchema.parse(
      (await api.call("GET", `/jobs/${jobId}/runs?limit=2&cursor=${first.nextCursor}`)).body,
    );
    expect(second.items.map((r) => r.runId)).toEqual([runIds[0]]);
    expect(second.nextCursor).toBeNull();
  });

  it("400 for another listing's cursor and bad limits; 404 for unknown jobs and runs", async () => {
    const jobsCursor = JobPageSchema.parse(
      (await api.call("GET", "/jobs?limit=1")).body,
    ).nextCursor;
    expectError(await api.call("GET", `/jobs/${jobId}/runs?cursor=${jobsCursor}`), 400, {
      field: "cursor",
    });
    const foreignRuns = Buffer.from(JSON.stringify({ pk: "JOB#other", sk: "RUN#x" })).toString(
      "base64url",
    );
    expectError(await api.call("GET", `/jobs/${jobId}/runs?cursor=${foreignRuns}`), 400, {
      field: "cursor",
    });
    expectError(await api.call("GET", `/jobs/${jobId}/runs?limit=-1`), 400, { field: "limit" });
    expectError(await api.call("GET", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ/runs"), 404);
    expectError(await api.call("GET", `/jobs/${jobId}/runs/not-a-run`), 404);
    expectError(await api.call("GET", `/jobs/${jobId}/runs/${jobId}-20300101T000000000-1`), 404);
    const other = await create(laterJob());
    expectError(await api.call("GET", `/jobs/${other.id}/runs/${runIds[0]}`), 404);
  });
});

describe("previews", () => {
  it("POST /schedules/preview: the next N times in UTC and in the cron's zone, across DST", async () => {
    const reply = await api.call("POST", "/schedules/preview", {
      body: { schedule: { cron: "30 2 * * *", timezone: "Europe/Berlin" }, count: 100 },
    });
    const preview = PreviewSchema.parse(reply.body);
    expect(preview.timezone).toBe("Europe/Berlin");
    expect(preview.occurrences).toHaveLength(100);
    for (const { utc, local } of preview.occurrences) {
      expect(Date.parse(local)).toBe(Date.parse(utc));
      expect(local).toMatch(/T0[23]:30:00\.000\+0[12]:00$/);
    }
    const first = await api.call("POST", "/schedules/preview", {
      body: { schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" } },
    });
    expect(PreviewSchema.parse(first.body).occurrences).toHaveLength(5);
  });

  it("runAt previews in the offset it was written with; every without startAt starts now", async () => {
    const at = await api.call("POST", "/schedules/preview", {
      body: { schedule: { runAt: "2030-06-01T09:00:00-05:00" } },
    });
    expect(PreviewSchema.parse(at.body)).toMatchObject({
      schedule: { runAt: "2030-06-01T14:00:00.000Z" },
      timezone: "-05:00",
      occurrences: [{ utc: "2030-06-01T14:00:00.000Z", local: "2030-06-01T09:00:00.000-05:00" }],
    });
    const past = PreviewSchema.parse(
      (
        await api.call("POST", "/schedules/preview", {
          body: { schedule: { runAt: "2001-01-01T00:00:00Z" } },
        })
      ).body,
    );
    expect(past.occurrences).toEqual([]);
    const every = PreviewSchema.parse(
      (
        await api.call("POST", "/schedules/preview", {
          body: { schedule: { every: "PT1M" }, count: 3 },
        })
      ).body,
    );
    expect(every.timezone).toBe("UTC");
    const [a, b, c] = every.occurrences.map((o) => Date.parse(o.utc));
    expect([(b ?? 0) - (a ?? 0), (c ?? 0) - (b ?? 0)]).toEqual([60_000, 60_000]);
    expect(Math.abs((a ?? 0) - Date.now())).toBeLessThan(5_000);
  });

  it("answers the validation errors as a 400, every issue listed", async () => {
    const reply = await api.call("POST", "/schedules/preview", {
      body: { schedule: { cron: "0 25 * * *", timezone: "Berlin" } },
    });
    const error = expectError(reply, 400, { code: "validation_failed", field: "schedule.cron" });
    expect(error.issues?.map((i) => i.field)).toEqual(["schedule.cron", "schedule.timezone"]);
    for (const [body, field] of [
      [{ schedule: { cron: "* * * * * *", timezone: "UTC" }, count: 0 }, "count"],
      [{ schedule: { cron: "* * * * *", timezone: "UTC" }, count: 101 }, "count"],
      [{ schedule: { cron: "* * * * *", timezone: "UTC" }, extra: 1 }, "extra"],
      [{ count: 3 }, "schedule"],
      [{ schedule: "0 9 * * *" }, "schedule"],
    ] as const) {
      expectError(await api.call("POST", "/schedules/preview", { body }), 400, { field });
    }
    expectError(
      await api.call("POST", "/schedules/preview", {
        raw: "x",
        headers: { "Content-Type": "text/plain" },
      }),
      415,
    );
  });

  it("GET /jobs/{id}/preview shows the stored job's next occurrences", async () => {
    const created = await create({
      type: "noop",
      schedule: { cron: "0 12 * * *", timezone: "America/New_York" },
    });
    const preview = PreviewSchema.parse(
      (await api.call("GET", `/jobs/${created.id}/preview?count=3`)).body,
    );
    expect(preview.timezone).toBe("America/New_York");
    expect(preview.occurrences).toHaveLength(3);
    // nextRunAt is the pending occurrence: within minutes of noon in New York the create has
    // already queued today's, and nextRunAt is tomorrow's, the preview's second.
    const first = Date.parse(preview.occurrences[0]?.utc ?? "");
    expect(first).toBeGreaterThan(Date.now() - 60_000);
    expect(first).toBeLessThanOrEqual(Date.now() + 86_400_000);
    expect(preview.occurrences.slice(0, 2).map((o) => o.utc)).toContain(created.nextRunAt);
    expect(preview.occurrences.every((o) => /T12:00:00\.000-0[45]:00$/.test(o.local))).toBe(true);
    const fallback = PreviewSchema.parse(
      (await api.call("GET", `/jobs/${created.id}/preview`)).body,
    );
    expect(fallback.occurrences).toHaveLength(5);
    expectError(await api.call("GET", `/jobs/${created.id}/preview?count=0`), 400, {
      field: "count",
    });
    expectError(await api.call("GET", `/jobs/${created.id}/preview?count=1000`), 400, {
      field: "count",
    });
    expectError(await api.call("GET", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ/preview"), 404);
  });
});

describe("dead letters", () => {
  it("lists dead runs, replays one as its next attempt (202), and refuses a second replay", async () => {
    const { jobId } = await deadRunVia(api);
    const listed = RunPageSchema.parse((await api.call("GET", "/dead-letters")).body);
    const dead = listed.items.find((r) => r.jobId === jobId);
    expect(dead).toMatchObject({ status: "dead", attempt: 1 });
    expect(dead?.reason).toMatch(/non-retryable/);
    const runId = dead?.runId ?? "";

    const replayed = await api.call("POST", `/dead-letters/${runId}/replay`);
    expect(replayed.status, replayed.text).toBe(202);
    const run = RunSchema.parse(replayed.body);
    expect(run).toMatchObject({
      jobId,
      status: "queued",
      attempt: 2,
      scheduledFor: dead?.scheduledFor,
    });
    expect(replayed.headers.get("location")).toBe(`/jobs/${jobId}/runs/${run.runId}`);

    expectError(await api.call("POST", `/dead-letters/${runId}/replay`), 409, {
      code: "not_replayable",
    });
    const after = RunPageSchema.parse((await api.call("GET", "/dead-letters")).body);
    expect(after.items.map((r) => r.runId)).not.toContain(runId);
    const original = RunSchema.parse((await api.call("GET", `/jobs/${jobId}/runs/${runId}`)).body);
    expect(original.replayedBy).toBe(run.runId);
  });

  it("Idempotency-Key on a replay: a repeat answers the run the first queued (200), and queues nothing", async () => {
    // A client that sends the replay again after a lost answer (a timeout, a 503 from a proxy)
    // must get the replay it made, not a 409 that reads as a failure.
    const { jobId } = await deadRunVia(api);
    const runsOfJob = async () =>
      RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`)).body).items;
    const runId = (await runsOfJob()).find((r) => r.status === "dead")?.runId ?? "";
    const replay = (key?: string) =>
      api.call("POST", `/dead-letters/${runId}/replay`, {
        ...(key === undefined ? {} : { headers: { "Idempotency-Key": key } }),
      });

    const first = await replay("replay-1");
    expect(first.status, first.text).toBe(202);
    const run = RunSchema.parse(first.body);
    const again = await replay("replay-1");
    expect(again.status, again.text).toBe(200);
    expect(RunSchema.parse(again.body).runId).toBe(run.runId);
    expect(again.headers.get("location")).toBe(`/jobs/${jobId}/runs/${run.runId}`);
    expect((await runsOfJob()).filter((r) => r.attempt === 2)).toHaveLength(1);

    // Another key, or none, is another request: the dead run is replayed already.
    for (const key of ["replay-2", undefined])
      expectError(await replay(key), 409, { code: "not_replayable" });
    expectError(await replay("not visible ascii é"), 400, { field: "Idempotency-Key" });
  });

  it("concurrent replays with one Idempotency-Key queue one run, and each answer names it", async () => {
    const { jobId } = await deadRunVia(api);
    const listed = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`)).body);
    const runId = listed.items.find((r) => r.status === "dead")?.runId ?? "";
    const answers = await Promise.all(
      Array.from({ length: 4 }, () =>
        api.call("POST", `/dead-letters/${runId}/replay`, {
          headers: { "Idempotency-Key": "replay-together" },
        }),
      ),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 202]);
    expect(new Set(answers.map((a) => RunSchema.parse(a.body).runId)).size).toBe(1);
    const after = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`)).body);
    expect(after.items.filter((r) => r.attempt === 2)).toHaveLength(1);
  });

  it("concurrent replays without a key, or each with its own, queue one run: one 202, the others 409", async () => {
    const { jobId } = await deadRunVia(api);
    const listed = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`)).body);
    const runId = listed.items.find((r) => r.status === "dead")?.runId ?? "";
    const answers = await Promise.all([
      ...Array.from({ length: 4 }, () => api.call("POST", `/dead-letters/${runId}/replay`)),
      ...Array.from({ length: 4 }, (_, i) =>
        api.call("POST", `/dead-letters/${runId}/replay`, {
          headers: { "Idempotency-Key": `replay-own-${i}` },
        }),
      ),
    ]);
    expect(answers.map((a) => a.status).sort()).toEqual([202, 409, 409, 409, 409, 409, 409, 409]);
    for (const refused of answers.filter((a) => a.status === 409))
      expectError(refused, 409, { code: "not_replayable" });
    const after = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`)).body);
    expect(after.items.filter((r) => r.attempt === 2)).toHaveLength(1);
  });

  it("a dead run at the last attempt a run can have is not replayable: 409, not a 500", async () => {
    // Each replay is the next attempt, and attempts are stored as four digits: a tenant replaying
    // its failing job over and over reaches attempt 9999, whose replay has no attempt to be.
    const { jobId } = await deadRunVia(api);
    const dead = RunPageSchema.parse((await api.call("GET", "/dead-letters")).body).items.find(
      (r) => r.jobId === jobId,
    );
    if (dead === undefined) throw new Error("no dead letter");
    const engine = api.fixture.engine;
    const { Item: item } = await engine.doc.send(
      new GetCommand({
        TableName: engine.tables.runs,
        Key: { pk: `JOB#${jobId}`, sk: runSortKey(dead.scheduledFor, 1) },
      }),
    );
    if (item === undefined) throw new Error("no dead run item");
    const last = runIdOf(jobId, dead.scheduledFor, 9999);
    await engine.doc.send(
      new PutCommand({
        TableName: engine.tables.runs,
        Item: { ...item, sk: runSortKey(dead.scheduledFor, 9999), runId: last, attempt: 9999 },
      }),
    );
    const refused = expectError(await api.call("POST", `/dead-letters/${last}/replay`), 409, {
      code: "not_replayable",
    });
    expect(refused.message).toMatch(/9999/);
    // Nothing was written: the dead letter is still there, not replayed.
    const still = RunSchema.parse((await api.call("GET", `/jobs/${jobId}/runs/${last}`)).body);
    expect(still).toMatchObject({ status: "dead", attempt: 9999, replayedBy: null });
  });

  it("404 for unknown runs, 409 for a run that is not dead, 400 for bad paging", async () => {
    expectError(await api.call("POST", "/dead-letters/nope/replay"), 404);
    expectError(
      await api.call(
        "POST",
        "/dead-letters/01ZZZZZZZZZZZZZZZZZZZZZZZZ-20300101T000000000-1/replay",
      ),
      404,
    );
    const created = await create(laterJob());
    const queued = RunSchema.parse((await api.call("POST", `/jobs/${created.id}/trigger`)).body);
    expectError(await api.call("POST", `/dead-letters/${queued.runId}/replay`), 409, {
      code: "not_replayable",
    });
    expectError(await api.call("GET", "/dead-letters?limit=1000"), 400, { field: "limit" });
    expectError(await api.call("GET", "/dead-letters?cursor=abc"), 400, { field: "cursor" });
    const overlong = { deadPk: "DEAD#tenant-a", deadSk: "é".repeat(600), pk: "x", sk: "x" };
    expectError(
      await api.call(
        "GET",
        `/dead-letters?cursor=${Buffer.from(JSON.stringify(overlong)).toString("base64url")}`,
      ),
      400,
      { field: "cursor" },
    );
    expectError(await api.call("GET", "/dead-letters", { key: null }), 401);
  });
});
