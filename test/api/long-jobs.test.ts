import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ApiHarness, expectError, inMinutes, startApi } from "./support.js";

/**
 * Long jobs over the API: which timeouts an async target allows, and what the run routes refuse
 * before they look at a run (test/integration/long-jobs.test.ts runs them end to end).
 */

let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api?.close();
});

const httpJob = (target: Record<string, unknown>, timeoutSeconds?: number) => ({
  type: "http",
  schedule: { runAt: inMinutes(60) },
  target: { url: "https://example.com/long", ...target },
  ...(timeoutSeconds !== undefined ? { timeoutSeconds } : {}),
});

describe("target.mode async and timeoutSeconds", () => {
  it("allows a timeout up to 24 h with an async target, and shows the mode", async () => {
    const created = await api.call("POST", "/jobs", { body: httpJob({ mode: "async" }, 86_400) });
    expect(created.status, created.text).toBe(201);
    expect(created.body).toMatchObject({
      timeoutSeconds: 86_400,
      target: { url: "https://example.com/long", mode: "async" },
    });
  });

  it("refuses a timeout past the workers' limit without async mode, naming timeoutSeconds", async () => {
    for (const target of [{}, { mode: "sync" }]) {
      const refused = await api.call("POST", "/jobs", { body: httpJob(target, 3600) });
      const error = expectError(refused, 400, { field: "timeoutSeconds" });
      expect(error.message).toContain('only with target.mode "async"');
    }
    const noTarget = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: { runAt: inMinutes(60) }, timeoutSeconds: 3600 },
    });
    expectError(noTarget, 400, { field: "timeoutSeconds" });
  });

  it("refuses more than 24 h and an unknown mode", async () => {
    expectError(
      await api.call("POST", "/jobs", { body: httpJob({ mode: "async" }, 86_401) }),
      400,
      { field: "timeoutSeconds" },
    );
    expectError(await api.call("POST", "/jobs", { body: httpJob({ mode: "later" }) }), 400, {
      field: "target.mode",
    });
  });

  it("an edit that turns the target to sync under a long timeout is refused, and nothing changes", async () => {
    const created = await api.call("POST", "/jobs", { body: httpJob({ mode: "async" }, 3600) });
    const id = (created.body as { id: string }).id;
    const edit = await api.call("PATCH", `/jobs/${id}`, {
      body: { target: { url: "https://example.com/short" } },
      headers: { "If-Match": '"1"' },
    });
    expectError(edit, 400, { field: "timeoutSeconds" });
    const job = await api.call("GET", `/jobs/${id}`);
    expect(job.body).toMatchObject({ version: 1, target: { mode: "async" } });
    // With the timeout brought down in the same edit, it is accepted.
    const both = await api.call("PATCH", `/jobs/${id}`, {
      body: { target: { url: "https://example.com/short" }, timeoutSeconds: 300 },
      headers: { "If-Match": '"1"' },
    });
    expect(both.status, both.text).toBe(200);
    expect((both.body as { target: Record<string, unknown> }).target).toEqual({
      url: "https://example.com/short",
    });
  });
});

describe("POST /runs/{runId}/heartbeat and /complete", () => {
  const runPath = "/runs/01J9Z3V6K8N4QX2M7R5T0W1Y3B-20300115T080000000-1";

  it("do not take tenant credentials: a tenant key is not a run token (401)", async () => {
    for (const path of [`${runPath}/heartbeat`, `${runPath}/complete`]) {
      const reply = await api.call("POST", path, { body: { status: "succeeded" } });
      expectError(reply, 401, { code: "unauthorized" });
    }
  });

  it("complete: 400 naming the field for a bad body", async () => {
    const token = { headers: { Authorization: "Bearer rt1.e30.AAAA" }, key: null };
    expectError(
      await api.call("POST", `${runPath}/complete`, { ...token, body: { status: "done" } }),
      400,
      { field: "status" },
    );
    expectError(
      await api.call("POST", `${runPath}/complete`, {
        ...token,
        body: { status: "succeeded", error: "x" },
      }),
      400,
      { field: "error" },
    );
    expectError(
      await api.call("POST", `${runPath}/complete`, {
        ...token,
        body: { status: "failed", result: 1 },
      }),
      400,
      { field: "result" },
    );
    for (const body of [
      { status: "succeeded", retryAfterSeconds: 60 },
      { status: "failed", retryable: false, retryAfterSeconds: 60 },
      { status: "failed", retryAfterSeconds: 0 },
      { status: "failed", retryAfterSeconds: 1.5 },
      { status: "failed", retryAfterSeconds: 7 * 86_400 + 1 },
    ])
      expectError(await api.call("POST", `${runPath}/complete`, { ...token, body }), 400, {
        field: "retryAfterSeconds",
      });
    expectError(
      await api.call("POST", `${runPath}/complete`, {
        ...token,
        raw: "{}",
        headers: { ...token.headers },
      }),
      415,
    );
  });

  it("are listed in the OpenAPI document under the run token scheme", async () => {
    const doc = (await api.call("GET", "/openapi.json")).body as {
      paths: Record<string, Record<string, { security?: unknown }>>;
    };
    expect(doc.paths["/runs/{runId}/heartbeat"]?.post?.security).toEqual([{ runToken: [] }]);
    expect(doc.paths["/runs/{runId}/complete"]?.post?.security).toEqual([{ runToken: [] }]);
  });
});
