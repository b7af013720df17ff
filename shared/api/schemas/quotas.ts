import { z } from "@hono/zod-openapi";
import { boundedInt } from "../../bounded-int.js";
import { MAX_CONCURRENT_RUNS_QUOTA, QUOTA_MAXIMUM } from "../../config.js";
import { Priority } from "./common.js";

const count = (description: string, max = QUOTA_MAXIMUM) =>
  boundedInt(1, max).openapi({ description });

/** A counted quota: null is no limit (it costs no request to enforce). */
const cap = (description: string, max = QUOTA_MAXIMUM) =>
  boundedInt(1, max)
    .nullable()
    .openapi({ description: `${description} null: no limit.` });

const QUOTA_FIELDS = {
  activeJobs: cap("Jobs not yet ended (active or paused)."),
  runsPerMinute: cap(
    "Peak runs per minute summed over the tenant's jobs: for a schedule of times, the runs it starts in the 60 s from its next occurrence (a cron: in the whole minute of it); for a dependent (after), the sum of its upstreams' counts.",
  ),
  concurrentRuns: cap("Runs running at once; the rest wait.", MAX_CONCURRENT_RUNS_QUOTA),
  requestsPerSecond: count(
    "API requests per second (a token bucket holding two seconds' worth, per API process).",
  ),
  maxPriority: Priority.openapi({
    description: "The highest priority the tenant's jobs may take.",
  }),
};

const QuotasSchema = z.strictObject(QUOTA_FIELDS).openapi("Quotas");

/**
 * PUT body: the quotas the tenant's override sets; those left out take the deployment's defaults,
 * a counted quota set to null has no limit for this tenant.
 */
export const QuotaOverrideSchema = z
  .strictObject({
    activeJobs: QUOTA_FIELDS.activeJobs.optional(),
    runsPerMinute: QUOTA_FIELDS.runsPerMinute.optional(),
    concurrentRuns: QUOTA_FIELDS.concurrentRuns.optional(),
    requestsPerSecond: QUOTA_FIELDS.requestsPerSecond.optional(),
    maxPriority: QUOTA_FIELDS.maxPriority.optional(),
  })
  .openapi("QuotaOverride", { example: { concurrentRuns: 20, requestsPerSecond: 10 } });

export const TenantQuotasSchema = z
  .strictObject({
    tenantId: z.string(),
    quotas: QuotasSchema.openapi({
      description: "What applies now: the override where it sets a quota, else the default.",
    }),
    override: QuotaOverrideSchema.openapi({
      description: "The tenant's stored override ({} when it has none).",
    }),
    runningRuns: z
      .number()
      .int()
      .openapi({ description: "Runs holding a concurrent-runs slot now." }),
  })
  .openapi("TenantQuotas");

export const TenantIdParams = z.object({
  tenantId: z.string().openapi({ param: { name: "tenantId", in: "path" }, example: "tenant-a" }),
});
