import { OpenAPIHono } from "@hono/zod-openapi";
import type { Engine } from "../engine.js";
import type { JobTypeCatalog } from "../job-types/registry.js";
import { METRICS, TENANT_LOG_EVENTS } from "../observability.js";
import { RequestRateLimiter } from "../quotas/request-rate.js";
import { CapacityMeter, meterCapacity, withCapacityMeter } from "../storage/capacity-meter.js";
import { asyncRunsRouter, RUN_TOKEN_PATH } from "./async-runs-router.js";
import { type Authenticator, isValidTenantId } from "./auth.js";
import { BODY_OVERHEAD_BYTES, jsonBody } from "./body.js";
import { type ConsoleOptions, consoleRouter, isConsolePath } from "./console-router.js";
import { deadLettersRouter } from "./dead-letters-router.js";
import { docsRouter } from "./docs-router.js";
import { ApiError, httpAnswerOf, isBusyAnswer, notFound } from "./errors.js";
import { schemaFailure } from "./issues.js";
import { jobsBatchRouter } from "./jobs-batch-router.js";
import { jobsRouter } from "./jobs-router.js";
import { previewsRouter } from "./previews-router.js";
import { OPENAPI_PATH, PUBLIC_GET_PATHS } from "./public-paths.js";
import { quotasRouter } from "./quotas-router.js";
import type { ApiEnv, RouterDeps } from "./router.js";
import { runsRouter } from "./runs-router.js";
import { serviceRouter } from "./service-router.js";
import { refuseUndeclaredQuery } from "./undeclared-query.js";
import { webhookSecretRouter } from "./webhook-secret-router.js";

export interface ApiOptions {
  /** Clients, tables, queues, settings and the clock every request uses. */
  readonly engine: Engine;
  /** The accepted job types (the built-ins, demo types where enabled, the registered custom types) and their payload schemas. */
  readonly jobTypes: JobTypeCatalog;
  readonly authenticate: Authenticator;
  /** The web console at /console; without it, /console is an unknown route. */
  readonly console?: ConsoleOptions;
  /** Tenants that may read and set any tenant's quota override (`ADMIN_TENANTS`); default none. */
  readonly adminTenants?: readonly string[];
  /**
   * The monotonic clock the request-rate buckets refill by (RequestRateLimiter); default
   * performance.now. A test holds it still so a refill does not depend on how long requests took.
   */
  readonly elapsedMs?: () => number;
}

const PUBLIC_PATHS: ReadonlySet<string> = new Set(PUBLIC_GET_PATHS);

/**
 * The HTTP API as one Hono app, served by the API Lambda (API Gateway HTTP
 * API, payload v2) and by a Node server locally. The app authenticates, turns
 * every failure into the one error shape, and serves the OpenAPI document;
 * one router per resource (./*-router.ts) translates its requests: validation
 * is in the schemas and ./requests.ts, behaviour in shared/jobs.
 */
