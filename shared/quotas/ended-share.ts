import type { Engine } from "../engine.js";
import type { Job } from "../model.js";
import { isAfterSchedule } from "../schedule/index.js";
import { readRecountToken } from "../storage/quota-recount.js";
import type { UsageReservation } from "../storage/tenant-quotas.js";
import { effectiveQuotas } from "./limits.js";
import { cachedQuotaOverride } from "./override-cache.js";
import { isCounted, readJobsAbove, runsPerMinuteMeasure } from "./run-measure.js";

/**
 * What a job's cancel or delete gives back of its tenant's usage, read before the job's write
 * (`giveBackJobQuotas` takes it off once the write is applied): one job, and the job's own measure
 * among the jobs above it (its dependents' measures through it stay in the usage, an upper bound,
 * until a recount). Conditioned on the usage's recount token as read here, before the job ended:
 * a recount since may have counted the job ended already, so nothing is taken off then, and a
 * recount that read the usage before the give-back fails its own write. Null when nothing is
 * given back: the job is not counted (ended already), the tenant has no counted limit (the
 * override as this process caches it) or no usage yet.
 *
 * Only the cancel and the delete of the API give back: a job that ends by its runs (a one-off's,
 * `maxRuns`, `endAt`) is taken off by the next recount, so a run's path writes nothing for it.
 */
export async function endedJobShare(
  engine: Engine,
  job: Job,
  now: Date,
): Promise<UsageReservation | null> {
  if (!isCounted(job)) return null;
  const quotas = effectiveQuotas(
    engine.settings.quotas,
    await cachedQuotaOverride(engine, job.tenantId),
  );
  if (quotas.activeJobs === null && quotas.runsPerMinute === null) return null;
  const recount = await readRecountToken(engine, job.tenantId);
  if (recount === undefined) return null;
  const upstreams = isAfterSchedule(job.schedule) ? job.schedule.after.jobs : [];
  const above = await readJobsAbove(engine, job.tenantId, upstreams);
  return {
    tenantId: job.tenantId,
    added: { activeJobs: 1, runsPerMinute: runsPerMinuteMeasure(above, now)(job.schedule) },
    recount,
  };
}
