import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isSchedulerApiError, type RetryOptions, SchedulerClient } from "../../client/index.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { sleep } from "../../shared/clock.js";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { waitFor } from "../support/wait.js";
import { type ApiHarness, expectError, inMinutes, KEY_B, laterJob, startApi } from "./support.js";

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

  it("names each quota's own bound when a value is far past it, not the largest safe integer", async () => {
    for (const [field, value, bound] of [
      ["activeJobs", 1e308, "<=1000000"],
      ["runsPerMinute", 2 ** 53, "<=1000000"],
      ["requestsPerSecond", 1e300, "<=1000000"],
      ["concurrentRuns", 2 ** 60, "<=1000"],
    ] as const) {
      const reply = await api.call("PUT", "/tenants/tenant-b/quotas", { body: { [field]: value } });
      expect(expectError(reply, 400, { field }).message).toBe(
        `${field}: Too big: expected number to be ${bound}`,
      );
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
    const tooHigh = expectError(
      await api.call("POST", "/jobs", { ...asB, body: laterJob({ priority: "high" }) }),
      403,
      { code: "quota_exceeded", field: "priority" },
    );
    expect(tooHigh.quota).toBe("maxPriority");
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
    // An edit is held to the same quotas.
    const mine = await api.call("POST", "/jobs", { ...asB, body: laterJob() });
    expect(mine.status, mine.text).toBe(201);
    const editedTooFast = expectError(
      await api.call("PATCH", `/jobs/${(mine.body as { id: string }).id}`, {
        ...asB,
        body: { schedule: { every: "PT2S" } },
        headers: { "If-Match": '"1"' },
      }),
      403,
      { code: "quota_exceeded", field: "schedule" },
    );
    expect(editedTooFast.quota).toBe("runsPerMinute");
    // A dependent runs once per run of its upstream: 15 a minute after an every-4-seconds job.
    const everyFour = await api.call("POST", "/jobs", {
      ...asB,
      body: laterJob({ schedule: { every: "PT4S", startAt: inMinutes(60) } }),
    });
    expect(everyFour.status, everyFour.text).toBe(201);
    const dependentTooFast = expectError(
      await api.call("POST", "/jobs", {
        ...asB,
        body: laterJob({
          schedule: { after: { jobs: [(everyFour.body as { id: string }).id], on: "success" } },
        }),
      }),
      403,
      { code: "quota_exceeded", field: "schedule.after.jobs" },
    );
    expect(dependentTooFast).toMatchObject({
      quota: "runsPerMinute",
      message:
        "this job adds 15 runs per minute at its peak (a run for each run of its upstreams) to the 15 of this tenant's jobs; its runsPerMinute quota is 20",
    });
  });

  it("makes a run over concurrentRuns wait, queued with a reason naming the quota, and runs it once a slot frees", async () => {
    const own = await startApi();
    try {
      await own.call("PUT", "/tenants/tenant-b/quotas", { body: { concurrentRuns: 1 } });
      const due = { schedule: { runAt: new Date().toISOString() } };
      const ids: string[] = [];
      for (let i = 0; i < 2; i++) {
        const created = await own.call("POST", "/jobs", { ...asB, body: laterJob(due) });
        expect(created.status, created.text).toBe(201);
        ids.push((created.body as { id: string }).id);
      }
      const [holderId, waiterId] = ids;
      if (holderId === undefined || waiterId === undefined) throw new Error("no jobs created");
      const { fixture } = own;
      const queue = fixture.engine.queues.normal;
      const holderRun = await fixture.nextDelivery(queue, holderId);
      const waiterRun = await fixture.nextDelivery(queue, waiterId);
      let release = () => {};
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      const holding = fixture.process(fixture.workerDeps("w", { noop: () => held }), holderRun);
      try {
        await waitFor("the first run to hold the tenant's slot", async () => {
          const shown = await own.call("GET", "/quotas", asB);
          return (shown.body as { runningRuns: number }).runningRuns === 1 ? true : undefined;
        });
        expect(await fixture.process(fixture.workerDeps("w"), waiterRun)).toBe("ack");
        const waiting = RunPageSchema.parse(
          (await own.call("GET", `/jobs/${waiterId}/runs`, asB)).body,
        );
        expect(waiting.items.map((r) => [r.status, r.reason])).toEqual([
          ["queued", "waiting: tenant at its concurrentRuns quota (1)"],
        ]);
      } finally {
        release();
        await holding;
      }
      // Sent again a second later: now the slot is free and it runs.
      await fixture.process(fixture.workerDeps("w"), await fixture.nextDelivery(queue, waiterId));
      const ran = RunPageSchema.parse((await own.call("GET", `/jobs/${waiterId}/runs`, asB)).body);
      expect(ran.items.map((r) => r.status)).toEqual(["succeeded"]);
    } finally {
      await own.close();
    }
  }, 60_000);

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

  it("the typed client waits a 429's Retry-After and sends the request again: a burst over the quota all answers", async () => {
    const flood = await startApi();
    try {
      await flood.call("PUT", "/tenants/tenant-b/quotas", { body: { requestsPerSecond: 2 } });
      const waits: number[] = [];
      const client = (retry: RetryOptions) =>
        new SchedulerClient({
          baseUrl: flood.server.url,
          auth: { kind: "bearer", key: KEY_B },
          retry: {
            ...retry,
            sleep: (ms) => {
              waits.push(ms);
              return sleep(ms);
            },
          },
        });
      // Four tokens (two seconds' worth) pass at once; the rest wait for the bucket to refill.
      const retrying = client({});
      const answered = await Promise.all(Array.from({ length: 8 }, () => retrying.quotas.get()));
      expect(answered.map((q) => q.quotas.requestsPerSecond)).toEqual(Array(8).fill(2));
      expect(waits.length).toBeGreaterThan(0);
      expect(waits.every((ms) => ms >= 1000)).toBe(true);

      // Without retries, the same burst is refused as before.
      const once = client({ attempts: 0 });
      const replies = await Promise.allSettled(Array.from({ length: 8 }, () => once.quotas.get()));
      const refused = replies.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
      expect(refused.length).toBeGreaterThan(0);
      expect(refused.every((e) => isSchedulerApiError(e, "rate_limited"))).toBe(true);
    } finally {
      await flood.close();
    }
  }, 30_000);
});

