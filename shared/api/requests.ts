import type { EngineSettings } from "../config.js";
import { asDoubles, stringifyExact } from "../exact-json.js";
import type { JobTypeCatalog } from "../job-types/registry.js";
import type { JobChanges, NewJob } from "../jobs/index.js";
import type { HttpTarget, Job, JobPolicies } from "../model.js";
import { DEFAULT_MAX_CONCURRENT, DEFAULT_POLICIES, type OverlapPolicy } from "../policies.js";
import type { RetryPolicy } from "../retry.js";
import {
  normalizeSchedule,
  parseWindow,
  type ScheduleSpec,
  safeParseSchedule,
} from "../schedule/index.js";
import { type FieldIssue, ValidationError } from "../validation.js";
import { checkedEnd, checkedNewEnd } from "./end-conditions.js";
import { ApiError } from "./errors.js";
import { LIMITS } from "./schemas/common.js";
import type { CreateJobBody, EditJobBody } from "./schemas/jobs.js";

/**
 * The checks zod cannot do alone (they need the clock, the settings, or the
 * stored job), and the translation of validated bodies into the engine's
 * types. Everything here throws before anything is written.
 */

/**
 * The schedule validated by the schedule core (which also keeps every instant inside the storable
 * range) and normalized, as it must be stored. For a create or an edit, an `every` without
 * `startAt` stays without one: a `startAt` fixed here would lie a second before the instant the
 * write finds the first occurrence from (a later reading of the clock) whenever a second boundary
 * fell between the two, and put the first run one whole interval late.
 */
export function parseScheduleInput(
  input: unknown,
  settings: EngineSettings,
  now: Date,
  { everyStartsWhenPlanned = false }: { readonly everyStartsWhenPlanned?: boolean } = {},
): ScheduleSpec {
  const result = safeParseSchedule(input, { minIntervalMs: settings.minIntervalMs });
  if (!result.ok) throw new ValidationError(result.issues);
  const { schedule } = result;
  const leftOpen = everyStartsWhenPlanned && "every" in schedule && schedule.startAt === undefined;
  return leftOpen ? schedule : normalizeSchedule(schedule, now);
}

/**
 * A jitter window fits the schedule it is used with (recurring, at most its period), else a 400
 * naming window; an edit that changes only the schedule checks the job's window against it.
 */
function checkWindow(window: string | null | undefined, schedule: ScheduleSpec): void {
  if (window === null || window === undefined) return;
  const parsed = parseWindow(window, schedule);
  if (!parsed.ok) throw new ValidationError([{ field: "window", message: parsed.message }]);
}

/** The payload's size as it is stored and delivered: its text, numbers as written. */
function checkPayloadSize(payload: unknown, maxBytes: number): void {
  const size = Buffer.byteLength(stringifyExact(payload ?? null), "utf8");
  if (size > maxBytes) {
    throw new ApiError(
      413,
      "payload_too_large",
      `payload is ${size} bytes serialized; at most ${maxBytes} are accepted`,
      { field: "payload" },
    );
  }
}

/**
 * The payload as it would be stored (none is null) fits its type's schema, else a 400 naming
 * payload.<field>. Its numbers are checked as JSON.parse reads them (a schema's bounds on a
 * number are a double's), as the worker checks them again (`jobType`).
 */
function checkPayloadFits(jobTypes: JobTypeCatalog, type: string, payload: unknown): void {
  const issues = jobTypes.payloadIssues(type, asDoubles(payload ?? null));
  if (issues.length > 0) throw new ValidationError(issues);
}

/**
 * A timeout longer than the deployment's workers can run would fail every run
 * (the Lambda worker stops a handler before its own end): refused up front.
 * An async target's run is not held by a worker once handed over: its job
 * timeout may reach a day (the delivery itself is still bounded).
 */
function checkTimeouts(
  body: { timeoutSeconds?: number | undefined; target?: { timeoutSeconds?: number | undefined } },
  settings: EngineSettings,
  effective: { readonly timeoutSeconds: number | undefined; readonly async: boolean },
): void {
  const max = settings.maxTimeoutSeconds;
  const issues: FieldIssue[] = [];
  const timeout = effective.timeoutSeconds;
  if (timeout !== undefined) {
    if (effective.async && timeout > LIMITS.asyncTimeoutSeconds) {
      issues.push({
        field: "timeoutSeconds",
        message: `must be at most ${LIMITS.asyncTimeoutSeconds} (24 h) for an async target; got ${timeout}`,
      });
    } else if (!effective.async && timeout > max) {
      issues.push({
        field: "timeoutSeconds",
        message: `must be at most ${max}: the longest run this deployment's workers can finish (their time limit, less time to start and to record the result); up to ${LIMITS.asyncTimeoutSeconds} only with target.mode "async"; got ${timeout}`,
      });
    }
  }
  const delivery = body.target?.timeoutSeconds;
  if (delivery !== undefined && delivery > max) {
    issues.push({
      field: "target.timeoutSeconds",
      message: `must be at most ${max}: the longest run this deployment's workers can finish (their time limit, less time to start and to record the result); got ${delivery}`,
    });
  }
  if (issues.length > 0) throw new ValidationError(issues);
}

