import { createRoute } from "@hono/zod-openapi";
import { cancelRun } from "../jobs/index.js";
import { getTenantRun } from "../jobs/queries.js";
import { noBody } from "./body.js";
import { runDto } from "./dto.js";
import { notFound } from "./errors.js";
import { runsPage } from "./pages.js";
import { runFilterFrom } from "./query-params.js";
import {
  checkedJobId,
  errors,
  historyOf,
  json,
  newRouter,
  type RouterDeps,
  secured,
  tenantOf,
} from "./router.js";
import { LIMITS } from "./schemas/common.js";
import { JobIdParams } from "./schemas/jobs.js";
import { RunPageSchema, RunParams, RunSchema, RunsQuery } from "./schemas/runs.js";

const listRuns = createRoute({
  method: "get",
  path: "/jobs/{id}/runs",
  operationId: "listRuns",
  tags: ["runs"],
  summary:
    "A job's runs, newest occurrence first; by status and occurrence range (a deleted job's too, until they expire)",
  security: secured,
  request: { params: JobIdParams, query: RunsQuery },
  responses: { 200: json(RunPageSchema, "One page"), ...errors(400, 401, 404) },
});

const getRun = createRoute({
  method: "get",
  path: "/jobs/{id}/runs/{runId}",
  operationId: "getRun",
  tags: ["runs"],
  summary: "One run: did it run, when, where, and why not",
  security: secured,
  request: { params: RunParams },
  responses: { 200: json(RunSchema, "The run"), ...errors(401, 404) },
});

const cancelRunRoute = createRoute({
  method: "post",
  path: "/jobs/{id}/runs/{runId}/cancel",
  operationId: "cancelRun",
  tags: ["runs"],
  summary:
    "Cancel one run: a queued run ends cancelled now, a running one within a heartbeat (its handler's signal aborts); no retry follows",
  security: secured,
  middleware: [noBody] as const,
  request: { params: RunParams },
  responses: {
    200: json(
      RunSchema,
      "The run: cancelled, or running with cancelRequestedAt set until its worker ends it; a repeat answers the same",
    ),
    ...errors(400, 401, 404, 409, 503),
  },
});

/** A job's runs: the list, one run, and cancelling one. */
export function runsRouter({ engine }: RouterDeps) {
  const router = newRouter();

  router.openapi(listRuns, async (c) => {
    const { id } = c.req.valid("param");
    const query = c.req.valid("query");
    const { filter, binding } = runFilterFrom(query);
    await historyOf(engine, c, id);
    const page = await runsPage(engine, id, {
      limit: query.limit ?? LIMITS.pageSize.default,
      filter,
      binding,
      ...(query.cursor ? { cursor: query.cursor } : {}),
    });
    return c.json({ items: page.items.map(runDto), nextCursor: page.nextCursor }, 200);
  });

  router.openapi(getRun, async (c) => {
    const { id, runId } = c.req.valid("param");
    const run = await getTenantRun(engine, tenantOf(c), runId);
    if (run.jobId !== id) throw notFound(`run ${runId.slice(0, 100)} not found`);
    return c.json(runDto(run), 200);
  });

  router.openapi(cancelRunRoute, async (c) => {
    const { id, runId } = c.req.valid("param");
    const run = await cancelRun(engine, tenantOf(c), checkedJobId(id), runId);
    return c.json(runDto(run), 200);
  });

  return router;
}
