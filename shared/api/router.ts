import { OpenAPIHono, type z } from "@hono/zod-openapi";
import type { Context, MiddlewareHandler } from "hono";
import type { Engine } from "../engine.js";
import type { JobTypeCatalog } from "../job-types/registry.js";
import { assertTenantHistory, getTenantJob } from "../jobs/queries.js";
import { JOB_ID_PATTERN } from "../keys.js";
import type { Job } from "../model.js";
import type { RequestRateLimiter } from "../quotas/request-rate.js";
import { etagOf, notFound } from "./errors.js";
import { ErrorSchema } from "./schemas/errors.js";

/**
 * What every resource's router shares: the request context, the dependencies
 * the app hands each router, and the pieces its route declarations are built
 * from. The app (./app.ts) mounts the routers and owns authentication, the
 * error answers and the OpenAPI document; a router only translates requests of
 * its resource into calls on shared/jobs and shared/webhooks.
 */
export interface ApiEnv {
  Variables: { tenantId: string };
}

export interface RouterDeps {
  /** Clients, tables, queues, settings and the clock every request uses. */
  readonly engine: Engine;
  /** The accepted job types, each with its payload schema. */
  readonly jobTypes: JobTypeCatalog;
  /** Reads a JSON body within the size limit before the route's schema sees it (./body.ts). */
  readonly body: MiddlewareHandler;
  /** Tenants that may read and set any tenant's quota override. */
  readonly adminTenants: ReadonlySet<string>;
  /** Each tenant's requestsPerSecond bucket in this process (the app's middleware takes from it too). */
  readonly requestRate: RequestRateLimiter;
}

/**
 * A router of one resource. Its schema failures are answered by the app's
 * default hook, its errors by the app's error handler, once it is mounted.
 */
export const newRouter = () => new OpenAPIHono<ApiEnv>();

export const tenantOf = (c: Context<ApiEnv>) => c.get("tenantId");

/** The caller's job `id`, or 404: another tenant's job is not found either. */
export function jobOf(engine: Engine, c: Context<ApiEnv>, id: string): Promise<Job> {
  return getTenantJob(engine, tenantOf(c), checkedJobId(id));
}

/** Checks the caller may read job `id`'s runs: its job, or a deleted one whose runs are its; else 404. */
export function historyOf(engine: Engine, c: Context<ApiEnv>, id: string): Promise<void> {
  return assertTenantHistory(engine, tenantOf(c), checkedJobId(id));
}

/** An id no job can have must not reach a storage key: it is a 404 like an unknown job's. */
export function checkedJobId(id: string): string {
  if (!JOB_ID_PATTERN.test(id)) throw notFound(`job ${id.slice(0, 64)} not found`);
  return id;
}

export function setJobHeaders(c: Context<ApiEnv>, job: Job): void {
  c.header("ETag", etagOf(job.version));
}

export const json = <T extends z.ZodType>(schema: T, description: string) => ({
  content: { "application/json": { schema } },
  description,
});

/** The response headers a client acts on, as the document declares them. */
const HEADERS = {
  ETag: {
    schema: { type: "string" },
    description: 'The job\'s version, quoted ("3"): send it back as If-Match to edit',
  },
  Location: { schema: { type: "string" }, description: "The path of what the answer names" },
  "Retry-After": {
    schema: { type: "integer" },
    description: "Seconds to wait before trying again",
  },
} as const;

/** A JSON answer with these headers declared. */
export const withHeaders = <T extends z.ZodType>(
  schema: T,
  description: string,
  ...headers: (keyof typeof HEADERS)[]
) => ({
  ...json(schema, description),
  headers: Object.fromEntries(headers.map((name) => [name, HEADERS[name]])),
});

const ERROR_DESCRIPTIONS = {
  400: "Invalid input: `field` names it, `issues` lists every problem",
  401: "Missing or unknown credentials",
  403: "Over one of the tenant's quotas (`quota` names it, `field` the input it refuses), or an admin route called by a tenant that is not an admin",
  404: "No such job or run for this tenant",
  409: "Not allowed in the job's current status, or an idempotency or replay conflict",
  412: "If-Match is not the job's current version",
  413: "The body or its payload is over the size limit",
  415: "The body is not application/json",
  428: "If-Match is missing",
  429: "Over the tenant's requestsPerSecond quota; retry after Retry-After seconds",
  503: "Busy: contention on the job, or (on a read) storage that did not answer in time; retry after Retry-After seconds",
} as const;
type ErrorStatus = keyof typeof ERROR_DESCRIPTIONS;
/** A stale If-Match is answered with the job's current version; a 429 or 503 says when to retry. */
const ERROR_HEADERS: Partial<Record<ErrorStatus, (keyof typeof HEADERS)[]>> = {
  412: ["ETag"],
  429: ["Retry-After"],
  503: ["Retry-After"],
};

/**
 * The documented error responses of a route, each in the one error shape. A route that
 * authenticates (401) also answers 429, since every authenticated request takes a token of the
 * tenant's requestsPerSecond bucket, and 503, since every one of them reaches storage, which can
 * be throttled past the SDK's retries or not answer in time.
 */
export function errors<S extends ErrorStatus>(...statuses: S[]) {
  const out = {} as Record<S | 429 | 503, ReturnType<typeof withHeaders<typeof ErrorSchema>>>;
  const answer = (status: ErrorStatus) =>
    withHeaders(ErrorSchema, ERROR_DESCRIPTIONS[status], ...(ERROR_HEADERS[status] ?? []));
  for (const status of statuses) out[status] = answer(status);
  if ((statuses as ErrorStatus[]).includes(401)) {
    out[429] = answer(429);
    out[503] = answer(503);
  }
  return out;
}

export const secured: Record<string, string[]>[] = [{ bearerAuth: [] }, { sigv4: [] }];
