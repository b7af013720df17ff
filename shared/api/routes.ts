import { createRoute, type z } from "@hono/zod-openapi";
import { jsonBody } from "./body.js";
import {
  CreateHeaders,
  createJobSchema,
  DeadLetterParams,
  EditHeaders,
  EditJobSchema,
  ErrorSchema,
  HealthSchema,
  JobIdParams,
  JobPageSchema,
  JobSchema,
  ListJobsQuery,
  PageQuery,
  PreviewQuery,
  PreviewRequestSchema,
  PreviewSchema,
  RunPageSchema,
  RunParams,
  RunSchema,
  WebhookSecretSchema,
} from "./schemas.js";

const json = <T extends z.ZodType>(schema: T, description: string) => ({
  content: { "application/json": { schema } },
  description,
});

const ERROR_DESCRIPTIONS = {
  400: "Invalid input: `field` names it, `issues` lists every problem",
  401: "Missing or unknown credentials",
  404: "No such job or run for this tenant",
  409: "Not allowed in the job's current status, or an idempotency or replay conflict",
  412: "If-Match is not the job's current version",
  413: "The body or its payload is over the size limit",
  415: "The body is not application/json",
  428: "If-Match is missing",
  503: "Contention on the job; retry after Retry-After seconds",
} as const;
type ErrorStatus = keyof typeof ERROR_DESCRIPTIONS;

function errors<S extends ErrorStatus>(...statuses: S[]) {
  const out = {} as Record<S, ReturnType<typeof json<typeof ErrorSchema>>>;
  for (const status of statuses) out[status] = json(ErrorSchema, ERROR_DESCRIPTIONS[status]);
  return out;
}

const secured: Record<string, string[]>[] = [{ bearerAuth: [] }, { sigv4: [] }];

export interface RouteOptions {
  readonly jobTypes: readonly [string, ...string[]];
  readonly maxBodyBytes: number;
}

