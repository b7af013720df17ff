/**
 * The scheduler's typed client: `import { SchedulerClient } from "serverless-scheduler/client"`.
 * Request and response types are generated from the API's OpenAPI document
 * (`npm run client:generate`).
 */
export type { ClientAuth } from "./auth.js";
export {
  type ApiErrorCode,
  type ClientErrorCode,
  type ErrorCode,
  type FieldIssue,
  isSchedulerApiError,
  RequestTimeoutError,
  SchedulerApiError,
  SchedulerClientError,
  VersionConflictError,
} from "./errors.js";
export type { components, operations, paths } from "./generated/api.js";
export {
  type DeleteOutcome,
  type EditOptions,
  JobHandle,
  type TriggerOptions,
  type WaitForRunOptions,
} from "./job-handle.js";
export type { Page, PagesRead } from "./paging.js";
export { type RequestOptions, type WaitOptions, WaitTimeoutError } from "./requests.js";
export type { RetryOptions } from "./retries.js";
export {
  type CreateOptions,
  type ListOptions,
  type PageOptions,
  type ReplayOptions,
  type RotateOptions,
  type RunCompletion,
  type RunFilter,
  type RunHeartbeat,
  SchedulerClient,
  type SchedulerClientOptions,
} from "./scheduler-client.js";
export type { SigV4Options } from "./sigv4.js";
export {
  type BatchCreateResult,
  type CreateJobRequest,
  type EditJobRequest,
  FINAL_RUN_STATUSES,
  type Job,
  type JobPayloads,
  type JobStatus,
  type JobType,
  type NewJob,
  type Preview,
  type QuotaOverride,
  RUN_STATUSES,
  type Run,
  type RunStatus,
  type Schedule,
  type TenantQuotas,
} from "./types.js";
