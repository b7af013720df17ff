import { createRoute, type z } from "@hono/zod-openapi";
import {
  type BatchCreateItem,
  createJobs,
  MAX_BATCH_JOBS,
  repeatedKeyError,
} from "../jobs/create-batch.js";
import { idempotentCreate } from "../jobs/index.js";
import { committedJobsAsTheyStand } from "../jobs/queries.js";
import type { Job } from "../model.js";
import { BODY_OVERHEAD_BYTES, jsonBody } from "./body.js";
import { newJobOrRepeat } from "./create-repeat.js";
import { jobDto, jobsJson } from "./dto.js";
import { ApiError, type HttpAnswer, httpAnswerOf, invalid } from "./errors.js";
import { schemaFailure, unknownFieldIssues } from "./issues.js";
import { newJobFrom } from "./requests.js";
import { errors, json, newRouter, type RouterDeps, secured, tenantOf } from "./router.js";
import {
  BatchEnvelope,
  BatchResultsSchema,
  createJobSchema,
  createJobsBatchSchema,
  type JobDto,
} from "./schemas/jobs.js";

const PATH = "/jobs:batch";
/** Each job's payload, where any JSON may be. */
const BATCH_PAYLOAD_PATH = /^jobs\.\d+\.payload$/;
/** Each job's body sits this deep in the batch's (`jobs[i]`). */
const JOB_BODY_DEPTH = 2;
/** Room for the `{"jobs": […]}` around the jobs: its brackets, commas and indentation. */
const BATCH_ENVELOPE_BYTES = 4 * 1024;

interface BatchResult {
  readonly index: number;
  readonly status: number;
  readonly job?: JobDto;
  readonly error?: HttpAnswer["body"]["error"];
}

/**
 * A body that is not `{jobs: [1 to 25 items]}`: an unknown field beside `jobs` is named as
 * POST /jobs names one (first: a misspelt `jobs` is the likelier cause of the rest), any other
 * fault names `jobs`.
 */
function envelopeFailure(issues: readonly z.core.$ZodIssue[]): ApiError {
  const unknown = issues
    .filter((issue) => issue.path.length === 0)
    .flatMap((issue) => unknownFieldIssues(issue, "json"));
  const shape = issues.find((issue) => unknown.length === 0 || issue.code !== "unrecognized_keys");
  return invalid([
    ...unknown,
    ...(shape
      ? [
          {
            field: "jobs",
            message: `must be a list of 1 to ${MAX_BATCH_JOBS} jobs (${shape.message})`,
          },
        ]
      : []),
  ]);
}

/**
 * POST /jobs:batch: up to 25 creates in one request, each answered as POST
 * /jobs would answer it alone. The body's envelope is checked as a whole (a
 * 400 naming `jobs` writes nothing); each job is then checked on its own, so
 * the route validates by hand and the document shows the schema it checks
 * against. The request takes one token of the tenant's requestsPerSecond
 * bucket: the quota bounds requests, and the jobs they create are bounded by
 * activeJobs and runsPerMinute, which count every job of the batch.
 */
