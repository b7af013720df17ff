import type { JobHandler } from "../../../shared/execution/handlers.js";

/**
 * Your own job types: map a `type` name to a handler. A handler gets the
 * run's context (payload, ids, attempt, idempotencyKey, an AbortSignal that
 * fires at the timeout or when another worker takes the run over) and either
 * resolves (SUCCEEDED) or throws (a JobError with `retryable: false` goes to
 * the dead letters at once; anything else is retried with backoff).
 *
 * Example:
 *   export const customHandlers = new Map<string, JobHandler>([
 *     ["send-report", async (ctx) => { await sendReport(ctx.payload, { signal: ctx.signal }); }],
 *   ]);
 */
export const customHandlers = new Map<string, JobHandler>();
