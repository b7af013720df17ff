import type { Engine } from "../engine.js";
import { ConcurrentUpdateError } from "../errors.js";
import type { Job } from "../model.js";
import { isAfterSchedule } from "../schedule/index.js";
import type { AfterSchedule } from "../schedule/types.js";
import { getJobs, tenantJobIds } from "../storage/job-queries.js";
import {
  deleteRecountProgress,
  PROGRESS_KEPT_MS,
  type RecountProgress,
  readRecountProgress,
  writeRecountProgress,
} from "../storage/recount-progress.js";
import { type SeenUsage, sameSeenUsage } from "../storage/seen-usage.js";
import type { QuotaUsage } from "../storage/tenant-quotas.js";
import { peakRunsPerMinute } from "./limits.js";
import { isCounted, readJobsAbove, runsPerMinuteMeasure } from "./run-measure.js";

/** Jobs a page of the tenant index holds, each read whole after it. */
const PAGE_SIZE = 100;
/**
 * How long one request reads a recount's pages, whatever their number: pages of large jobs (a
 * 64 KiB payload each) take longer, and the API's function ends at 29 s.
 */
const RECOUNT_TIME_MS = 15_000;

/** What one request may still read of recounts: pages, and until when. */
export interface RecountBudget {
  pagesLeft: number;
  readonly until: number;
}

/** A request's recount budget: `quotaRecountPages` pages, for at most RECOUNT_TIME_MS. */
export const recountBudget = (engine: Engine): RecountBudget => ({
  pagesLeft: engine.settings.quotaRecountPages,
  until: engine.clock().getTime() + RECOUNT_TIME_MS,
});

const capped = (n: number): number => Math.min(n, Number.MAX_SAFE_INTEGER);

/**
 * What a measure reads of a job (its schedule, status and tenant), its large parts (payload,
 * target, runs, dependents) left out: a part keeps every job it read, up to 50,000, for the
 * measures of the `after` jobs among them, within the API function's 512 MB.
 */
const measuredPart = ({ target: _target, ...job }: Job): Job => ({
  ...job,
  payload: null,
  activeRuns: {},
  parkedRuns: {},
  dependents: [],
  lastRun: null,
});

/**
 * The tenant's usage as its jobs stand: those not ended (ACTIVE or PAUSED) and the sum of their
 * measures (run-measure.ts; an `after` job's among the jobs above it), as the reservations count
 * them. It reads every job of the tenant (its index, a page of 100 at a time, and each job; ended
 * jobs too, until their retention), which on a large tenant is more than a request can read before
 * the API's timeout: a request reads what its `budget` allows, records where it stopped
 * (`RecountProgress`) and answers busy (503, Retry-After), and the next request over a quota goes
 * on from there while the usage it will replace is still `seen` (a reservation or give-back
 * meanwhile starts it afresh: its write would be refused). A kill at any point leaves at most the
 * part read since the last record to read again.
 */
export async function countUsage(
  engine: Engine,
  tenantId: string,
  now: Date,
  seen: SeenUsage | null,
  budget: RecountBudget,
): Promise<QuotaUsage> {
  const { step, progress: stored } = await readRecountProgress(engine, tenantId);
  const goesOn =
    stored !== null &&
    sameSeenUsage(stored.basis, seen) &&
    now.getTime() - Date.parse(stored.startedAt) < PROGRESS_KEPT_MS;
  let cursor = goesOn ? stored.cursor : undefined;
  let counted = goesOn ? stored.counted : { activeJobs: 0, runsPerMinute: 0 };
  // The jobs read by this request: an `after` job's upstreams are often on its later pages, so
  // its measure is taken once the part's pages are read, reading only the upstreams not among them.
  const known = new Map<string, Job>();
  // The schedules of the part's `after` jobs, not the jobs: those are read whole (payload and all).
  let after: AfterSchedule[] = [];
  const measureAfterJobs = async () => {
    const upstreams = after.flatMap((schedule) => schedule.after.jobs);
    await readJobsAbove(engine, tenantId, upstreams, known);
    const measure = runsPerMinuteMeasure(known, now);
    let runsPerMinute = counted.runsPerMinute;
    for (const schedule of after) runsPerMinute = capped(runsPerMinute + measure(schedule));
    counted = { ...counted, runsPerMinute };
    after = [];
  };
  for (let pages = 0; ; pages++) {
    if (pages > 0 && (budget.pagesLeft <= 0 || engine.clock().getTime() >= budget.until)) {
      await measureAfterJobs();
      const part: RecountProgress = {
        basis: seen,
        startedAt: goesOn ? stored.startedAt : now.toISOString(),
        cursor: cursor ?? {},
        counted,
        step: (step ?? 0) + 1,
      };
      await writeRecountProgress(engine, tenantId, part, step);
      throw new ConcurrentUpdateError(
        `the tenant's quota usage is being recounted (${counted.activeJobs} active jobs counted so far); try again`,
        { subject: "quota recount" },
      );
    }
    budget.pagesLeft--;
    const page = await tenantJobIds(engine, tenantId, { limit: PAGE_SIZE, startKey: cursor });
    const jobs = (await getJobs(engine, page.items)).filter((job) => job.tenantId === tenantId);
    for (const job of jobs) known.set(job.jobId, measuredPart(job));
    const live = jobs.filter(isCounted);
    let runsPerMinute = counted.runsPerMinute;
    for (const job of live) {
      if (isAfterSchedule(job.schedule)) after.push(job.schedule);
      else runsPerMinute = capped(runsPerMinute + peakRunsPerMinute(job.schedule, now));
    }
    counted = { activeJobs: counted.activeJobs + live.length, runsPerMinute };
    cursor = page.lastKey;
    if (cursor === undefined) break;
  }
  await measureAfterJobs();
  if (step !== undefined) await deleteRecountProgress(engine, tenantId);
  return counted;
}
