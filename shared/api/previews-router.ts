import { createRoute } from "@hono/zod-openapi";
import { checkNewDependent } from "../jobs/dependencies.js";
import { firstOccurrence, isAfterSchedule } from "../schedule/index.js";
import { earliestUnstartedRun, plannedTimesOfRuns } from "../storage/job-queries.js";
import { checkedNewEnd } from "./end-conditions.js";
import {
  displayZoneOf,
  jobPreviewStart,
  newJobPreviewStart,
  previewOf,
  previewOfJob,
  queuedRange,
  withPlannedTimes,
  withQueuedPlannedTimes,
} from "./preview.js";
import { instantParam, queryInstantParam } from "./query-params.js";
import { parseScheduleInput } from "./requests.js";
import { errors, jobOf, json, newRouter, type RouterDeps, secured, tenantOf } from "./router.js";
import { LIMITS } from "./schemas/common.js";
import { JobIdParams } from "./schemas/jobs.js";
import { PreviewQuery, PreviewRequestSchema, PreviewSchema } from "./schemas/previews.js";

const previewJob = createRoute({
  method: "get",
  path: "/jobs/{id}/preview",
  operationId: "previewJob",
  tags: ["schedules"],
  summary: "The job's next occurrences",
  security: secured,
  request: { params: JobIdParams, query: PreviewQuery },
  responses: { 200: json(PreviewSchema, "The next occurrences"), ...errors(400, 401, 404) },
});

/** A schedule's next occurrences: a stored job's, or one given to check before trusting it. */
export function previewsRouter({ engine, body }: RouterDeps) {
  const previewSchedule = createRoute({
    method: "post",
    path: "/schedules/preview",
    operationId: "previewSchedule",
    tags: ["schedules"],
    summary: "Check a schedule before trusting it: its next occurrences, or what is wrong",
    description:
      "Refuses what `POST /jobs` would refuse of the schedule and its end, with the same 400: an `after` schedule's upstreams are checked as a create checks them (`schedule.after.jobs`; another tenant's job is answered as one that does not exist).",
    security: secured,
    middleware: [body] as const,
    request: {
      body: { content: { "application/json": { schema: PreviewRequestSchema } }, required: true },
    },
    responses: {
      200: json(PreviewSchema, "The next occurrences"),
      ...errors(400, 401, 413, 415),
    },
  });
  const router = newRouter();

  router.openapi(previewJob, async (c) => {
    const query = c.req.valid("query");
    const now = engine.clock();
    const asked = query.from === undefined ? now : queryInstantParam("from", query.from);
    const job = await jobOf(engine, c, c.req.valid("param").id);
    // Before now, only what the job has not run yet is shown: its queued runs no worker started.
    const unstarted =
      asked < now ? await earliestUnstartedRun(engine, job.jobId, asked, now) : null;
    const from = jobPreviewStart(asked, now, job.nextRunAt, unstarted);
    const count = query.count ?? LIMITS.previewCount.default;
    const pending = { job, now, misfireGraceMs: engine.settings.misfireGraceMs };
    const preview = withPlannedTimes(job, previewOfJob(job, from, count, { pending }));
    // Occurrences already queued run at the planned time they were claimed with, which an edit
    // of the window since does not change: their runs say when.
    const queued = queuedRange(job, preview);
    if (queued === null) return c.json(preview, 200);
    const planned = await plannedTimesOfRuns(engine, job.jobId, queued.from, queued.through);
    return c.json(withQueuedPlannedTimes(preview, planned), 200);
  });

  router.openapi(previewSchedule, async (c) => {
    const request = c.req.valid("json");
    const now = engine.clock();
    const asked = request.from === undefined ? now : instantParam("from", request.from);
    const schedule = parseScheduleInput(request.schedule, engine.settings, now);
    const first = isAfterSchedule(schedule) ? null : firstOccurrence(schedule, now);
    const from = newJobPreviewStart(asked, now, first);
    const count = request.count ?? LIMITS.previewCount.default;
    const zone = displayZoneOf(request.schedule);
    // Ended as a job created now with this end would be.
    const endAt = checkedNewEnd(request, schedule, now) ?? null;
    // Upstreams a create would refuse are refused here too, with its answer.
    await checkNewDependent(engine, tenantOf(c), schedule);
    if (request.endAt === undefined && request.maxRuns === undefined)
      return c.json(previewOf(schedule, zone, from, count), 200);
    const asJob = {
      schedule,
      endAt,
      maxRuns: request.maxRuns ?? null,
      occurrencesQueued: 0,
      nextRunAt: first === null ? null : first.toISOString(),
    };
    return c.json(previewOfJob(asJob, from, count, { zone }), 200);
  });

  return router;
}