export function createApiApp(options: ApiOptions): OpenAPIHono<ApiEnv> {
  const { engine, authenticate } = options;
  const requestRate = new RequestRateLimiter(engine, options.elapsedMs);
  meterCapacity(engine.doc);
  const deps: RouterDeps = {
    engine,
    jobTypes: options.jobTypes,
    body: jsonBody(engine.settings.maxPayloadBytes + BODY_OVERHEAD_BYTES),
    adminTenants: new Set(options.adminTenants ?? []),
    requestRate,
  };

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
    const reads = c.req.method === "GET" || c.req.method === "HEAD";
    // A create takes its key as the header or as `idempotencyKey` (equal when both are sent); the
    // other keyed routes take the header only.
    const keyField =
      c.req.header("Idempotency-Key") === undefined ? "idempotencyKey" : "Idempotency-Key";
    const answer = httpAnswerOf(error, { writes: !reads, keyField });
    if (answer.status === 429) {
      // Counted per tenant by the stack's Contributor Insights rule (TENANT_LOG_EVENTS).
      engine.obs.log.warn(TENANT_LOG_EVENTS.requestThrottled, {
        tenantId: c.get("tenantId") ?? null,
        code: answer.body.error.code,
        reason: answer.body.error.message,
        method: c.req.method,
        path: c.req.path,
      });
    }
    if (isBusyAnswer(answer)) {
      // A 503 API Gateway counts among its 5xx: counted for the server-error alarm to leave out,
      // and logged as the refusal it is, not as the API's failure.
      engine.obs.metrics.add(METRICS.busyAnswers, 1, "Count");
      engine.obs.log.warn("request busy", {
        tenantId: c.get("tenantId") ?? null,
        reason: answer.body.error.message,
        method: c.req.method,
        path: c.req.path,
      });
    } else if (answer.status >= 500) {
      engine.obs.log.error("api request failed", {
        // Null for a request that failed before it was authenticated, or an async target's call
        // whose token named no run.
        tenantId: c.get("tenantId") ?? null,
        method: c.req.method,
        path: c.req.path,
        error: error instanceof Error ? (error.stack ?? error.message) : String(error),
      });
    }
    return c.json(answer.body, answer.status, answer.headers);
  });

  app.notFound((c) => {
    const allowed = methodsFor(app, c.req.path);
    const { context } =
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
    return c.json(context.body, context.status, context.headers);
  });

  // A request is charged for what it read and wrote once it has run, answered or failed: a listing
  // that read thousands of units, or a delete that wrote them to the large jobs it was after, costs
  // its tenant that many tokens more, so its next requests wait (docs/api.md). `tenantOf` is read
  // then: undefined (a run token that names no run) charges none.
  const chargedForUnits = async (tenantOf: () => string | undefined, next: () => Promise<void>) => {
    const meter = new CapacityMeter();
    try {
      await withCapacityMeter(meter, next);
    } finally {
      const units = meter.close();
      const tenantId = tenantOf();
      if (tenantId !== undefined) requestRate.charge(tenantId, units);
    }
  };

  const isPublic = (path: string) =>
    PUBLIC_PATHS.has(path) || (options.console !== undefined && isConsolePath(path));

  // Answers hold tenant data (a job's target headers are its receiver's credentials, a payload
  // whatever the tenant put in it): no cache may keep them, a browser's disk cache included, as
  // none keeps the webhook secret. The public documents and the console set their own.
  app.use("*", async (c, next) => {
    await next();
    if (!isPublic(c.req.path) && !c.res.headers.has("Cache-Control")) {
      c.res.headers.set("Cache-Control", "no-store");
    }
  });

  app.use("*", async (c, next) => {
    if (isPublic(c.req.path)) return next();
    // An async target's run routes authenticate by the run token it was given, and take from its
    // run's tenant's bucket once the token is verified (./async-runs-router.ts), which names the
    // tenant their reads are charged to: a completion reads its job and fans out to its
    // dependents (up to 1,000 jobs read whole), as much as a listing.
    if (c.req.method === "POST" && RUN_TOKEN_PATH.test(c.req.path)) {
      return chargedForUnits(() => c.get("tenantId"), next);
    }
    const tenantId = await authenticate({ header: (name) => c.req.header(name), env: c.env });
    if (tenantId === null || !isValidTenantId(tenantId)) {
      throw new ApiError(401, "unauthorized", "missing or unknown credentials", {
        headers: { "WWW-Authenticate": 'Bearer realm="scheduler"' },
      });
    }
    // Set before the rate is taken, so that its 429's `request throttled` line names the tenant.
    c.set("tenantId", tenantId);
    await requestRate.take(tenantId);
    await chargedForUnits(() => tenantId, next);
  });

  // After authentication, as a route's own query schema is checked.
  app.use("*", refuseUndeclaredQuery(app.openAPIRegistry));

  // The document lists the operations in the order mounted here.
  app.route("/", serviceRouter());
  app.route("/", jobsRouter(deps));
  app.route("/", jobsBatchRouter(deps));
  app.route("/", runsRouter(deps));
  app.route("/", asyncRunsRouter(deps));
  app.route("/", previewsRouter(deps));
  app.route("/", deadLettersRouter(deps));
  app.route("/", webhookSecretRouter(deps));
  app.route("/", quotasRouter(deps));

  const openApiDocument = serveOpenApiDocument(app);
  app.route("/", docsRouter(openApiDocument));
  if (options.console) {
    app.route("/", consoleRouter(options.console, { clock: engine.clock, log: engine.obs.log }));
  }
  return app;
}

/**
 * GET /openapi.json: the document generated from every mounted route, with the
 * two ways to sign in. Returns it, for the reference page at /docs.
 */
function serveOpenApiDocument(app: OpenAPIHono<ApiEnv>): () => unknown {
  app.openAPIRegistry.registerComponent("securitySchemes", "bearerAuth", {
    type: "http",
    scheme: "bearer",
    description:
      "Local server: a key from SCHEDULER_API_KEYS (key=tenant pairs), or local-dev-key when unset.",
  });
  app.openAPIRegistry.registerComponent("securitySchemes", "runToken", {
    type: "http",
    scheme: "bearer",
    description:
      "Only POST /runs/{runId}/heartbeat and /complete: the run token an async target's delivery carried (X-Scheduler-Run-Token), made by the scheduler for that delivery and good only for that run under the start that delivered it; not derived from the webhook signing secret. Any token that is not the run's is a 401, whether the run exists or not.",
  });
  app.openAPIRegistry.registerComponent("securitySchemes", "sigv4", {
    type: "apiKey",
    name: "Authorization",
    in: "header",
    description:
      "On AWS: requests signed with SigV4 (API Gateway IAM authorization); the principal is the tenant.",
  });
  let document: unknown;
  const openApiDocument = () => {
    document ??= app.getOpenAPIDocument({
      openapi: "3.0.3",
      info: {
        title: "Scheduler API",
        version: "1.0.0",
        description:
          'Schedule jobs once (runAt), on a cron schedule in an IANA time zone, or at a fixed interval; follow their runs; replay dead letters. Errors are always {"error": {"code", "message", "field"?}}.',
      },
    });
    return document;
  };
  app.get(OPENAPI_PATH, (c) => c.json(openApiDocument()));
  return openApiDocument;
}

/** The methods routed at a path, for 405 and its Allow header. */
function methodsFor(app: OpenAPIHono<ApiEnv>, path: string): string[] {
  const methods = new Set<string>();
  for (const route of app.routes) {
    if (route.method === "ALL") continue;
    // A parameter is a whole segment (`/jobs/:id`); a colon inside one is literal (`/jobs:batch`).
    const pattern = new RegExp(`^${route.path.replace(/\/:[^/]+/g, "/[^/]+")}$`);
    if (pattern.test(path)) methods.add(route.method);
  }
  if (methods.has("GET")) methods.add("HEAD");
  return [...methods].sort();
}