describe("requests charged by what they read", () => {
  const asB = { key: KEY_B };

  it("refuses a tenant whose listings read past its budget, with a Retry-After for the debt, and not another tenant", async () => {
    // The buckets' clock is held still: a refill while the listings ran (seconds, on a loaded
    // machine) would pay part of the debt and shorten the Retry-After this case measures.
    const api = await startApi({ elapsedMs: () => 0 });
    try {
      // 60 jobs of 60 KB: one page of them reads about 8 units a job (eventually consistent,
      // 0.5 a 4 KB), 480 in all, 380 past the free 100: 3.8 tokens owed at 100 units a token.
      const blob = "x".repeat(60_000);
      for (let start = 0; start < 60; start += 10) {
        const created = await Promise.all(
          Array.from({ length: 10 }, () =>
            api.call("POST", "/jobs", {
              ...asB,
              body: laterJob({ type: "report", payload: { blob } }),
            }),
          ),
        );
        expect(created.map((r) => r.status)).toEqual(Array(10).fill(201));
      }
      // One request a second, a bucket of two: without the charge two listings pass.
      await api.call("PUT", "/tenants/tenant-b/quotas", { body: { requestsPerSecond: 1 } });
      const first = await api.call("GET", "/jobs?limit=100", asB);
      expect(first.status).toBe(200);
      expect((first.body as { items: unknown[] }).items).toHaveLength(60);

      const second = await api.call("GET", "/jobs?limit=100", asB);
      expect(second.status).toBe(429);
      const error = expectError(second, 429, { code: "rate_limited" });
      expect(error.quota).toBe("requestsPerSecond");
      // The message says why one request spent a bucket of two.
      expect(error.message).toMatch(
        /each 100 read units a request read past its first 100, and each 100 write units it wrote past its first 100, counted as one request more/,
      );
      // The bucket owes what the first listing read: about 3.8 tokens, at one a second.
      expect(Number(second.headers.get("retry-after"))).toBeGreaterThanOrEqual(3);
      // A cheap request of B's is refused as well: the debt is the tenant's, not the route's.
      expect((await api.call("GET", "/quotas", asB)).status).toBe(429);
      // Tenant A's bucket is its own.
      expect((await api.call("GET", "/jobs?limit=100")).status).toBe(200);
      expect((await api.call("GET", "/quotas")).status).toBe(200);
    } finally {
      await api.close();
    }
  }, 60_000);

  it("refuses a tenant whose request wrote past its budget, though it read little: a delete of a job after 20 large jobs", async () => {
    // The buckets' clock moves only when the case moves it.
    let elapsed = 0;
    const api = await startApi({ elapsedMs: () => elapsed });
    try {
      // 20 jobs of 60 KB and one job after them all: its delete reads its own small item and
      // takes itself off each of the 20 (an UpdateItem of a 60 KB item is 60 write units).
      const blob = "x".repeat(60_000);
      const upstreams = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const reply = await api.call("POST", "/jobs", {
            ...asB,
            body: laterJob({ type: "report", payload: { blob } }),
          });
          expect(reply.status, reply.text).toBe(201);
          return (reply.body as { id: string }).id;
        }),
      );
      const dependent = await api.call("POST", "/jobs", {
        ...asB,
        body: { type: "noop", schedule: { after: { jobs: upstreams } } },
      });
      expect(dependent.status, dependent.text).toBe(201);
      // One request a second, a bucket of two, refilled by a wait: without the charge for what it
      // wrote, the delete leaves a token for the next request.
      await api.call("PUT", "/tenants/tenant-b/quotas", { body: { requestsPerSecond: 1 } });
      elapsed += 60_000;
      const deleted = await api.call(
        "DELETE",
        `/jobs/${(dependent.body as { id: string }).id}`,
        asB,
      );
      expect(deleted.status, deleted.text).toBe(204);

      const next = await api.call("GET", "/quotas", asB);
      const error = expectError(next, 429, { code: "rate_limited" });
      expect(error.message).toMatch(/write units/);
      // About 1,200 units written, 1,100 past the free 100: 11 tokens owed at 100 units a token.
      expect(Number(next.headers.get("retry-after"))).toBeGreaterThanOrEqual(10);
      // Tenant A's bucket is its own.
      expect((await api.call("GET", "/quotas")).status).toBe(200);
    } finally {
      await api.close();
    }
  }, 60_000);
});
