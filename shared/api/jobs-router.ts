import { createRoute } from "@hono/zod-openapi";
import { VersionMismatchError } from "../errors.js";
import {
  cancelJob,
  createJob,
  deleteJob,
  editJob,
  idempotentCreate,
  pauseJob,
  requestHash,
  resumeJob,
  triggerJobWithKey,
} from "../jobs/index.js";
import { committedJobAsItStands, jobAsItStands } from "../jobs/queries.js";
import type { Job, JobStatus } from "../model.js";
import { ValidationError } from "../validation.js";
import { noBody, optionalBody } from "./body.js";
import { newJobOrRepeat } from "./create-repeat.js";
import { jobDto, jobsJson, runDto } from "./dto.js";
import { jobsPage } from "./pages.js";
import { jobChangesFrom, newJobFrom, parseIfMatch } from "./requests.js";
import {
  errors,
  jobOf,
  json,
  newRouter,
  type RouterDeps,
  secured,
  setJobHeaders,
  tenantOf,
  withHeaders,
} from "./router.js";
import { LIMITS } from "./schemas/common.js";
import { jobPayloadsSchema } from "./schemas/job-types.js";
import {
  CreateHeaders,
  createJobSchema,
  EditHeaders,
  EditJobSchema,
  JobIdParams,
  JobPageSchema,
  JobSchema,
  ListJobsQuery,
  PauseBody,
  TriggerHeaders,
} from "./schemas/jobs.js";
import { RunSchema } from "./schemas/runs.js";

const listJobs = createRoute({
  method: "get",
  path: "/jobs",
  operationId: "listJobs",
  tags: ["jobs"],
  summary: "The caller's jobs, newest first",
  security: secured,
  request: { query: ListJobsQuery },
  responses: { 200: json(JobPageSchema, "One page"), ...errors(400, 401) },
});

const getJob = createRoute({
  method: "get",
  path: "/jobs/{id}",
  operationId: "getJob",
  tags: ["jobs"],
  summary: "One job, with a summary of its newest finished run",
  security: secured,
  request: { params: JobIdParams },
  responses: {
    200: withHeaders(JobSchema, "The job; ETag is its version", "ETag"),
    ...errors(401, 404),
  },
});

function lifecycleRoute(action: "resume" | "cancel", summary: string) {
  return createRoute({
    method: "post",
    path: `/jobs/{id}/${action}`,
    operationId: `${action}Job`,
    tags: ["jobs"],
    summary,
    security: secured,
    middleware: [noBody] as const,
    request: { params: JobIdParams },
    responses: {
      200: withHeaders(JobSchema, "The job; repeating the call changes nothing", "ETag"),
      ...errors(400, 401, 404, 409, 503),
    },
  });
}

const lifecycle = [
  [
    lifecycleRoute(
      "resume",
      "Schedule again; a pending occurrence missed meanwhile follows the misfire policy",
    ),
    resumeJob,
  ],
  [
    lifecycleRoute(
      "cancel",
      "Stop for good; queued runs are cancelled, running runs end cancelled within a heartbeat",
    ),
    cancelJob,
  ],
] as const;

const deleteJobRoute = createRoute({
  method: "delete",
  path: "/jobs/{id}",
  operationId: "deleteJob",
  tags: ["jobs"],
  summary: "Cancel the job and remove it; its run history stays until it expires",
  security: secured,
  middleware: [noBody] as const,
  request: { params: JobIdParams },
  responses: {
    204: { description: "Deleted; a repeat is a 404, as for any job that does not exist" },
    ...errors(400, 401, 404, 503),
  },
});

const triggerJobRoute = createRoute({
  method: "post",
  path: "/jobs/{id}/trigger",
  operationId: "triggerJob",
  tags: ["jobs"],
  summary: "One extra run now, outside the schedule",
  security: secured,
  middleware: [noBody] as const,
  request: { params: JobIdParams, headers: TriggerHeaders },
  responses: {
    202: withHeaders(RunSchema, "The queued run; Location names it", "Location"),
    200: withHeaders(
      RunSchema,
      "The run an earlier trigger with the same idempotency key queued; Location names it",
      "Location",
    ),
    ...errors(400, 401, 404, 409),
  },
});