type TargetInput = NonNullable<CreateJobBody["target"]>;

function targetFrom(input: TargetInput): HttpTarget {
  return {
    url: input.url,
    ...(input.headers !== undefined ? { headers: input.headers } : {}),
    ...(input.timeoutSeconds !== undefined ? { timeoutSeconds: input.timeoutSeconds } : {}),
    ...(input.mode === "async" ? { mode: "async" as const } : {}),
  };
}

type RetryInput = NonNullable<CreateJobBody["retry"]>;

/**
 * On create, a default the caller did not set gives way to the one they did
 * (maxDelaySeconds 10 alone lowers the initial delay to 10), since defaults are
 * ours; on edit, values already on the job are the caller's, so a conflict is
 * reported instead of silently changing one.
 */
function retryOnCreate(input: RetryInput | undefined): RetryPolicy {
  const defaults = DEFAULT_POLICIES.retry;
  const initialMs = seconds(input?.initialDelaySeconds);
  const maxMs = seconds(input?.maxDelaySeconds);
  const policy = {
    maxAttempts: input?.maxAttempts ?? defaults.maxAttempts,
    initialDelayMs:
      initialMs ?? Math.min(defaults.initialDelayMs, maxMs ?? Number.POSITIVE_INFINITY),
    maxDelayMs: maxMs ?? Math.max(defaults.maxDelayMs, initialMs ?? 0),
  };
  checkDelays(policy, input);
  return policy;
}

function retryOnEdit(input: RetryInput, current: RetryPolicy): RetryPolicy {
  const policy = {
    maxAttempts: input.maxAttempts ?? current.maxAttempts,
    initialDelayMs: seconds(input.initialDelaySeconds) ?? current.initialDelayMs,
    maxDelayMs: seconds(input.maxDelaySeconds) ?? current.maxDelayMs,
  };
  checkDelays(policy, input);
  return policy;
}

function checkDelays(policy: RetryPolicy, input: RetryInput | undefined): void {
  if (policy.initialDelayMs <= policy.maxDelayMs) return;
  const field =
    input?.initialDelaySeconds !== undefined
      ? "retry.initialDelaySeconds"
      : "retry.maxDelaySeconds";
  throw new ValidationError([
    {
      field,
      message: `initialDelaySeconds (${policy.initialDelayMs / 1000}) must not exceed maxDelaySeconds (${policy.maxDelayMs / 1000})`,
    },
  ]);
}

const seconds = (value: number | undefined) => (value === undefined ? undefined : value * 1000);

function maxConcurrentFor(
  overlap: OverlapPolicy,
  given: number | undefined,
  current: number,
): number {
  if (given !== undefined && overlap !== "allow") {
    throw new ValidationError([
      {
        field: "maxConcurrent",
        message: `only applies with overlapPolicy "allow" (the policy is "${overlap}")`,
      },
    ]);
  }
  return overlap === "allow" ? (given ?? current) : DEFAULT_MAX_CONCURRENT;
}

function targetRule(type: string, hasTarget: boolean): FieldIssue | null {
  if (type === "http" && !hasTarget) {
    return { field: "target", message: "is required for http jobs: give at least its url" };
  }
  if (type !== "http" && hasTarget) {
    return { field: "target", message: `only applies to http jobs, not to type "${type}"` };
  }
  return null;
}

export function newJobFrom(
  body: CreateJobBody,
  tenantId: string,
  now: Date,
  settings: EngineSettings,
  jobTypes: JobTypeCatalog,
): NewJob {
  const schedule = parseScheduleInput(body.schedule, settings, now, {
    everyStartsWhenPlanned: true,
  });
  const targetIssue = targetRule(body.type, body.target !== undefined);
  if (targetIssue) throw new ValidationError([targetIssue]);
  const retry = retryOnCreate(body.retry);
  const overlap = body.overlapPolicy ?? DEFAULT_POLICIES.overlap;
  const maxConcurrent = maxConcurrentFor(overlap, body.maxConcurrent, DEFAULT_MAX_CONCURRENT);
  checkPayloadSize(body.payload, settings.maxPayloadBytes);
  checkPayloadFits(jobTypes, body.type, body.payload);
  checkTimeouts(body, settings, {
    timeoutSeconds: body.timeoutSeconds,
    async: body.target?.mode === "async",
  });
  const endAt = checkedNewEnd(body, schedule, now);
  checkWindow(body.window, schedule);
  const policies: JobPolicies = {
    retry,
    misfire: body.misfirePolicy ?? DEFAULT_POLICIES.misfire,
    overlap,
    maxConcurrent,
    inFlight: "skip",
  };
  return {
    tenantId,
    name: body.name ?? body.type,
    type: body.type,
    schedule,
    payload: body.payload ?? null,
    ...(body.target ? { target: targetFrom(body.target) } : {}),
    priority: body.priority ?? "normal",
    timeoutSeconds:
      body.timeoutSeconds ?? Math.min(LIMITS.timeoutSeconds.default, settings.maxTimeoutSeconds),
    policies,
    ...(endAt ? { endAt } : {}),
    ...(body.maxRuns !== undefined ? { maxRuns: body.maxRuns } : {}),
    ...(body.window !== undefined ? { window: body.window } : {}),
  };
}