export function jobsBatchRouter({ engine, jobTypes }: RouterDeps) {
  const route = createRoute({
    method: "post",
    path: PATH,
    operationId: "createJobsBatch",
    tags: ["jobs"],
    summary: `Schedule up to ${MAX_BATCH_JOBS} jobs in one request, each with its own result`,
    security: secured,
    request: {
      body: {
        content: { "application/json": { schema: createJobsBatchSchema(jobTypes) } },
        required: true,
      },
    },
    responses: {
      200: json(BatchResultsSchema, "One result per job, in the request's order"),
      ...errors(400, 401, 413, 415),
    },
  });
  const itemSchema = createJobSchema(jobTypes);
  /** What a single create's body may be (POST /jobs): each job of a batch is held to it too. */
  const itemBytes = engine.settings.maxPayloadBytes + BODY_OVERHEAD_BYTES;
  const router = newRouter();
  router.openAPIRegistry.registerPath(route);
  const body = jsonBody(
    MAX_BATCH_JOBS * itemBytes + BATCH_ENVELOPE_BYTES,
    BATCH_PAYLOAD_PATH,
    JOB_BODY_DEPTH,
  );

  router.post(PATH, body, async (c) => {
    if (c.req.header("Idempotency-Key") !== undefined) {
      throw invalid([
        {
          field: "Idempotency-Key",
          message: "a batch takes each job's idempotencyKey in its body, not the header",
        },
      ]);
    }
    const envelope = BatchEnvelope.safeParse(await c.req.json());
    if (!envelope.success) throw envelopeFailure(envelope.error.issues);
    const tenantId = tenantOf(c);
    const now = engine.clock();
    const results: (BatchResult | undefined)[] = [];
    const valid: { index: number; item: BatchCreateItem }[] = [];
    // By the request's index: createJobs sees only the valid jobs, so its own check counts those.
    const firstWithKey = new Map<string, number>();
    // Repeats of creates whose end checks held when they were made (newJobOrRepeat).
    const repeated: { index: number; job: Job }[] = [];
    for (const [index, raw] of envelope.data.jobs.entries()) {
      try {
        // The batch's body is held to 25 creates' size in all; alone, one job could take far more.
        const size = Buffer.byteLength(JSON.stringify(raw) ?? "", "utf8");
        if (size > itemBytes) {
          throw new ApiError(
            413,
            "payload_too_large",
            `this job is ${size} bytes serialized; POST /jobs takes a body of at most ${itemBytes}`,
          );
        }
        const parsed = itemSchema.safeParse(raw);
        if (!parsed.success) throw schemaFailure(parsed.error.issues, "json", raw);
        const { idempotencyKey, ...definition } = parsed.data;
        const asked = await newJobOrRepeat(
          engine,
          tenantId,
          idempotencyKey,
          definition,
          now,
          (asOf) => newJobFrom(parsed.data, tenantId, asOf, engine.settings, jobTypes),
        );
        if (idempotencyKey !== undefined) {
          const earlier = firstWithKey.get(idempotencyKey);
          if (earlier !== undefined) throw repeatedKeyError(earlier);
          firstWithKey.set(idempotencyKey, index);
        }
        if ("repeat" in asked) {
          repeated.push({ index, job: asked.repeat });
          continue;
        }
        const input = asked.newJob;
        valid.push({
          index,
          item: {
            input,
            ...(idempotencyKey === undefined
              ? {}
              : { idempotency: idempotentCreate(idempotencyKey, input, definition) }),
          },
        });
      } catch (error) {
        results[index] = failed(tenantId, index, error);
      }
    }
    const outcomes = await createJobs(
      engine,
      tenantId,
      valid.map((v) => v.item),
    );
    // A key's repeat answers the job made first, which may have runs by now.
    const repeats = [
      ...outcomes.flatMap((o) => ("job" in o && !o.created ? [o.job] : [])),
      ...repeated.map((r) => r.job),
    ];
    const standing = new Map(
      (await committedJobsAsTheyStand(engine, repeats)).map((job) => [job.jobId, job]),
    );
    valid.forEach(({ index }, i) => {
      const outcome = outcomes[i];
      results[index] =
        outcome === undefined || "error" in outcome
          ? failed(tenantId, index, outcome?.error)
          : {
              index,
              status: outcome.created ? 201 : 200,
              job: jobDto(standing.get(outcome.job.jobId) ?? outcome.job),
            };
    });
    for (const { index, job } of repeated)
      results[index] = { index, status: 200, job: jobDto(standing.get(job.jobId) ?? job) };
    return jobsJson(
      c,
      { results: results.map((r, index) => r ?? failed(tenantId, index, undefined)) },
      200,
    );
  });

  function failed(tenantId: string, index: number, error: unknown): BatchResult {
    // A batch's jobs take their keys in the body only (the header is refused).
    const answer = httpAnswerOf(error, { writes: true, keyField: "idempotencyKey" });
    if (answer.status >= 500) {
      engine.obs.log.error("a job of a batch create failed", {
        tenantId,
        index,
        error: error instanceof Error ? (error.stack ?? error.message) : String(error),
      });
    }
    return { index, status: answer.status, error: answer.body.error };
  }

  return router;
}
