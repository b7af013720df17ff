import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiApp } from "../../shared/api/app.js";
import { ApiError } from "../../shared/api/errors.js";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import { createJob } from "../../shared/jobs/index.js";
import { type Logger, silentObservability, TENANT_LOG_EVENTS } from "../../shared/observability.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

/**
 * The log lines the stack's Contributor Insights rules count per tenant (infra/constructs/
 * observability.ts reads `$.message`, `$.tenantId`, `$.status`, `$.lagMs` and `$.code`): each
 * carries the fields its rule keys on.
 */
interface Line {
  readonly level: string;
  readonly message: string;
  readonly fields: Record<string, unknown>;
}

function capturingLogger(lines: Line[]): Logger {
  const at =
    (level: string) =>
    (message: string, fields: Record<string, unknown> = {}) =>
      void lines.push({ level, message, fields });
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

describe("per-tenant log lines", () => {
  const lines: Line[] = [];
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      obs: { ...silentObservability, log: capturingLogger(lines) },
    });
  });
  afterAll(() => f.destroy());

  it("the worker's run finished line names the tenant, the status and the lag", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ tenantId: "tenant-logs", schedule: { runAt: new Date().toISOString() } }),
    );
    await f.process(f.workerDeps("w"), await f.nextDelivery(f.engine.queues.normal, job.jobId));
    const finished = lines.filter((l) => l.message === TENANT_LOG_EVENTS.runFinished);
    expect(finished).toHaveLength(1);
    expect(finished[0]?.fields).toMatchObject({
      tenantId: "tenant-logs",
      jobId: job.jobId,
      status: "SUCCEEDED",
      lagMs: expect.any(Number),
    });
  });

  it("every 429 the API answers is logged with the caller's tenant and the answer's code", async () => {
    const app = createApiApp({
      engine: f.engine,
      jobTypes: jobTypeCatalog({ demoTypes: false, custom: [] }),
      authenticate: () => "tenant-throttled",
    });
    // Whatever refuses a request for its rate answers 429 through the one error path.
    app.get("/rate-probe", () => {
      throw new ApiError(429, "busy", "over the tenant's request rate", {
        headers: { "Retry-After": "1" },
      });
    });
    const reply = await app.request("/rate-probe");
    expect(reply.status).toBe(429);
    const throttled = lines.filter((l) => l.message === TENANT_LOG_EVENTS.requestThrottled);
    expect(throttled).toEqual([
      {
        level: "warn",
        message: TENANT_LOG_EVENTS.requestThrottled,
        fields: {
          tenantId: "tenant-throttled",
          code: "busy",
          reason: "over the tenant's request rate",
          method: "GET",
          path: "/rate-probe",
        },
      },
    ]);
    // Other refusals are not throttles.
    expect((await app.request("/jobs/unknown-job")).status).toBe(404);
    expect(lines.filter((l) => l.message === TENANT_LOG_EVENTS.requestThrottled)).toHaveLength(1);
  });
});
