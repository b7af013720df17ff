import type { RegisteredJobType } from "../../../shared/execution/job-contract.js";

/**
 * Your own job types: each declares its payload schema (zod), checked by the
 * API at create and edit (a 400 naming `payload.<field>`) and before each run,
 * and its handler. A handler gets the run's context (the payload as its
 * schema parsed it, ids, attempt, idempotencyKey, an AbortSignal that fires
 * at the timeout or when another worker takes the run over) and either
 * resolves (SUCCEEDED) or throws (a JobError with `retryable: false` goes to
 * the dead letters at once; anything else is retried with backoff). A
 * JobError's message is the run's `error`, which its tenant reads: say there
 * what the tenant may know. Any other exception's text stays in the worker's
 * log, under the run's keys, and the run's `error` names its kind only (an
 * AWS error names your account, roles and tables). Naming
 * the payload in JobPayloads types `ctx.payload` (as GraphileWorker.Tasks does).
 *
 * Example:
 *   import { z } from "zod";
 *   import { jobType } from "../../../shared/execution/job-contract.js";
 *
 *   const SendReportPayload = z.strictObject({ reportId: z.string() });
 *   declare module "../../../shared/job-types/registry.js" {
 *     interface JobPayloads { "send-report": z.infer<typeof SendReportPayload> }
 *   }
 *   export const customJobTypes: readonly RegisteredJobType[] = [
 *     jobType(
 *       { name: "send-report", payload: SendReportPayload, description: "Sends a report." },
 *       async (ctx) => { await sendReport(ctx.payload.reportId, { signal: ctx.signal }); },
 *     ),
 *   ];
 */
export const customJobTypes: readonly RegisteredJobType[] = [];