const EDITABLE = [
  "name",
  "schedule",
  "payload",
  "target",
  "retry",
  "misfirePolicy",
  "overlapPolicy",
  "maxConcurrent",
  "priority",
  "timeoutSeconds",
  "window",
  "inFlight",
  "endAt",
  "maxRuns",
] as const;

export function jobChangesFrom(
  body: EditJobBody,
  job: Job,
  now: Date,
  settings: EngineSettings,
  jobTypes: JobTypeCatalog,
): JobChanges {
  if (!EDITABLE.some((key) => key in body)) {
    throw new ApiError(
      400,
      "validation_failed",
      `nothing to change: give at least one of ${EDITABLE.join(", ")}`,
    );
  }
  const schedule =
    body.schedule !== undefined
      ? parseScheduleInput(body.schedule, settings, now, { everyStartsWhenPlanned: true })
      : undefined;
  if (body.target !== undefined) {
    const targetIssue = targetRule(job.type, true);
    if (targetIssue) throw new ValidationError([targetIssue]);
  }
  const current = job.policies;
  const touchesPolicies =
    body.retry !== undefined ||
    body.misfirePolicy !== undefined ||
    body.overlapPolicy !== undefined ||
    body.maxConcurrent !== undefined ||
    body.inFlight !== undefined;
  let policies: JobPolicies | undefined;
  if (touchesPolicies) {
    const overlap = body.overlapPolicy ?? current.overlap;
    const currentMax = current.overlap === "allow" ? current.maxConcurrent : DEFAULT_MAX_CONCURRENT;
    policies = {
      retry: body.retry ? retryOnEdit(body.retry, current.retry) : current.retry,
      misfire: body.misfirePolicy ?? current.misfire,
      overlap,
      maxConcurrent: maxConcurrentFor(overlap, body.maxConcurrent, currentMax),
      inFlight: body.inFlight ?? current.inFlight ?? "skip",
    };
  }
  if ("payload" in body) {
    checkPayloadSize(body.payload, settings.maxPayloadBytes);
    checkPayloadFits(jobTypes, job.type, body.payload);
  }
  checkTimeouts(body, settings, {
    // An edit that keeps the timeout still checks it against a target it changes to sync.
    timeoutSeconds:
      body.timeoutSeconds ?? (body.target !== undefined ? job.timeoutSeconds : undefined),
    async: body.target !== undefined ? body.target.mode === "async" : job.target?.mode === "async",
  });
  // Checked against the schedule the job will have, and the end it will keep. A kept endAt that
  // has passed (a dispatcher outage left the job unended) is the edit's to decide, as a dispatcher
  // would: its claim of the old schedule's due occurrences completes the job, and the edit is
  // the 409 of a completed job; a paused job's edit is refused (409) there (shared/jobs/edit.ts).
  const end = {
    endAt: "endAt" in body ? body.endAt : job.endAt,
    maxRuns: "maxRuns" in body ? body.maxRuns : job.maxRuns,
  };
  const keptEndChecked =
    schedule !== undefined && !(typeof end.endAt === "string" && Date.parse(end.endAt) <= +now);
  const endAt = checkedEnd(
    "endAt" in body ? end : { maxRuns: end.maxRuns, endAt: keptEndChecked ? end.endAt : undefined },
    schedule ?? job.schedule,
    now,
  );
  checkWindow(body.window === undefined ? job.window : body.window, schedule ?? job.schedule);
  return {
    ...(body.name !== undefined ? { name: body.name } : {}),
    ...("endAt" in body ? { endAt: endAt ?? null } : {}),
    ...("maxRuns" in body ? { maxRuns: body.maxRuns ?? null } : {}),
    ...(schedule !== undefined ? { schedule } : {}),
    ...("payload" in body ? { payload: body.payload ?? null } : {}),
    ...(body.target !== undefined ? { target: targetFrom(body.target) } : {}),
    ...(body.priority !== undefined ? { priority: body.priority } : {}),
    ...(body.timeoutSeconds !== undefined ? { timeoutSeconds: body.timeoutSeconds } : {}),
    ...(policies !== undefined ? { policies } : {}),
    ...(body.window !== undefined ? { window: body.window } : {}),
  };
}

/** `"3"`, `W/"3"` or `3`: the version an edit is based on. */
export function parseIfMatch(header: string | undefined): number {
  if (header === undefined || header.trim() === "") {
    throw new ApiError(
      428,
      "precondition_required",
      'send If-Match with the job\'s version (its ETag, e.g. "3") so that concurrent edits cannot overwrite each other',
      { field: "If-Match" },
    );
  }
  const match = /^\s*(?:W\/)?"?([1-9]\d{0,14})"?\s*$/.exec(header);
  const version = match?.[1];
  if (version === undefined) {
    throw new ValidationError([
      {
        field: "If-Match",
        message: `must be the job's version, such as "3"; got ${JSON.stringify(header.slice(0, 40))}`,
      },
    ]);
  }
  return Number(version);
}
