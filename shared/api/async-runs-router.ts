import { createRoute } from "@hono/zod-openapi";
import type { Context } from "hono";
import {
  type AsyncCompletion,
  completeAsyncRun,
  heartbeatAsyncRun,
} from "../execution/async-runs.js";
import type { Run } from "../model.js";
import { runDto } from "./dto.js";
import { ApiError, invalid } from "./errors.js";
import { type ApiEnv, errors, json, newRouter, type RouterDeps } from "./router.js";
import {
  AsyncRunParams,
  type CompleteRunBody,
  CompleteRunSchema,
  HeartbeatSchema,
} from "./schemas/async-runs.js";
import { RunSchema } from "./schemas/runs.js";

/** Paths an async target calls with its run token instead of tenant credentials. */
export const RUN_TOKEN_PATH = /^\/runs\/[^/]+\/(heartbeat|complete)$/;

/** The run token: `Authorization: Bearer <token>`. */
const runTokenSecurity: Record<string, string[]>[] = [{ runToken: [] }];

const heartbeatRoute = createRoute({
  method: "post",
  path: "/runs/{runId}/heartbeat",
  operationId: "heartbeatRun",
  tags: ["long jobs"],
  summary:
    "An async target's heartbeat: extends its run's lease (authenticated by the run token, not tenant credentials)",
  security: runTokenSecurity,
  request: { params: AsyncRunParams },
  responses: {
    200: json(HeartbeatSchema, "The lease's new end"),
    // A runId longer than any run's is refused by its schema (naming runId) before the token is read.
    ...errors(400, 401, 409, 429),
  },
});

const completeRoute = createRoute({
  method: "post",
  path: "/runs/{runId}/complete",
  operationId: "completeRun",
  tags: ["long jobs"],
  summary:
    "An async target completes its run: succeeded, or failed with the job's retry policy (authenticated by the run token)",
  security: runTokenSecurity,
  request: {
    params: AsyncRunParams,
    body: { content: { "application/json": { schema: CompleteRunSchema } }, required: true },
  },
  responses: {
    200: json(RunSchema, "The run as it ended"),
    ...errors(400, 401, 404, 409, 413, 415, 429),
  },
});

function runTokenOf(c: Context): string {
  const match = /^Bearer +(\S+)\s*$/i.exec(c.req.header("authorization") ?? "");
  const token = match?.[1];
  if (token === undefined) {
    throw new ApiError(401, "unauthorized", "send the run token as Authorization: Bearer <token>", {
      headers: { "WWW-Authenticate": 'Bearer realm="scheduler-run"' },
    });
  }
  return token;
}

function completionOf(body: CompleteRunBody): AsyncCompletion {
  if (body.status === "succeeded") {
    for (const field of ["error", "retryable", "retryAfterSeconds"] as const) {
      if (body[field] !== undefined)
        throw invalid([{ field, message: 'only with status "failed"' }]);
    }
    return { status: "succeeded", result: body.result };
  }
  if (body.result !== undefined)
    throw invalid([{ field: "result", message: 'only with status "succeeded"' }]);
  if (body.retryable === false && body.retryAfterSeconds !== undefined)
    throw invalid([{ field: "retryAfterSeconds", message: "only with a retryable failure" }]);
  return {
    status: "failed",
    ...(body.error !== undefined ? { error: body.error } : {}),
    ...(body.retryable !== undefined ? { retryable: body.retryable } : {}),
    ...(body.retryAfterSeconds !== undefined
      ? { retryAfterMs: body.retryAfterSeconds * 1000 }
      : {}),
  };
}

/** The routes an async target uses to keep and end the run it took over. */
export function asyncRunsRouter({ engine, body, requestRate }: RouterDeps) {
  const router = newRouter();
  // A target's calls are its tenant's requests: counted once its token names the run, before any
  // write. The request is the run's tenant's from then on, so a 429 it is answered names the tenant
  // in the `request throttled` line (TENANT_LOG_EVENTS), as the tenant's own requests do.
  const chargeFor = (c: Context<ApiEnv>) => (run: Run) => {
    c.set("tenantId", run.tenantId);
    return requestRate.take(run.tenantId);
  };

  router.openapi(heartbeatRoute, async (c) => {
    const { runId } = c.req.valid("param");
    const beat = await heartbeatAsyncRun(engine, runId, runTokenOf(c), chargeFor(c));
    return c.json({ leaseUntil: beat.leaseUntil.toISOString(), timesOutAt: beat.timesOutAt }, 200);
  });

  router.openapi({ ...completeRoute, middleware: [body] as const }, async (c) => {
    const { runId } = c.req.valid("param");
    const token = runTokenOf(c);
    const run = await completeAsyncRun(
      engine,
      runId,
      token,
      completionOf(c.req.valid("json")),
      chargeFor(c),
    );
    return c.json(runDto(run), 200);
  });

  return router;
}
