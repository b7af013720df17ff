import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobPageSchema, JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema, RunSchema } from "../../shared/api/schemas/runs.js";
import {
  type ApiHarness,
  deadRunVia,
  expectError,
  KEY_A,
  KEY_B,
  laterJob,
  startApi,
} from "./support.js";

/**
 * Tenant B, holding a valid key of its own, tries everything on tenant A's
 * job, runs and dead letters. Every attempt must look exactly like asking for
 * something that does not exist (404, never 403), and A's data must not change.
 */
let api: ApiHarness;
let jobA: string;
let runA: string;
let deadRunA: string;
let deadJobA: string;

beforeAll(async () => {
  api = await startApi();
  const created = await api.call("POST", "/jobs", {
    key: KEY_A,
    body: laterJob({
      name: "a-secret",
      schedule: { cron: "0 6 * * *", timezone: "Europe/Berlin" },
    }),
    headers: { "Idempotency-Key": "shared-key" },
  });
  jobA = JobSchema.parse(created.body).id;
  runA = RunSchema.parse(
    (await api.call("POST", `/jobs/${jobA}/trigger`, { key: KEY_A })).body,
  ).runId;
  deadJobA = (await deadRunVia(api, KEY_A)).jobId;
  const dead = RunPageSchema.parse((await api.call("GET", "/dead-letters", { key: KEY_A })).body);
  deadRunA = dead.items[0]?.runId ?? "";
  expect(deadRunA).not.toBe("");
});
afterAll(() => api.close());

const asB = (
  method: string,
  path: string,
  options: { body?: unknown; headers?: Record<string, string> } = {},
) => api.call(method, path, { key: KEY_B, ...options });

describe("tenant B against tenant A's data", () => {
  it("cannot see A's job, its runs, or its preview: 404 like a missing job", async () => {
    const missing = await asB("GET", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ");
    const hidden = await asB("GET", `/jobs/${jobA}`);
    expectError(hidden, 404, { code: "not_found" });
    expect(hidden.text.replaceAll(jobA, "ID")).toBe(
      missing.text.replaceAll("01ZZZZZZZZZZZZZZZZZZZZZZZZ", "ID"),
    );
    expectError(await asB("GET", `/jobs/${jobA}/runs`), 404);
    expectError(await asB("GET", `/jobs/${jobA}/runs/${runA}`), 404);
    expectError(await asB("GET", `/jobs/${jobA}/preview`), 404);
  });

  it("cannot list A's jobs or dead letters", async () => {
    const jobs = JobPageSchema.parse((await asB("GET", "/jobs?limit=100")).body);
    expect(jobs.items).toEqual([]);
    const dead = RunPageSchema.parse((await asB("GET", "/dead-letters")).body);
    expect(dead.items).toEqual([]);
  });

  it("cannot use A's cursors to read A's pages", async () => {
    await api.call("POST", "/jobs", { key: KEY_A, body: laterJob() });
    const pageA = JobPageSchema.parse(
      (await api.call("GET", "/jobs?limit=1", { key: KEY_A })).body,
    );
    expect(pageA.nextCursor).not.toBeNull();
    expectError(await asB("GET", `/jobs?cursor=${pageA.nextCursor}`), 400, { field: "cursor" });
    const runsA = RunPageSchema.parse(
      (await api.call("GET", `/jobs/${jobA}/runs?limit=1`, { key: KEY_A })).body,
    );
    expect(runsA.items).toHaveLength(1);
    const forged = Buffer.from(
      JSON.stringify({ deadPk: "DEAD#tenant-a", deadSk: "x", pk: `JOB#${deadJobA}`, sk: "RUN#x" }),
    ).toString("base64url");
    expectError(await asB("GET", `/dead-letters?cursor=${forged}`), 400, { field: "cursor" });
  });

  it("cannot edit, pause, resume, cancel or trigger A's job", async () => {
    expectError(
      await asB("PATCH", `/jobs/${jobA}`, {
        body: { name: "mine" },
        headers: { "If-Match": '"1"' },
      }),
      404,
    );
    expectError(await asB("PATCH", `/jobs/${jobA}`, { body: { name: "mine" } }), 404);
    for (const action of ["pause", "resume", "cancel", "trigger"]) {
      expectError(await asB("POST", `/jobs/${jobA}/${action}`), 404);
    }
  });

  it("cannot delete A's job, nor read the history of A's deleted job", async () => {
    expectError(await asB("DELETE", `/jobs/${jobA}`), 404);
    const doomed = JobSchema.parse(
      (await api.call("POST", "/jobs", { key: KEY_A, body: laterJob() })).body,
    ).id;
    const doomedRun = RunSchema.parse(
      (await api.call("POST", `/jobs/${doomed}/trigger`, { key: KEY_A })).body,
    ).runId;
    expect((await api.call("DELETE", `/jobs/${doomed}`, { key: KEY_A })).status).toBe(204);
    const ownHistory = RunPageSchema.parse(
      (await api.call("GET", `/jobs/${doomed}/runs`, { key: KEY_A })).body,
    );
    expect(ownHistory.items.map((r) => r.runId)).toEqual([doomedRun]);
    const missing = await asB("GET", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ/runs");
    const hidden = await asB("GET", `/jobs/${doomed}/runs`);
    expectError(hidden, 404, { code: "not_found" });
    expect(hidden.text.replaceAll(doomed, "ID")).toBe(
      missing.text.replaceAll("01ZZZZZZZZZZZZZZZZZZZZZZZZ", "ID"),
    );
    expectError(await asB("GET", `/jobs/${doomed}/runs/${doomedRun}`), 404);
    expectError(await asB("DELETE", `/jobs/${doomed}`), 404);
  });

  it("cannot replay A's dead letters", async () => {
    expectError(await asB("POST", `/dead-letters/${deadRunA}/replay`), 404);
    const dead = RunPageSchema.parse((await api.call("GET", "/dead-letters", { key: KEY_A })).body);
    expect(dead.items.map((r) => r.runId)).toContain(deadRunA);
  });

  it("its idempotency keys are its own: the same key makes B its own job", async () => {
    const reply = await asB("POST", "/jobs", {
      body: laterJob(),
      headers: { "Idempotency-Key": "shared-key" },
    });
    expect(reply.status).toBe(201);
    expect(JobSchema.parse(reply.body).id).not.toBe(jobA);
  });

  it("left A's job exactly as it was", async () => {
    const reply = await api.call("GET", `/jobs/${jobA}`, { key: KEY_A });
    expect(JobSchema.parse(reply.body)).toMatchObject({
      name: "a-secret",
      status: "active",
      version: 1,
    });
    const runs = RunPageSchema.parse(
      (await api.call("GET", `/jobs/${jobA}/runs`, { key: KEY_A })).body,
    );
    expect(runs.items.map((r) => r.runId)).toEqual([runA]);
    const stored = (await api.fixture.jobs()).filter((j) => j.tenantId === "tenant-b");
    expect(stored).toHaveLength(1);
  });
});
