import { OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import {
  cancelJob,
  createJob,
  editJob,
  pauseJob,
  replayDeadLetter,
  requestHash,
  resumeJob,
  triggerJob,
} from "../jobs/index.js";
import { getTenantJob, getTenantRun } from "../jobs/queries.js";
import { JOB_ID_PATTERN } from "../keys.js";
import type { Job, JobStatus } from "../model.js";
import { ValidationError } from "../validation.js";
import { rotateWebhookSecret, tenantWebhookSecrets } from "../webhooks/secrets.js";
import { type Authenticator, isValidTenantId } from "./auth.js";
import { BODY_OVERHEAD_BYTES } from "./body.js";
import { jobDto, runDto } from "./dto.js";
import { ApiError, etagOf, notFound, toApiError } from "./errors.js";
import { schemaFailure } from "./issues.js";
import { deadLettersPage, jobsPage, runsPage } from "./pages.js";
import { displayZoneOf, previewOf } from "./preview.js";
import { jobChangesFrom, newJobFrom, parseIfMatch, parseScheduleInput } from "./requests.js";
import { apiRoutes } from "./routes.js";
import { LIMITS } from "./schemas.js";

export interface ApiOptions {
  /** Clients, tables, queues, settings and the clock every request uses. */
  readonly engine: Engine;
  /** The accepted job `type`s: the built-ins plus the names of registered custom handlers. */
  readonly jobTypes: readonly string[];
  readonly authenticate: Authenticator;
}

export interface ApiEnv {
  Variables: { tenantId: string };
}

export const OPENAPI_PATH = "/openapi.json";
const PUBLIC_PATHS = new Set(["/health", OPENAPI_PATH]);

/**
 * The HTTP API as one Hono app, served by the API Lambda (API Gateway HTTP
 * API, payload v2) and by a Node server locally. Handlers only translate:
 * validation is in the schemas and ./requests.ts, behaviour in shared/jobs.
 */
export function createApiApp(options: ApiOptions): OpenAPIHono<ApiEnv> {
  const { engine, authenticate } = options;
  const [firstType, ...otherTypes] = [...new Set(options.jobTypes)];
  if (firstType === undefined) throw new Error("createApiApp: no job types given");
  const routes = apiRoutes({
    jobTypes: [firstType, ...otherTypes],
    maxBodyBytes: engine.settings.maxPayloadBytes + BODY_OVERHEAD_BYTES,
  });

  const app = new OpenAPIHono<ApiEnv>({
    defaultHook: (result) => {
      if (!result.success) {
        throw schemaFailure(
          result.error.issues,
          result.target,
          "data" in result ? result.data : undefined,
        );
      }
    },
  });

  app.onError((error, c) => {
    const apiError = toApiError(error);
    if (apiError.status >= 500) {
      engine.obs.log.error("api request failed", {
        method: c.req.method,
        path: c.req.path,
        error: error instanceof Error ? (error.stack ?? error.message) : String(error),
      });
    }
    return c.json(apiError.body(), apiError.status, apiError.details.headers);
  });

  app.notFound((c) => {
    const allowed = methodsFor(app, c.req.path);
    const error =
      allowed.length > 0
        ? new ApiError(
            405,
            "method_not_allowed",
            `${c.req.method} is not allowed here; use ${allowed.join(", ")}`,
            {
              headers: { Allow: allowed.join(", ") },
            },
          )
        : notFound(`no route for ${c.req.method} ${c.req.path.slice(0, 200)}`);
    return c.json(error.body(), error.status, error.details.headers);
  });

  app.use("*", async (c, next) => {
    if (PUBLIC_PATHS.has(c.req.path)) return next();
    const tenantId = await authenticate({ header: (name) => c.req.header(name), env: c.env });
    if (tenantId === null || !isValidTenantId(tenantId)) {
      throw new ApiError(401, "unauthorized", "missing or unknown credentials", {
        headers: { "WWW-Authenticate": 'Bearer realm="scheduler"' },
      });
    }
    c.set("tenantId", tenantId);
    await next();
  });

  const tenantOf = (c: Context<ApiEnv>) => c.get("tenantId");
  const jobOf = (c: Context<ApiEnv>, id: string): Promise<Job> => {
    // An id no job can have must not reach a storage key.
    if (!JOB_ID_PATTERN.test(id)) throw notFound(`job ${id.slice(0, 64)} not found`);
    return getTenantJob(engine, tenantOf(c), id);
  };
  const jobHeaders = (c: Context<ApiEnv>, job: Job) => {
    c.header("ETag", etagOf(job.version));
  };

  app.openapi(routes.health, (c) => c.json({ status: "ok" as const }, 200));

  app.openapi(routes.createJob, async (c) => {
    const body = c.req.valid("json");
    const headerKey = c.req.valid("header")["Idempotency-Key"];
    const { idempotencyKey: bodyKey, ...definition } = body;
    if (headerKey !== undefined && bodyKey !== undefined && headerKey !== bodyKey) {
      throw new ValidationError([
        {
          field: "idempotencyKey",
          message: "differs from the Idempotency-Key header; send one or make them equal",
        },
      ]);
    }
    const key = headerKey ?? bodyKey;
    const newJob = newJobFrom(body, tenantOf(c), engine.clock(), engine.settings);
    const { job, created } = await createJob(
      engine,
      newJob,
      key === undefined ? {} : { idempotency: { key, requestHash: requestHash(definition) } },
    );
    c.header("Location", `/jobs/${job.jobId}`);
    jobHeaders(c, job);
    return created ? c.json(jobDto(job), 201) : c.json(jobDto(job), 200);
  });

  app.openapi(routes.listJobs, async (c) => {
    const query = c.req.valid("query");
    const page = await jobsPage(engine, tenantOf(c), {
      ...(query.status ? { status: query.status.toUpperCase() as JobStatus } : {}),
      limit: query.limit ?? LIMITS.pageSize.default,
      ...(query.cursor ? { cursor: query.cursor } : {}),
    });
    return c.json({ items: page.items.map(jobDto), nextCursor: page.nextCursor }, 200);
  });

  app.openapi(routes.getJob, async (c) => {
    const job = await jobOf(c, c.req.valid("param").id);
    jobHeaders(c, job);
    return c.json(jobDto(job), 200);
  });

  app.openapi(routes.editJob, async (c) => {
    const { id } = c.req.valid("param");
    const job = await jobOf(c, id);
    const expected = parseIfMatch(c.req.valid("header")["If-Match"]);
    const changes = jobChangesFrom(c.req.valid("json"), job, engine.clock(), engine.settings);
    const edited = await editJob(engine, tenantOf(c), id, expected, changes);
    jobHeaders(c, edited);
    return c.json(jobDto(edited), 200);
  });

  const lifecycle = [
    [routes.pauseJob, pauseJob],
    [routes.resumeJob, resumeJob],
    [routes.cancelJob, cancelJob],
  ] as const;
  for (const [route, change] of lifecycle) {
    app.openapi(route, async (c) => {
      const { id } = c.req.valid("param");
      await jobOf(c, id);
      const job = await change(engine, tenantOf(c), id);
      jobHeaders(c, job);
      return c.json(jobDto(job), 200);
    });
  }

  app.openapi(routes.triggerJob, async (c) => {
    const { id } = c.req.valid("param");
    await jobOf(c, id);
    const run = await triggerJob(engine, tenantOf(c), id);
    c.header("Location", `/jobs/${run.jobId}/runs/${run.runId}`);
    return c.json(runDto(run), 202);
  });

  app.openapi(routes.listRuns, async (c) => {
    const { id } = c.req.valid("param");
    const query = c.req.valid("query");
    await jobOf(c, id);
    const page = await runsPage(engine, id, {
      limit: query.limit ?? LIMITS.pageSize.default,
      ...(query.cursor ? { cursor: query.cursor } : {}),
    });
    return c.json({ items: page.items.map(runDto), nextCursor: page.nextCursor }, 200);
  });

  app.openapi(routes.getRun, async (c) => {
    const { id, runId } = c.req.valid("param");
    const run = await getTenantRun(engine, tenantOf(c), runId);
    if (run.jobId !== id) throw notFound(`run ${runId.slice(0, 100)} not found`);
    return c.json(runDto(run), 200);
  });

  app.openapi(routes.previewJob, async (c) => {
    const job = await jobOf(c, c.req.valid("param").id);
    const count = c.req.valid("query").count ?? LIMITS.previewCount.default;
    return c.json(previewOf(job.schedule, displayZoneOf(job.schedule), engine.clock(), count), 200);
  });

  app.openapi(routes.previewSchedule, (c) => {
    const body = c.req.valid("json");
    const now = engine.clock();
    const schedule = parseScheduleInput(body.schedule, engine.settings, now);
    const count = body.count ?? LIMITS.previewCount.default;
    return c.json(previewOf(schedule, displayZoneOf(body.schedule), now, count), 200);
  });

  app.openapi(routes.listDeadLetters, async (c) => {
    const query = c.req.valid("query");
    const page = await deadLettersPage(engine, tenantOf(c), {
      limit: query.limit ?? LIMITS.pageSize.default,
      ...(query.cursor ? { cursor: query.cursor } : {}),
    });
    return c.json({ items: page.items.map(runDto), nextCursor: page.nextCursor }, 200);
  });

  app.openapi(routes.replayDeadLetter, async (c) => {
    const run = await replayDeadLetter(engine, tenantOf(c), c.req.valid("param").runId);
    c.header("Location", `/jobs/${run.jobId}/runs/${run.runId}`);
    return c.json(runDto(run), 202);
  });

  app.openapi(routes.getWebhookSecret, async (c) => {
    const secrets = await tenantWebhookSecrets(engine, tenantOf(c));
    c.header("Cache-Control", "no-store");
    return c.json({ secret: secrets.current }, 200);
  });

  app.openapi(routes.rotateWebhookSecret, async (c) => {
    const secrets = await rotateWebhookSecret(engine, tenantOf(c)).catch((error: unknown) => {
      if (!(error instanceof ConcurrentUpdateError)) throw error;
      throw new ApiError(503, "busy", "the webhook secret is being rotated by another request", {
        headers: { "Retry-After": "1" },
      });
    });
    c.header("Cache-Control", "no-store");
    return c.json({ secret: secrets.current }, 200);
  });

  app.openAPIRegistry.registerComponent("securitySchemes", "bearerAuth", {
    type: "http",
    scheme: "bearer",
    description:
      "Local server: a key from SCHEDULER_API_KEYS (key=tenant pairs), or local-dev-key when unset.",
  });
  app.openAPIRegistry.registerComponent("securitySchemes", "sigv4", {
    type: "apiKey",
    name: "Authorization",
    in: "header",
    description:
      "On AWS: requests signed with SigV4 (API Gateway IAM authorization); the principal is the tenant.",
  });
  let document: unknown;
  app.get(OPENAPI_PATH, (c) => {
    document ??= app.getOpenAPIDocument({
      openapi: "3.0.3",
      info: {
        title: "Scheduler API",
        version: "1.0.0",
        description:
          'Schedule jobs once (runAt), on a cron schedule in an IANA time zone, or at a fixed interval; follow their runs; replay dead letters. Errors are always {"error": {"code", "message", "field"?}}.',
      },
    });
    return c.json(document);
  });

  return app;
}

/** The methods routed at a path, for 405 and its Allow header. */
function methodsFor(app: OpenAPIHono<ApiEnv>, path: string): string[] {
  const methods = new Set<string>();
  for (const route of app.routes) {
    if (route.method === "ALL") continue;
    const pattern = new RegExp(`^${route.path.replace(/:[^/]+/g, "[^/]+")}$`);
    if (pattern.test(path)) methods.add(route.method);
  }
  if (methods.has("GET")) methods.add("HEAD");
  return [...methods].sort();
}