/** Every documented operation; the app registers each with its handler. */
export function apiRoutes({ jobTypes, maxBodyBytes }: RouteOptions) {
  const body = jsonBody(maxBodyBytes);
  return {
    health: createRoute({
      method: "get",
      path: "/health",
      operationId: "health",
      tags: ["service"],
      summary: "Liveness; needs no credentials",
      responses: { 200: json(HealthSchema, "The API is up") },
    }),
    createJob: createRoute({
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
        201: {
          ...json(JobSchema, "Created; Location names the job"),
          headers: { Location: { schema: { type: "string" }, description: "/jobs/{id}" } },
        },
        200: json(JobSchema, "The job an earlier request with the same idempotency key created"),
        ...errors(400, 401, 409, 413, 415, 503),
      },
    }),
    listJobs: createRoute({
      method: "get",
      path: "/jobs",
      operationId: "listJobs",
      tags: ["jobs"],
      summary: "The caller's jobs, newest first",
      security: secured,
      request: { query: ListJobsQuery },
      responses: { 200: json(JobPageSchema, "One page"), ...errors(400, 401) },
    }),
    getJob: createRoute({
      method: "get",
      path: "/jobs/{id}",
      operationId: "getJob",
      tags: ["jobs"],
      summary: "One job, with a summary of its newest finished run",
      security: secured,
      request: { params: JobIdParams },
      responses: { 200: json(JobSchema, "The job; ETag is its version"), ...errors(401, 404) },
    }),
    editJob: createRoute({
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
        200: json(JobSchema, "The edited job, one version up"),
        ...errors(400, 401, 404, 409, 412, 413, 415, 428, 503),
      },
    }),
    pauseJob: lifecycleRoute("pause", "Stop scheduling; the pending occurrence waits for resume"),
    resumeJob: lifecycleRoute(
      "resume",
      "Schedule again; a pending occurrence missed meanwhile follows the misfire policy",
    ),
    cancelJob: lifecycleRoute("cancel", "Stop for good; queued runs are cancelled"),
    triggerJob: createRoute({
      method: "post",
      path: "/jobs/{id}/trigger",
      operationId: "triggerJob",
      tags: ["jobs"],
      summary: "One extra run now, outside the schedule",
      security: secured,
      request: { params: JobIdParams },
      responses: {
        202: json(RunSchema, "The queued run; Location names it"),
        ...errors(401, 404, 409),
      },
    }),
    listRuns: createRoute({
      method: "get",
      path: "/jobs/{id}/runs",
      operationId: "listRuns",
      tags: ["runs"],
      summary: "A job's runs, newest occurrence first",
      security: secured,
      request: { params: JobIdParams, query: PageQuery },
      responses: { 200: json(RunPageSchema, "One page"), ...errors(400, 401, 404) },
    }),
    getRun: createRoute({
      method: "get",
      path: "/jobs/{id}/runs/{runId}",
      operationId: "getRun",
      tags: ["runs"],
      summary: "One run: did it run, when, where, and why not",
      security: secured,
      request: { params: RunParams },
      responses: { 200: json(RunSchema, "The run"), ...errors(401, 404) },
    }),
    previewJob: createRoute({
      method: "get",
      path: "/jobs/{id}/preview",
      operationId: "previewJob",
      tags: ["schedules"],
      summary: "The job's next occurrences",
      security: secured,
      request: { params: JobIdParams, query: PreviewQuery },
      responses: { 200: json(PreviewSchema, "The next occurrences"), ...errors(400, 401, 404) },
    }),
    previewSchedule: createRoute({
      method: "post",
      path: "/schedules/preview",
      operationId: "previewSchedule",
      tags: ["schedules"],
      summary: "Check a schedule before trusting it: its next occurrences, or what is wrong",
      security: secured,
      middleware: [body] as const,
      request: {
        body: { content: { "application/json": { schema: PreviewRequestSchema } }, required: true },
      },
      responses: {
        200: json(PreviewSchema, "The next occurrences"),
        ...errors(400, 401, 413, 415),
      },
    }),
    listDeadLetters: createRoute({
      method: "get",
      path: "/dead-letters",
      operationId: "listDeadLetters",
      tags: ["runs"],
      summary: "Dead runs not yet replayed, newest first",
      security: secured,
      request: { query: PageQuery },
      responses: { 200: json(RunPageSchema, "One page"), ...errors(400, 401) },
    }),
    replayDeadLetter: createRoute({
      method: "post",
      path: "/dead-letters/{runId}/replay",
      operationId: "replayDeadLetter",
      tags: ["runs"],
      summary: "Run a dead occurrence again, as its next attempt",
      description:
        "The dead run leaves the dead-letter list and its new attempt is queued. While the job is paused the new attempt waits, queued, and runs after resume; a cancelled job's dead letters are refused (409).",
      security: secured,
      request: { params: DeadLetterParams },
      responses: {
        202: json(RunSchema, "The new run; Location names it"),
        ...errors(401, 404, 409),
      },
    }),
    getWebhookSecret: createRoute({
      method: "get",
      path: "/webhook-secret",
      operationId: "getWebhookSecret",
      tags: ["webhooks"],
      summary: "The secret the caller's webhook deliveries are signed with (made on first use)",
      security: secured,
      responses: {
        200: json(WebhookSecretSchema, "The current secret; not cached (Cache-Control: no-store)"),
        ...errors(401),
      },
    }),
    rotateWebhookSecret: createRoute({
      method: "post",
      path: "/webhook-secret/rotate",
      operationId: "rotateWebhookSecret",
      tags: ["webhooks"],
      summary:
        "A new secret; for 24 hours deliveries carry signatures of both the new and the replaced one",
      security: secured,
      responses: {
        200: json(WebhookSecretSchema, "The new secret; not cached (Cache-Control: no-store)"),
        ...errors(401, 503),
      },
    }),
  };
}

function lifecycleRoute(action: "pause" | "resume" | "cancel", summary: string) {
  return createRoute({
    method: "post",
    path: `/jobs/{id}/${action}`,
    operationId: `${action}Job`,
    tags: ["jobs"],
    summary,
    security: secured,
    request: { params: JobIdParams },
    responses: {
      200: json(JobSchema, "The job; repeating the call changes nothing"),
      ...errors(401, 404, 409, 503),
    },
  });
}
