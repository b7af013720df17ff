import type { ErrorBody } from "../shared/api/errors.js";
import type { CreateJobBody, EditJobBody, JobDto } from "../shared/api/schemas/jobs.js";
import type { PreviewDto, PreviewRequestBody } from "../shared/api/schemas/previews.js";
import type { RunDto } from "../shared/api/schemas/runs.js";
import { currentCredential } from "./auth.js";

export type Job = JobDto;
export type Run = RunDto;
export type Preview = PreviewDto;
export type CreateJob = CreateJobBody;
export type EditJob = EditJobBody;
export type FieldIssue = { readonly field: string; readonly message: string };

export interface Page<T> {
  readonly items: T[];
  readonly nextCursor: string | null;
}

/** An answer in the API's error shape (docs/api.md, "Errors"). */
export class ApiProblem extends Error {
  override readonly name = "ApiProblem";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field: string | undefined,
    readonly issues: readonly FieldIssue[],
    readonly currentStatus: string | undefined,
  ) {
    super(message);
  }
}

/** Told when the API answers 401, so the console asks for credentials again. */
let onUnauthorized: () => void = () => undefined;
export function whenUnauthorized(handler: () => void): void {
  onUnauthorized = handler;
}

async function call<T>(
  method: string,
  path: string,
  options: { body?: unknown; headers?: Record<string, string> } = {},
): Promise<{ data: T; etag: string | null }> {
  const credential = currentCredential();
  const headers: Record<string, string> = { Accept: "application/json", ...options.headers };
  if (credential) headers.Authorization = `Bearer ${credential.token}`;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
  });
  const text = await response.text();
  const parsed: unknown = text === "" ? null : JSON.parse(text);
  if (!response.ok) {
    if (response.status === 401) onUnauthorized();
    const error = (parsed as Partial<ErrorBody> | null)?.error;
    throw new ApiProblem(
      response.status,
      error?.code ?? "internal",
      error?.message ?? `${method} ${path}: ${response.status}`,
      error?.field,
      error?.issues ?? [],
      error?.currentStatus,
    );
  }
  return { data: parsed as T, etag: response.headers.get("ETag") };
}

const query = (params: Record<string, string | number | undefined>) => {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text === "" ? "" : `?${text}`;
};

const jobPath = (id: string) => `/jobs/${encodeURIComponent(id)}`;

export const api = {
  listJobs: async (params: { status?: string; cursor?: string; limit?: number }) =>
    (await call<Page<Job>>("GET", `/jobs${query(params)}`)).data,
  getJob: async (id: string) => (await call<Job>("GET", jobPath(id))).data,
  createJob: async (body: CreateJob) => (await call<Job>("POST", "/jobs", { body })).data,
  editJob: async (id: string, version: number, body: EditJob) =>
    (await call<Job>("PATCH", jobPath(id), { body, headers: { "If-Match": `"${version}"` } })).data,
  changeStatus: async (id: string, action: "pause" | "resume" | "cancel") =>
    (await call<Job>("POST", `${jobPath(id)}/${action}`)).data,
  trigger: async (id: string) => (await call<Run>("POST", `${jobPath(id)}/trigger`)).data,
  listRuns: async (id: string, params: { cursor?: string; limit?: number }) =>
    (await call<Page<Run>>("GET", `${jobPath(id)}/runs${query(params)}`)).data,
  previewJob: async (id: string, count: number) =>
    (await call<Preview>("GET", `${jobPath(id)}/preview${query({ count })}`)).data,
  previewSchedule: async (body: PreviewRequestBody) =>
    (await call<Preview>("POST", "/schedules/preview", { body })).data,
  listDeadLetters: async (params: { cursor?: string; limit?: number }) =>
    (await call<Page<Run>>("GET", `/dead-letters${query(params)}`)).data,
  replay: async (runId: string) =>
    (await call<Run>("POST", `/dead-letters/${encodeURIComponent(runId)}/replay`)).data,
};
