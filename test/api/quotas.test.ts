import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { type ApiHarness, expectError, KEY_B, laterJob, startApi } from "./support.js";

/** Tenant A is the harness's admin tenant; B is an ordinary one. */
describe("quotas over HTTP", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  const asB = { key: KEY_B };

  it("shows a tenant its own quotas, the defaults until an override", async () => {
    const reply = await api.call("GET", "/quotas", asB);
    expect(reply.status).toBe(200);
    expect(reply.body).toEqual({
      tenantId: "tenant-b",
      quotas: DEFAULT_QUOTAS,
      override: {},
      runningRuns: 0,
    });
  });

  it("shows the counted quotas without a limit as null, and an override sets or lifts each", async () => {
    const shown = await api.call("GET", "/quotas", asB);
    expect(shown.body).toMatchObject({
      quotas: { activeJobs: null, runsPerMinute: null, concurrentRuns: null },
    });
    const capped = await api.call("PUT", "/tenants/tenant-c/quotas", {
      body: { concurrentRuns: 5, activeJobs: null },
    });
    expect(capped.status).toBe(200);
    expect(capped.body).toMatchObject({
      quotas: { activeJobs: null, concurrentRuns: 5 },
      override: { concurrentRuns: 5, activeJobs: null },
    });
    const lifted = await api.call("PUT", "/tenants/tenant-c/quotas", {
      body: { concurrentRuns: null },
    });
    expect(lifted.body).toMatchObject({
      quotas: { concurrentRuns: null },
      override: { concurrentRuns: null },
    });
  });

  it("lets only an admin tenant read or set another tenant's quotas", async () => {
    expectError(await api.call("GET", "/tenants/tenant-a/quotas", asB), 403, { code: "forbidden" });
    expectError(
      await api.call("PUT", "/tenants/tenant-b/quotas", { ...asB, body: { activeJobs: 1000 } }),
      403,
      { code: "forbidden" },
    );
    expect((await api.call("GET", "/quotas", asB)).body).toMatchObject({ override: {} });
  });

  it("refuses a bad override with a 400 naming the field, and writes nothing", async () => {
    for (const [body, field] of [
      [{ concurrentRuns: 0 }, "concurrentRuns"],
      [{ concurrentRuns: 1001 }, "concurrentRuns"],
      [{ maxPriority: "urgent" }, "maxPriority"],
      [{ requestsPerSecond: 1.5 }, "requestsPerSecond"],
      [{ burst: 3 }, "burst"],
    ] as const) {
      expectError(await api.call("PUT", "/tenants/tenant-b/quotas", { body }), 400, { field });
    }
    expect((await api.call("GET", "/tenants/tenant-b/quotas")).body).toMatchObject({
      override: {},
    });
  });

  it("applies an admin's override at once, without a restart, and a new one replaces it", async () => {
    const set = await api.call("PUT", "/tenants/tenant-b/quotas", {
      body: { activeJobs: 1, maxPriority: "normal" },
    });
    expect(set.status).toBe(200);
    expect(set.body).toEqual({
      tenantId: "tenant-b",
      quotas: { ...DEFAULT_QUOTAS, activeJobs: 1, maxPriority: "normal" },
      override: { activeJobs: 1, maxPriority: "normal" },
      runningRuns: 0,
    });
    expectError(
      await api.call("POST", "/jobs", { ...asB, body: laterJob({ priority: "high" }) }),
      403,
      { code: "quota_exceeded", field: "priority" },
    );
    expect((await api.call("POST", "/jobs", { ...asB, body: laterJob() })).status).toBe(201);
    const over = expectError(await api.call("POST", "/jobs", { ...asB, body: laterJob() }), 403, {
      code: "quota_exceeded",
    });
    expect(over.quota).toBe("activeJobs");
    // Tenant A's jobs are not B's quota.
    expect((await api.call("POST", "/jobs", { body: laterJob({ priority: "high" }) })).status).toBe(
      201,
    );

    const raised = await api.call("PUT", "/tenants/tenant-b/quotas", {
      body: { activeJobs: 5, runsPerMinute: 20 },
    });
    expect(raised.body).toMatchObject({ override: { activeJobs: 5, runsPerMinute: 20 } });
    expect(
      (await api.call("POST", "/jobs", { ...asB, body: laterJob({ priority: "high" }) })).status,
    ).toBe(201);
    const tooFast = expectError(
      await api.call("POST", "/jobs", {
        ...asB,
        body: laterJob({ schedule: { every: "PT2S" } }),
      }),
      403,
      { code: "quota_exceeded", field: "schedule" },
    );
    expect(tooFast.quota).toBe("runsPerMinute");
  });

  it("answers 429 with Retry-After once a tenant spends its requests per second", async () => {
    const flood = await startApi();
    try {
      // Set before tenant B's first request there, so its bucket starts under the override.
      await flood.call("PUT", "/tenants/tenant-b/quotas", { body: { requestsPerSecond: 5 } });
      const replies = await Promise.all(
        Array.from({ length: 30 }, () => flood.call("GET", "/quotas", asB)),
      );
      const refused = replies.filter((r) => r.status === 429);
      // Ten tokens (two seconds' worth) at most pass at once, and a few more as it refills.
      expect(replies.filter((r) => r.status === 200).length).toBeGreaterThanOrEqual(10);
      expect(refused.length).toBeGreaterThanOrEqual(10);
      const first = refused[0];
      if (first === undefined) throw new Error("no request was refused");
      const error = expectError(first, 429, { code: "rate_limited" });
      expect(error.quota).toBe("requestsPerSecond");
      expect(Number(first.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      // Another tenant's requests are not B's bucket.
      expect((await flood.call("GET", "/quotas")).status).toBe(200);
    } finally {
      await flood.close();
    }
  });
});
