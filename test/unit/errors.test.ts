import { HTTPException } from "hono/http-exception";
import { describe, expect, it } from "vitest";
import { ApiError, httpAnswerOf } from "../../shared/api/errors.js";
import {
  ConcurrentUpdateError,
  FenceLostError,
  IdempotencyConflictError,
  IdempotencyKeyTakenError,
  IllegalTransitionError,
  JobNotFoundError,
  NotReplayableError,
  RunNotFoundError,
  SchedulerError,
  VersionMismatchError,
} from "../../shared/errors.js";
import { JobError } from "../../shared/execution/job-contract.js";
import { literalTargetRefusal } from "../../shared/execution/outbound.js";
import { ConditionsFailedError } from "../../shared/storage/transaction.js";
import { ValidationError } from "../../shared/validation.js";

/**
 * One error model: every error the scheduler names is a SchedulerError with a
 * code, its context and its cause, and the API answers each by its code in
 * one place (httpAnswerOf).
 */
const cause = new Error("the underlying failure");
const refused = literalTargetRefusal(new URL("http://127.0.0.1/hook"));
if (refused === null) throw new Error("127.0.0.1 must be refused");

const ERRORS = [
  [new JobNotFoundError("j1"), "job_not_found", { jobId: "j1" }],
  [new RunNotFoundError("r1"), "run_not_found", { runId: "r1" }],
  [new VersionMismatchError(2, 3), "version_mismatch", { expected: 2, actual: 3 }],
  [
    new IllegalTransitionError("resume", "CANCELLED"),
    "illegal_transition",
    { action: "resume", status: "CANCELLED" },
  ],
  [new IdempotencyConflictError("k"), "idempotency_conflict", { key: "k" }],
  [new IdempotencyKeyTakenError("k", { cause }), "idempotency_key_taken", { key: "k" }],
  [
    new NotReplayableError("r1", "it is queued"),
    "not_replayable",
    { runId: "r1", why: "it is queued" },
  ],
  [new ConcurrentUpdateError("busy", { cause }), "concurrent_update", { subject: "job" }],
  [new FenceLostError("shard 3", 7, { cause }), "fence_lost", { resource: "shard 3", fence: 7 }],
  [
    new ValidationError([{ field: "a", message: "bad" }], { cause }),
    "validation_failed",
    { issues: [{ field: "a", message: "bad" }] },
  ],
  [new JobError("boom", { retryable: false, cause }), "job_failed", { retryable: false }],
  [refused, "target_refused", { hostname: "127.0.0.1" }],
  [
    new ConditionsFailedError(new Map([["job", null]]), cause),
    "conditions_failed",
    { failed: ["job"] },
  ],
] as const;

describe("SchedulerError: one root with a code, a typed context and a cause", () => {
  it.each(ERRORS)("%s", (error, code, context) => {
    expect(error).toBeInstanceOf(SchedulerError);
    expect(error).toBeInstanceOf(Error);
    expect(error.code).toBe(code);
    expect(error.context).toEqual(context);
    expect(error.name).toBe(error.constructor.name);
  });

  it("keeps the cause it wraps", () => {
    expect(new FenceLostError("run r1", 2, { cause }).cause).toBe(cause);
    expect(new JobError("boom", { retryable: true, cause }).cause).toBe(cause);
    expect(new ConditionsFailedError(new Map([["a", null]]), cause).cause).toBe(cause);
    expect(new ConcurrentUpdateError("busy").cause).toBeUndefined();
  });

  it("ApiError is a SchedulerError whose context is its answer", () => {
    const error = new ApiError(428, "precondition_required", "send If-Match", {
      field: "If-Match",
    });
    expect(error).toBeInstanceOf(SchedulerError);
    expect(error.code).toBe("request_refused");
    expect(httpAnswerOf(error)).toBe(error.context);
    expect(error.context).toEqual({
      status: 428,
      body: {
        error: { code: "precondition_required", message: "send If-Match", field: "If-Match" },
      },
    });
  });
});

describe("httpAnswerOf: the one mapping from an error to its HTTP answer", () => {
  const answer = (error: unknown) => {
    const { status, body, headers } = httpAnswerOf(error);
    return { status, code: body.error.code, headers };
  };

  it("answers each domain error by its code", () => {
    expect(answer(new JobNotFoundError("j1"))).toEqual({
      status: 404,
      code: "not_found",
      headers: undefined,
    });
    expect(answer(new VersionMismatchError(2, 3))).toEqual({
      status: 412,
      code: "version_mismatch",
      headers: { ETag: '"3"' },
    });
    expect(answer(new ConcurrentUpdateError("x", { subject: "webhook secret" }))).toEqual({
      status: 503,
      code: "busy",
      headers: { "Retry-After": "1" },
    });
    // A recount goes on in the next request that may recount: one a recount interval (5 s) on.
    expect(answer(new ConcurrentUpdateError("x", { subject: "quota recount" }))).toEqual({
      status: 503,
      code: "busy",
      headers: { "Retry-After": "5" },
    });
    expect(answer(new ValidationError([{ field: "a", message: "bad" }])).status).toBe(400);
  });

  it("answers the worker's and storage's internal errors, and anything unforeseen, with a 500 that hides them", () => {
    for (const error of [
      new JobError("secret detail", { retryable: true }),
      refused,
      new FenceLostError("run r1", 2),
      new ConditionsFailedError(new Map([["job", null]]), cause),
      new Error("secret detail"),
      "not even an Error",
    ]) {
      expect(httpAnswerOf(error)).toEqual({
        status: 500,
        body: { error: { code: "internal", message: "internal error" } },
      });
    }
  });

  it("answers DynamoDB contention as busy and the framework's refusals by status", () => {
    const throttled = Object.assign(new Error("slow down"), { name: "ThrottlingException" });
    // A single-item write on an item a transaction holds, after the write's own retries.
    const held = Object.assign(new Error("Transaction is ongoing for the item"), {
      name: "TransactionConflictException",
    });
    for (const error of [throttled, held])
      expect(answer(error)).toEqual({
        status: 503,
        code: "busy",
        headers: { "Retry-After": "1" },
      });
    expect(answer(new HTTPException(413, { message: "too big" }))).toEqual({
      status: 413,
      code: "payload_too_large",
      headers: undefined,
    });
  });
});