/** The caller's jobs: create, list, read, edit, pause, resume, cancel, delete, trigger. */
export function jobsRouter({ engine, jobTypes, body }: RouterDeps) {
  const createJobRoute = createRoute({
    method: "post",
    path: "/jobs",
    operationId: "createJob",
    tags: ["jobs"],
    summary: "Schedule a job",
    security: secured,
    middleware: [body] as const,
    request: {
      headers: CreateHeaders,
      body: {
        content: { "application/json": { schema: createJobSchema(jobTypes) } },
        required: true,
      },
    },
    responses: {
      201: withHeaders(JobSchema, "Created; Location names the job", "Location", "ETag"),
      200: withHeaders(
        JobSchema,
        "The job an earlier request with the same idempotency key created",
        "Location",
        "ETag",
      ),
      ...errors(400, 401, 403, 409, 413, 415, 503),
    },
  });
  const editJobRoute = createRoute({
    method: "patch",
    path: "/jobs/{id}",
    operationId: "editJob",
    tags: ["jobs"],
    summary: "Change a job at the version the caller last saw",
    security: secured,
    middleware: [body] as const,
    request: {
      params: JobIdParams,
      headers: EditHeaders,
      body: { content: { "application/json": { schema: EditJobSchema } }, required: true },
    },
    responses: {
      200: withHeaders(
        JobSchema,
        "The edited job, one version up; a repeat of an edit that was written answers the job as it stands",
        "ETag",
      ),
      ...errors(400, 401, 403, 404, 409, 412, 413, 415, 428, 503),
    },
  });
  const pauseJobRoute = createRoute({
    method: "post",
    path: "/jobs/{id}/pause",
    operationId: "pauseJob",
    tags: ["jobs"],
    summary:
      "Stop scheduling; the pending occurrence waits for resume, runs in progress finish or are cancelled",
    security: secured,
    middleware: [optionalBody(body)] as const,
    request: {
      params: JobIdParams,
      body: { content: { "application/json": { schema: PauseBody } }, required: false },
    },
    responses: {
      200: withHeaders(JobSchema, "The job; repeating the call changes nothing", "ETag"),
      ...errors(400, 401, 404, 409, 413, 415, 503),
    },
  });
  const router = newRouter();
  router.openAPIRegistry.register("JobPayloads", jobPayloadsSchema(jobTypes));

  router.openapi(createJobRoute, async (c) => {
    const request = c.req.valid("json");
    const headerKey = c.req.valid("header")["Idempotency-Key"];
    const { idempotencyKey: bodyKey, ...definition } = request;
    if (headerKey !== undefined && bodyKey !== undefined && headerKey !== bodyKey) {
      throw new ValidationError([
        {
          field: "idempotencyKey",
          message: "differs from the Idempotency-Key header; send one or make them equal",
        },
      ]);
    }
    const key = headerKey ?? bodyKey;
    const asked = await newJobOrRepeat(
      engine,
      tenantOf(c),
      key,
      definition,
      engine.clock(),
      (asOf) => newJobFrom(request, tenantOf(c), asOf, engine.settings, jobTypes),
    );
    const { job, created } =
      "repeat" in asked
        ? { job: asked.repeat, created: false }
        : await createJob(
            engine,
            asked.newJob,
            key === undefined
              ? {}
              : { idempotency: idempotentCreate(key, asked.newJob, definition) },
          );
    c.header("Location", `/jobs/${job.jobId}`);
    setJobHeaders(c, job);
    const shown = jobDto(await committedJobAsItStands(engine, job));
    return created ? jobsJson(c, shown, 201) : jobsJson(c, shown, 200);
  });

  router.openapi(listJobs, async (c) => {
    const query = c.req.valid("query");
    const page = await jobsPage(engine, tenantOf(c), {
      ...(query.status ? { status: query.status.toUpperCase() as JobStatus } : {}),
      limit: query.limit ?? LIMITS.pageSize.default,
      ...(query.cursor ? { cursor: query.cursor } : {}),
    });
    return jobsJson(c, { items: page.items.map(jobDto), nextCursor: page.nextCursor }, 200);
  });

  router.openapi(getJob, async (c) => {
    const job = await jobOf(engine, c, c.req.valid("param").id);
    setJobHeaders(c, job);
    return jobsJson(c, jobDto(await jobAsItStands(engine, job)), 200);
  });

  router.openapi(editJobRoute, async (c) => {
    const { id } = c.req.valid("param");
    const job = await jobOf(engine, c, id);
    const expected = parseIfMatch(c.req.valid("header")["If-Match"]);
    const body = c.req.valid("json");
    const hash = requestHash(body);
    // A client's retry of an edit that was written (its answer lost, a 500 after the commit) finds
    // the version that edit wrote, marked as written by this very body at this version: it is
    // answered as the edit was, the job as it stands, not a 412 against its own version.
    if (isEditWritten(job, expected, hash)) {
      setJobHeaders(c, job);
      return jobsJson(c, jobDto(await committedJobAsItStands(engine, job)), 200);
    }
    // The body is checked against the job as it stands: from another version, that check would
    // judge it by a job the caller has not seen, so a stale version is the answer first.
    if (job.version !== expected) throw new VersionMismatchError(expected, job.version);
    const changes = jobChangesFrom(body, job, engine.clock(), engine.settings, jobTypes);
    const edited = await editJob(engine, tenantOf(c), id, expected, changes, {
      requestHash: hash,
    }).catch(async (error: unknown) => {
      // A retry that overtook its first attempt: that attempt committed after the read above.
      if (!(error instanceof VersionMismatchError)) throw error;
      const current = await jobOf(engine, c, id);
      if (!isEditWritten(current, expected, hash)) throw error;
      return current;
    });
    setJobHeaders(c, edited);
    return jobsJson(c, jobDto(await committedJobAsItStands(engine, edited)), 200);
  });

  for (const [route, change] of lifecycle) {
    router.openapi(route, async (c) => {
      const { id } = c.req.valid("param");
      await jobOf(engine, c, id);
      const job = await change(engine, tenantOf(c), id);
      setJobHeaders(c, job);
      return jobsJson(c, jobDto(await committedJobAsItStands(engine, job)), 200);
    });
  }

  router.openapi(pauseJobRoute, async (c) => {
    const { id } = c.req.valid("param");
    const { running } = c.req.valid("json");
    await jobOf(engine, c, id);
    const job = await pauseJob(engine, tenantOf(c), id, running ? { running } : {});
    setJobHeaders(c, job);
    return jobsJson(c, jobDto(await committedJobAsItStands(engine, job)), 200);
  });

  router.openapi(deleteJobRoute, async (c) => {
    const { id } = c.req.valid("param");
    await jobOf(engine, c, id);
    await deleteJob(engine, tenantOf(c), id);
    return c.body(null, 204);
  });

  router.openapi(triggerJobRoute, async (c) => {
    const { id } = c.req.valid("param");
    await jobOf(engine, c, id);
    const key = c.req.valid("header")["Idempotency-Key"];
    const { run, created } = await triggerJobWithKey(engine, tenantOf(c), id, key);
    c.header("Location", `/jobs/${run.jobId}/runs/${run.runId}`);
    return created ? c.json(runDto(run), 202) : c.json(runDto(run), 200);
  });

  return router;
}

/**
 * Whether `job` stands at the version an edit of this body sent at `expected` wrote, and no other
 * edit since: a repeat of that edit (`Job.lastEdit`).
 */
function isEditWritten(job: Job, expected: number, hash: string): boolean {
  return (
    job.version === expected + 1 &&
    job.lastEdit?.from === expected &&
    job.lastEdit.requestHash === hash
  );
}
