import type { Context, TypedResponse } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { JSONParsed } from "hono/utils/types";
import { stringifyExact } from "../exact-json.js";
import type { Job, JobPolicies, Run, RunStatus } from "../model.js";
import type { ScheduleSpec } from "../schedule/index.js";
import type { JobDto } from "./schemas/jobs.js";
import type { RunDto } from "./schemas/runs.js";

/**
 * `c.json(body, status)` for an answer that holds jobs: their payloads' numbers as the caller
 * wrote them (a 64-bit id past 2^53 too), which JSON.stringify would write as a double's.
 */
export function jobsJson<T extends object, U extends ContentfulStatusCode>(
  c: Context,
  body: T,
  status: U,
): Response & TypedResponse<JSONParsed<T>, U, "json"> {
  const answer = c.body(stringifyExact(body), status, { "Content-Type": "application/json" });
  // The same answer c.json gives, typed as it types its own: only the numbers' text differs.
  return answer as unknown as Response & TypedResponse<JSONParsed<T>, U, "json">;
}

/**
 * Domain objects as the API shows them: statuses in lowercase, retry delays in
 * seconds, and only documented fields, so internal bookkeeping (activeRuns,
 * due keys, tenant) never leaks into responses.
 */
export function jobDto(job: Job): JobDto {
  return {
    id: job.jobId,
    name: job.name,
    type: job.type,
    status: lower(job.status),
    schedule: scheduleDto(job.schedule),
    payload: job.payload ?? null,
    target: job.target
      ? {
          url: job.target.url,
          ...(job.target.headers ? { headers: { ...job.target.headers } } : {}),
          ...(job.target.timeoutSeconds !== undefined
            ? { timeoutSeconds: job.target.timeoutSeconds }
            : {}),
          ...(job.target.mode === "async" ? { mode: "async" as const } : {}),
        }
      : null,
    priority: job.priority,
    timeoutSeconds: job.timeoutSeconds,
    window: job.window ?? null,
    nextRunAt: job.nextRunAt ?? null,
    version: job.version,
    policies: policiesDto(job.policies),
    createdAt: job.createdAt,
    updatedAt: job.updatedAt,
    lastRun: job.lastRun
      ? {
          runId: job.lastRun.runId,
          status: runStatus(job.lastRun.status),
          scheduledFor: job.lastRun.scheduledFor,
          attempt: job.lastRun.attempt,
          finishedAt: job.lastRun.finishedAt,
        }
      : null,
    endAt: job.endAt ?? null,
    maxRuns: job.maxRuns ?? null,
    occurrencesQueued: job.occurrencesQueued ?? 0,
    dependents: [...(job.dependents ?? [])],
  };
}

export function scheduleDto(spec: ScheduleSpec): JobDto["schedule"] {
  if ("runAt" in spec) return { runAt: spec.runAt };
  if ("cron" in spec) return { cron: spec.cron, timezone: spec.timezone };
  if ("after" in spec) return { after: { jobs: [...spec.after.jobs], on: spec.after.on } };
  return spec.startAt === undefined
    ? { every: spec.every }
    : { every: spec.every, startAt: spec.startAt };
}

function policiesDto(policies: JobPolicies): JobDto["policies"] {
  return {
    retry: {
      maxAttempts: policies.retry.maxAttempts,
      initialDelaySeconds: policies.retry.initialDelayMs / 1000,
      maxDelaySeconds: policies.retry.maxDelayMs / 1000,
    },
    misfirePolicy: policies.misfire,
    overlapPolicy: policies.overlap,
    maxConcurrent: policies.maxConcurrent,
    inFlight: policies.inFlight ?? "skip",
  };
}

export function runDto(run: Run): RunDto {
  // Never negative: an earlier version stored a run ended by a clock behind its start's as such.
  const durationMs = run.durationMs ?? null;
  return {
    runId: run.runId,
    jobId: run.jobId,
    scheduledFor: run.scheduledFor,
    plannedFor: run.plannedFor ?? run.scheduledFor,
    dueAt: run.dueAt ?? run.scheduledFor,
    attempt: run.attempt,
    status: runStatus(run.status),
    priority: run.priority,
    enqueuedAt: run.enqueuedAt ?? null,
    startedAt: run.startedAt ?? null,
    finishedAt: run.finishedAt ?? null,
    durationMs: durationMs === null ? null : Math.max(0, durationMs),
    error: run.error ?? null,
    reason: run.reason ?? null,
    workerId: run.workerId ?? null,
    fence: run.fence ?? 0,
    jobVersion: run.jobVersion,
    executedVersion: run.executedVersion ?? null,
    replayedBy: run.replayedBy ?? null,
    trigger: run.trigger
      ? {
          jobId: run.trigger.jobId,
          runId: run.trigger.runId,
          scheduledFor: run.trigger.scheduledFor,
        }
      : null,
    ...(run.handedOverAt
      ? {
          handedOverAt: run.handedOverAt,
          leaseUntil: run.leaseUntil ?? null,
          timesOutAt: run.timesOutAt ?? null,
        }
      : {}),
    cancelRequestedAt: run.cancelRequestedAt ?? null,
    cancelledBy: run.cancelledBy ?? null,
  };
}

const lower = (status: Job["status"]) => status.toLowerCase() as JobDto["status"];
const runStatus = (status: RunStatus) => status.toLowerCase() as RunDto["status"];
