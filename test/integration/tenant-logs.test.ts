import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiApp } from "../../shared/api/app.js";
import { ApiError } from "../../shared/api/errors.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import { createJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import {
  type Logger,
  METRICS,
  silentObservability,
  TENANT_LOG_EVENTS,
} from "../../shared/observability.js";
import { requestRunCancel } from "../../shared/storage/run-cancel.js";
import { startRun } from "../../shared/storage/run-start.js";
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

  it("the run finished line of a failed delivery holds none of the tenant's text: no credential of its target", async () => {
    // A Discord- or Slack-style webhook URL: the path is the credential. The receiver's answer
    // echoes the request's Authorization header, as some error pages do.
    const receiver = createServer((request, response) => {
      response.writeHead(404, { "Content-Type": "text/plain" });
      response.end(`unknown webhook; you sent ${request.headers.authorization} to ${request.url}`);
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    const { port } = receiver.address() as AddressInfo;
    try {
      const { job } = await createJob(
        f.engine,
        testJob({
          tenantId: "tenant-logs",
          type: "http",
          target: {
            url: `http://127.0.0.1:${port}/api/webhooks/1234/path-token-s3cret?sig=query-s3cret`,
            headers: { Authorization: "Bearer header-s3cret" },
          },
          schedule: { runAt: new Date().toISOString() },
        }),
      );
      await f.process(f.workerDeps("w"), await f.nextDelivery(f.engine.queues.normal, job.jobId));
      const finished = lines.filter(
        (l) => l.message === TENANT_LOG_EVENTS.runFinished && l.fields.jobId === job.jobId,
      );
      expect(finished).toHaveLength(1);
      expect(finished[0]?.fields).toMatchObject({ tenantId: "tenant-logs", status: "DEAD" });
      expect(JSON.stringify(finished[0])).not.toMatch(/s3cret/);
      // The run, the tenant's own, still says what the receiver answered.
      const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
      expect(run?.error).toContain("header-s3cret");
    } finally {
      await new Promise((resolve) => receiver.close(resolve));
    }
  });

  it("a run the redrive DLQ ends DEAD (it crashed every worker that started it) has its run finished line", async () => {
    // The runs that crash workers are the ones whose tenant an operator looks for first.
    const { job } = await createJob(
      f.engine,
      testJob({ tenantId: "tenant-crashing", schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // Every delivery but the first (whose start may stay unwritten) started it and crashed, the
    // last one's lease lapsed since.
    const { maxReceiveCount, leaseMs } = f.engine.settings;
    const apart = leaseMs + 1000;
    for (let start = 1; start < maxReceiveCount; start++) {
      const at = new Date(Date.now() - (maxReceiveCount - start) * apart);
      expect((await startRun(f.engine, received.message, `crash-${start}`, at)).kind).toBe(
        "started",
      );
    }
    await handleCrashedRun(f.engine, received.message, maxReceiveCount);
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(run).toMatchObject({ status: "DEAD", fence: maxReceiveCount - 1 });
    // The line the DLQ alarm points the operator to names the run as its other lines do.
    const dead = lines.filter(
      (l) => l.message === "run dead-lettered by the redrive DLQ" && l.fields.runId === run?.runId,
    );
    expect(dead).toHaveLength(1);
    expect(dead[0]?.fields).toMatchObject({
      tenantId: "tenant-crashing",
      jobId: job.jobId,
      attempt: 1,
    });
    const finished = lines.filter(
      (l) => l.message === TENANT_LOG_EVENTS.runFinished && l.fields.jobId === job.jobId,
    );
    expect(finished).toHaveLength(1);
    expect(finished[0]?.fields).toMatchObject({
      tenantId: "tenant-crashing",
      status: "DEAD",
      attempt: 1,
      lagMs: expect.any(Number),
    });
    // A repeat of the message (its deletion failed) ends nothing more and logs no second line.
    await handleCrashedRun(f.engine, received.message, maxReceiveCount);
    expect(
      lines.filter(
        (l) => l.message === TENANT_LOG_EVENTS.runFinished && l.fields.jobId === job.jobId,
      ),
    ).toHaveLength(1);
  });

  it("a run asked to cancel that crashed every worker is ended CANCELLED by the redrive DLQ, and counted and logged as cancelled, not dead", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ tenantId: "tenant-cancelling", schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const { maxReceiveCount, leaseMs } = f.engine.settings;
    const apart = leaseMs + 1000;
    let started: Run | null = null;
    for (let start = 1; start < maxReceiveCount; start++) {
      const at = new Date(Date.now() - (maxReceiveCount - start) * apart);
      const result = await startRun(f.engine, received.message, `crash-${start}`, at);
      if (result.kind !== "started") throw new Error(`start ${start}: ${result.kind}`);
      started = result.run;
    }
    if (started === null) throw new Error("never started");
    // The tenant cancels it while its last worker holds it; that worker crashes too.
    expect(await requestRunCancel(f.engine, started, "api", new Date())).not.toBeNull();
    const deadBefore = f.metrics.sum(METRICS.runOutcome, { status: "DEAD" });
    const cancelledBefore = f.metrics.sum(METRICS.runOutcome, { status: "CANCELLED" });
    const before = lines.length;
    await handleCrashedRun(f.engine, received.message, maxReceiveCount);
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(run).toMatchObject({ status: "CANCELLED", cancelledBy: "api" });
    expect(f.metrics.sum(METRICS.runOutcome, { status: "DEAD" })).toBe(deadBefore);
    expect(f.metrics.sum(METRICS.runOutcome, { status: "CANCELLED" })).toBe(cancelledBefore + 1);
    const logged = lines.slice(before);
    expect(logged.filter((l) => l.message === "run dead-lettered by the redrive DLQ")).toEqual([]);
    expect(logged.filter((l) => l.fields.status === "DEAD")).toEqual([]);
    expect(logged.filter((l) => l.message === "run cancelled on request")).toHaveLength(1);
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
