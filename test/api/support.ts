import { expect } from "vitest";
import { z } from "zod";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { type LocalServer, startLocalServer } from "../../shared/api/local-server.js";
import { ErrorSchema } from "../../shared/api/schemas/errors.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import type { Engine } from "../../shared/engine.js";
import { processRun } from "../../shared/execution/worker.js";
import { type JobTypeCatalog, jobTypeCatalog } from "../../shared/job-types/registry.js";
import { receiveRuns } from "../../shared/queue/work-queue.js";
import {
  createEngineFixture,
  type EngineFixture,
  type FixtureOptions,
} from "../support/engine-fixture.js";

export const KEY_A = "key-for-a";
export const KEY_B = "key-for-b";
export const TENANT_A = "tenant-a";
const TENANT_B = "tenant-b";
/** Tenant A is also the deployment's admin tenant: it may read and set any tenant's quotas. */
const API_ENV = {
  SCHEDULER_API_KEYS: `${KEY_A}=${TENANT_A}, ${KEY_B}=${TENANT_B}`,
  ADMIN_TENANTS: TENANT_A,
};
/** The built-ins with the demo types, as the sandbox has them, and a custom type `report` taking any JSON, as if registered in functions/worker/handlers. */
export const JOB_TYPES = jobTypeCatalog({
  demoTypes: true,
  custom: [{ name: "report", payload: z.unknown(), description: "Any JSON, for the tests." }],
});

export interface Reply {
  readonly status: number;
  readonly headers: Headers;
  readonly body: unknown;
  readonly text: string;
}

/**
 * The API in-process (`app.request`) over `engine`, for one bearer key and its tenant; with
 * `admin` the tenant is also the deployment's admin tenant. `body` is sent as given when a string
 * (raw JSON), else as JSON.
 */
export function inProcessApi(
  engine: Engine,
  { key, tenant, admin = false }: { key: string; tenant: string; admin?: boolean },
) {
  const app = createApiApp({
    engine,
    jobTypes: JOB_TYPES,
    authenticate: bearerAuthenticator(new Map([[key, tenant]])),
    ...(admin ? { adminTenants: [tenant] } : {}),
  });
  return async (
    method: string,
    path: string,
    { body, headers = {} }: { body?: unknown; headers?: Record<string, string> } = {},
  ): Promise<Reply> => {
    const response = await app.request(path, {
      method,
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json", ...headers },
      ...(body !== undefined
        ? { body: typeof body === "string" ? body : JSON.stringify(body) }
        : {}),
    });
    const text = await response.text();
    return {
      status: response.status,
      headers: response.headers,
      body: text === "" ? null : JSON.parse(text),
      text,
    };
  };
}

interface CallOptions {
  /** Bearer key; null sends no Authorization header. Default KEY_A. */
  readonly key?: string | null;
  /** Serialized as JSON with Content-Type: application/json unless `raw` is given. */
  readonly body?: unknown;
  readonly raw?: string | Uint8Array;
  readonly headers?: Record<string, string>;
}

export interface ApiHarness {
  readonly fixture: EngineFixture;
  readonly server: LocalServer;
  call(method: string, path: string, options?: CallOptions): Promise<Reply>;
  close(): Promise<void>;
}

export interface ApiHarnessOptions extends FixtureOptions {
  /** Default JOB_TYPES. */
  readonly jobTypes?: JobTypeCatalog;
  /** The request-rate buckets' monotonic clock; default performance.now. */
  readonly elapsedMs?: () => number;
}

export async function startApi({
  jobTypes = JOB_TYPES,
  elapsedMs,
  ...options
}: ApiHarnessOptions = {}): Promise<ApiHarness> {
  const fixture = await createEngineFixture(options);
  const server = await startLocalServer({
    engine: fixture.engine,
    jobTypes,
    env: API_ENV,
    ...(elapsedMs ? { elapsedMs } : {}),
  });
  return {
    fixture,
    server,
    async call(method, path, { key = KEY_A, body, raw, headers = {} } = {}) {
      const sent: Record<string, string> = { ...headers };
      if (key !== null) sent.Authorization ??= `Bearer ${key}`;
      let payload: string | Uint8Array | undefined = raw;
      if (payload === undefined && body !== undefined) {
        payload = JSON.stringify(body);
        sent["Content-Type"] ??= "application/json";
      }
      const response = await fetch(`${server.url}${path}`, {
        method,
        headers: sent,
        ...(payload !== undefined ? { body: payload } : {}),
      });
      const text = await response.text();
      let parsed: unknown = null;
      try {
        parsed = text === "" ? null : JSON.parse(text);
      } catch {
        parsed = text;
      }
      return { status: response.status, headers: response.headers, body: parsed, text };
    },
    async close() {
      await server.close();
      await fixture.destroy();
    },
  };
}

