import type { components } from "./generated/api.js";

type Schemas = components["schemas"];

export type Job = Schemas["Job"];
export type Run = Schemas["Run"];
export type Preview = Schemas["Preview"];
export type Schedule = Schemas["Schedule"];
export type CreateJobRequest = Schemas["CreateJobRequest"];
export type EditJobRequest = Schemas["EditJobRequest"];
export type TenantQuotas = Schemas["TenantQuotas"];
export type QuotaOverride = Schemas["QuotaOverride"];
export type JobStatus = Job["status"];

/** Each job type's payload, as the document's JobPayloads declares it. */
export type JobPayloads = Schemas["JobPayloads"];
export type JobType = keyof JobPayloads;

/** The create body with its `payload` typed by its `type`. */
export type NewJob = {
  [T in JobType]: Omit<CreateJobRequest, "type" | "payload"> & {
    type: T;
    payload?: JobPayloads[T];
  };
}[JobType];
export type RunStatus = Run["status"];
/** One job's result in a batch create: `job` with 201/200, else `error`. */
export type BatchCreateResult = Schemas["CreateJobsBatchResult"];

/** Every run status; the record makes the type check fail when the API adds one. */
const RUN_STATUS_SET: Record<RunStatus, true> = {
  queued: true,
  running: true,
  succeeded: true,
  failed: true,
  dead: true,
  skipped: true,
  cancelled: true,
};
export const RUN_STATUSES = Object.keys(RUN_STATUS_SET) as readonly RunStatus[];

/** A run in one of these statuses does not change again (a failed attempt's retry is a new run). */
export const FINAL_RUN_STATUSES: readonly RunStatus[] = [
  "succeeded",
  "failed",
  "dead",
  "skipped",
  "cancelled",
];
