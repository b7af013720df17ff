import { createRoute } from "@hono/zod-openapi";
import { replayDeadLetter } from "../jobs/index.js";
import { noBody } from "./body.js";
import { runDto } from "./dto.js";
import { deadLettersPage } from "./pages.js";
import {
  errors,
  json,
  newRouter,
  type RouterDeps,
  secured,
  tenantOf,
  withHeaders,
} from "./router.js";
import { LIMITS, PageQuery } from "./schemas/common.js";
import { DeadLetterParams, ReplayHeaders, RunPageSchema, RunSchema } from "./schemas/runs.js";

const listDeadLetters = createRoute({
  method: "get",
  path: "/dead-letters",
  operationId: "listDeadLetters",
  tags: ["runs"],
  summary: "Dead runs not yet replayed, newest first",
  security: secured,
  request: { query: PageQuery },
  responses: { 200: json(RunPageSchema, "One page"), ...errors(400, 401) },
});

const replayDeadLetterRoute = createRoute({
  method: "post",
  path: "/dead-letters/{runId}/replay",
  operationId: "replayDeadLetter",
  tags: ["runs"],
  summary: "Run a dead occurrence again, as its next attempt",
  description:
    "The dead run leaves the dead-letter list and its new attempt is queued. While the job is paused the new attempt waits, queued, and runs after resume; a cancelled job's dead letters are refused (409).",
  security: secured,
  middleware: [noBody] as const,
  request: { params: DeadLetterParams, headers: ReplayHeaders },
  responses: {
    202: withHeaders(RunSchema, "The new run; Location names it", "Location"),
    200: withHeaders(
      RunSchema,
      "The run an earlier replay with the same Idempotency-Key queued; Location names it",
      "Location",
    ),
    ...errors(400, 401, 404, 409),
  },
});

/** The caller's dead runs: list them, replay one. */
export function deadLettersRouter({ engine }: RouterDeps) {
  const router = newRouter();

  router.openapi(listDeadLetters, async (c) => {
    const query = c.req.valid("query");
    const page = await deadLettersPage(engine, tenantOf(c), {
      limit: query.limit ?? LIMITS.pageSize.default,
      ...(query.cursor ? { cursor: query.cursor } : {}),
    });
    return c.json({ items: page.items.map(runDto), nextCursor: page.nextCursor }, 200);
  });

  router.openapi(replayDeadLetterRoute, async (c) => {
    const { run, earlier } = await replayDeadLetter(
      engine,
      tenantOf(c),
      c.req.valid("param").runId,
      c.req.valid("header")["Idempotency-Key"],
    );
    c.header("Location", `/jobs/${run.jobId}/runs/${run.runId}`);
    return earlier ? c.json(runDto(run), 200) : c.json(runDto(run), 202);
  });

  return router;
}