/** Asserts the one error shape and returns its inner object. */
export function expectError(
  reply: Reply,
  status: number,
  expected: { code?: string; field?: string } = {},
): z.infer<typeof ErrorSchema>["error"] {
  expect(reply.status, reply.text).toBe(status);
  expect(reply.headers.get("content-type")).toMatch(/^application\/json/);
  const parsed = ErrorSchema.parse(reply.body);
  if (expected.code !== undefined) expect(parsed.error.code).toBe(expected.code);
  if (expected.field !== undefined) expect(parsed.error.field).toBe(expected.field);
  return parsed.error;
}

/** POST /jobs with `body` (tenant A): asserts its 201 and returns the job created. */
export async function createdVia(api: ApiHarness, body: Record<string, unknown>) {
  const reply = await api.call("POST", "/jobs", { body });
  expect(reply.status, reply.text).toBe(201);
  return JobSchema.parse(reply.body);
}

/** GET /jobs/{id} (tenant A): asserts its 200 and returns the job. */
export async function jobVia(api: ApiHarness, jobId: string) {
  const reply = await api.call("GET", `/jobs/${jobId}`);
  expect(reply.status, reply.text).toBe(200);
  return JobSchema.parse(reply.body);
}

export const inMinutes = (minutes: number, from = Date.now()) =>
  new Date(from + minutes * 60_000).toISOString();

/** A job that will not come due during a test run. */
export const laterJob = (overrides: Record<string, unknown> = {}) => ({
  type: "noop",
  schedule: { runAt: inMinutes(24 * 60) },
  ...overrides,
});

/** Receives from the normal queue until a message of `jobId` arrives, and processes it like a worker. */
export async function runOnce(api: ApiHarness, jobId: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    const received = await receiveRuns(api.fixture.engine.sqs, api.fixture.engine.queues.normal, {
      max: 10,
      waitSeconds: 1,
    });
    const mine = received.filter((r) => r.message.jobId === jobId);
    for (const message of mine) await processRun(api.fixture.workerDeps("w"), message);
    if (mine.length > 0) return;
  }
  throw new Error(`no message for job ${jobId}`);
}

/**
 * A DEAD run, made the way production makes one: the API creates a `fail`
 * job (non-retryable) due now, and the worker code runs it.
 */
export async function deadRunVia(api: ApiHarness, key = KEY_A): Promise<{ jobId: string }> {
  const created = await api.call("POST", "/jobs", {
    key,
    body: {
      type: "fail",
      payload: { times: 99, retryable: false },
      schedule: { runAt: new Date().toISOString() },
    },
  });
  expect(created.status, created.text).toBe(201);
  const jobId = (created.body as { id: string }).id;
  await runOnce(api, jobId);
  return { jobId };
}

/**
 * Records each DynamoDB request (command and table) and SQS send `engine` makes into `sink`, for
 * a test comparing what two requests cost in storage calls; returns what stops the recording.
 */
export function recordStorageRequests(engine: Engine, sink: string[]): () => void {
  const name = { doc: "recordStorageRequests", sqs: "recordStorageSends" };
  engine.doc.middlewareStack.add(
    (next, context) => (args) => {
      const input = args.input as { TableName?: string };
      sink.push(`${String(context.commandName)} ${input.TableName ?? ""}`);
      return next(args);
    },
    { step: "initialize", name: name.doc },
  );
  engine.sqs.middlewareStack.add(
    (next, context) => (args) => {
      sink.push(String(context.commandName));
      return next(args);
    },
    { step: "initialize", name: name.sqs },
  );
  return () => {
    engine.doc.middlewareStack.remove(name.doc);
    engine.sqs.middlewareStack.remove(name.sqs);
  };
}
