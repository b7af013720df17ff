import { ENV, NO_QUOTA } from "../shared/config.js";
import type { ConsoleAuth } from "../shared/console/config.js";
import type { Priority } from "../shared/model.js";
import {
  DEPLOY_TIME_VARIABLES,
  type DeployTimeValue,
  functionEnvironment,
} from "./lambda-environment.js";
import type { SchedulerSettings } from "./settings-shape.js";

// What the stack derives from the settings: the worker's event source concurrency, the
// dispatcher's timeout, and the environment each function reads them from.

/**
 * Each work queue's event source maximum concurrency. Each queue has its own pollers, so high's
 * backlog never takes low's invocations; low's maximum is raised, when needed, to
 * `lowPriorityShare` of the three together: low's runs keep that share of the pool while high is
 * saturated (the starvation guard on Lambda).
 */
export function workerEventSourceConcurrency(s: SchedulerSettings): Record<Priority, number> {
  const { high, normal, low } = s.workerConcurrency;
  const share = s.lowPriorityShare;
  const guarded = Math.ceil(((high + normal) * share) / (1 - share) - 1e-9);
  return { high, normal, low: Math.max(low, guarded) };
}

/**
 * The dispatcher's Lambda timeout: its shard lease, and never under a minute. A pass reads a
 * backlog (or scans for a new shard's) for up to half a lease; killed before that, it would record
 * nothing and keep the shard's lease until it lapsed, pass after pass.
 */
export function dispatcherTimeoutSeconds(s: SchedulerSettings): number {
  return Math.max(60, s.leaseSeconds);
}

/** The engine settings as the handlers read them (shared/config.ts `loadSettings`). */
export function engineEnvironment(s: SchedulerSettings): Record<string, string> {
  return {
    // The API checks creates, edits and requests against them; the worker, concurrent runs.
    [ENV.quotaActiveJobs]: String(s.quotas.activeJobs ?? NO_QUOTA),
    [ENV.quotaRunsPerMinute]: String(s.quotas.runsPerMinute ?? NO_QUOTA),
    [ENV.quotaConcurrentRuns]: String(s.quotas.concurrentRuns ?? NO_QUOTA),
    [ENV.quotaRequestsPerSecond]: String(s.quotas.requestsPerSecond),
    [ENV.quotaMaxPriority]: s.quotas.maxPriority,
    [ENV.shardCount]: String(s.shardCount),
    [ENV.maxShardCount]: String(s.maxShardCount),
    [ENV.lookaheadSeconds]: String(s.lookaheadSeconds),
    [ENV.leaseSeconds]: String(s.leaseSeconds),
    [ENV.misfireGraceSeconds]: String(s.misfireGraceSeconds),
    [ENV.retentionDays]: String(s.retentionDays),
    [ENV.deadLetterRetentionDays]: String(s.deadLetterRetentionDays),
    [ENV.minIntervalMs]: String(s.minIntervalMs),
    // The API refuses job timeouts the worker cannot run in full.
    [ENV.workerTimeoutSeconds]: String(s.workerTimeoutSeconds),
    // The DLQ consumer tells a poison run from deliveries that never started it.
    [ENV.maxReceiveCount]: String(s.maxReceiveCount),
    // The dispatcher's and the API's fast path claim one-offs; every function gets it alike.
    [ENV.oneOffClaimWrites]: s.oneOffClaimWrites,
  };
}

/**
 * The API function's whole environment as the stack gives it (SchedulerStack, Api,
 * SchedulerFunction), its table names and queue URLs by the most they can hold.
 */
export function apiFunctionEnvironment(
  s: SchedulerSettings,
): Record<string, string | DeployTimeValue> {
  return functionEnvironment("api", s.metricsNamespace, {
    ...DEPLOY_TIME_VARIABLES,
    ...engineEnvironment(s),
    ...apiEnvironment(s),
  });
}

/** The API function's own variables (beside the engine's), as infra/constructs/api.ts sets them. */
export function apiEnvironment(s: SchedulerSettings): Record<string, string> {
  return {
    [ENV.apiAuth]: s.auth.kind,
    // The demo types (sleep, fail) are refused with a 400 naming `type` unless enabled.
    [ENV.demoJobTypes]: String(s.demoJobTypes),
    [ENV.adminTenants]: s.adminTenants.join(","),
    // How the web console signs in: at the JWT issuer, or not at all (a browser cannot sign).
    [ENV.consoleAuth]: JSON.stringify(
      (s.auth.kind === "jwt"
        ? {
            kind: "oidc",
            issuer: s.auth.issuer,
            clientId: s.auth.consoleClientId,
            scope: s.auth.consoleScope,
          }
        : { kind: "iam" }) satisfies ConsoleAuth,
    ),
  };
}
