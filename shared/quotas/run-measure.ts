import { depthFirstFold } from "../depth-first.js";
import type { Engine } from "../engine.js";
import type { Job } from "../model.js";
import { isAfterSchedule, type ScheduleSpec } from "../schedule/index.js";
import { getJobs } from "../storage/job-queries.js";
import { peakRunsPerMinute } from "./limits.js";

/**
 * What a job counts towards runsPerMinute, its measure: the runs it can start in a minute.
 *
 * - A schedule of times: its peak (`peakRunsPerMinute`; a one-off 0).
 * - An `after` schedule: the sum of its upstreams' measures. Each run of an upstream that ends
 *   queues one run of it, and an upstream that is itself a dependent runs as often as its own
 *   upstreams make it: a chain A → B → C counts A's peak at every level, and a job after A and B
 *   counts both. An upstream that is ended (CANCELLED, COMPLETED: it runs no more) or gone counts 0.
 *
 * Summed over the tenant's jobs, each job of times counts once for itself and once for every path
 * from it down to a job after it, so an edit that changes a job's measure by δ changes the sum by
 * δ times `runsPerRun` of the job (itself and what its runs trigger below it).
 */

/** The jobs the quotas count: not ended (ACTIVE or PAUSED). */
export const isCounted = (job: Pick<Job, "status">): boolean =>
  job.status === "ACTIVE" || job.status === "PAUSED";

/** Sums past what a number holds exactly stay at that: a measure so large is over any quota. */
const saturated = (n: number): number => Math.min(n, Number.MAX_SAFE_INTEGER);

/**
 * The measure of a schedule among `jobs` (the tenant's jobs by id, as read: those above it for one
 * job, all of them for a recount). Memoized per job, so a recount measures each job once. A job met
 * again on its own chain (a cycle, which edits refuse) adds nothing more. Walked on a stack of its
 * own (`depthFirstFold`): a tenant's chain is as deep as it has jobs.
 */
export function runsPerMinuteMeasure(
  jobs: ReadonlyMap<string, Job>,
  now: Date,
): (schedule: ScheduleSpec) => number {
  const ofJob = depthFirstFold<{ sum: number }, number>({
    children: (id) => {
      const job = jobs.get(id);
      if (job === undefined || !isCounted(job)) return undefined;
      return isAfterSchedule(job.schedule) ? job.schedule.after.jobs : [];
    },
    // A schedule of times counts its peak; an `after` one (peak 0) its upstreams' sum.
    start: (id) => {
      const schedule = jobs.get(id)?.schedule;
      return { sum: schedule === undefined ? 0 : peakRunsPerMinute(schedule, now) };
    },
    add: (measure, _upstream, n) => {
      measure.sum = saturated(measure.sum + n);
    },
    end: ({ sum }) => sum,
    none: () => 0,
  });
  return (schedule) => {
    if (!isAfterSchedule(schedule)) return peakRunsPerMinute(schedule, now);
    let sum = 0;
    for (const id of schedule.after.jobs) sum = saturated(sum + ofJob(id));
    return sum;
  };
}

/**
 * How many runs one run of the job makes among `jobs` (the job and those below it, as read): its
 * own, and for each counted job after it, as many as one run of that job makes. One for a job
 * nothing runs after. Walked on a stack of its own, as `runsPerMinuteMeasure` is.
 */
export function runsPerRun(jobId: string, jobs: ReadonlyMap<string, Job>): number {
  return depthFirstFold<{ runs: number }, number>({
    children: (id) => {
      const job = jobs.get(id);
      // The dependents set is taken from after a cancel's commit: the schedule is the truth.
      return job?.dependents.filter((dependentId) => {
        const dependent = jobs.get(dependentId);
        return (
          dependent !== undefined &&
          dependent.tenantId === job.tenantId &&
          isCounted(dependent) &&
          isAfterSchedule(dependent.schedule) &&
          dependent.schedule.after.jobs.includes(id)
        );
      });
    },
    start: () => ({ runs: 1 }),
    add: (counted, _dependent, n) => {
      counted.runs = saturated(counted.runs + n);
    },
    end: ({ runs }) => runs,
    none: () => 0,
  })(jobId);
}

/** The product, saturated as the sums are. */
export const timesRuns = (measure: number, runs: number): number => saturated(measure * runs);

/**
 * The tenant's jobs above `upstreams` (theirs, and theirs in turn), by id, read consistently one
 * level at a time, added to `known` (jobs already read, which are not read again). Another
 * tenant's job is left out (it counts 0).
 */
export async function readJobsAbove(
  engine: Engine,
  tenantId: string,
  upstreams: readonly string[],
  known: Map<string, Job> = new Map(),
): Promise<Map<string, Job>> {
  await readJobsReachable(engine, tenantId, known, upstreams, (job) =>
    isAfterSchedule(job.schedule) ? job.schedule.after.jobs : [],
  );
  return known;
}

/**
 * The job and the tenant's jobs below it (its dependents, and theirs in turn), by id, read
 * consistently one level at a time after the job was: a dependent linked before the job's read is
 * among them. With `levels`, at most that many levels below the job are read, and `undefined`
 * answers when jobs lie deeper (what it read past that is not returned).
 */
export function readJobsBelow(engine: Engine, job: Job): Promise<Map<string, Job>>;
export function readJobsBelow(
  engine: Engine,
  job: Job,
  levels: number,
): Promise<Map<string, Job> | undefined>;
export async function readJobsBelow(
  engine: Engine,
  job: Job,
  levels = Number.POSITIVE_INFINITY,
): Promise<Map<string, Job> | undefined> {
  const found = new Map([[job.jobId, job]]);
  const deeper = await readJobsReachable(
    engine,
    job.tenantId,
    found,
    [...job.dependents],
    (dependent) => dependent.dependents,
    levels,
  );
  return deeper ? undefined : found;
}

/**
 * Adds to `found` the tenant's jobs reached from `start` through `next`, read level by level, at
 * most `levels` levels; true when jobs are left unread below the last.
 */
async function readJobsReachable(
  engine: Engine,
  tenantId: string,
  found: Map<string, Job>,
  start: readonly string[],
  next: (job: Job) => Iterable<string>,
  levels = Number.POSITIVE_INFINITY,
): Promise<boolean> {
  let frontier = [...new Set(start)].filter((id) => !found.has(id));
  for (let level = 0; frontier.length > 0; level++) {
    if (level === levels) return true;
    const reached = new Set<string>();
    for (const job of await getJobs(engine, frontier, { consistent: true })) {
      if (job.tenantId !== tenantId) continue;
      found.set(job.jobId, job);
      for (const id of next(job)) if (!found.has(id)) reached.add(id);
    }
    frontier = [...reached].filter((id) => !found.has(id));
  }
  return false;
}
