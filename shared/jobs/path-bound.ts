import { depthFirstFold } from "../depth-first.js";
import type { Engine } from "../engine.js";
import type { Job } from "../model.js";
import { readJobsAbove, readJobsBelow } from "../quotas/run-measure.js";
import { isAfterSchedule, type ScheduleSpec } from "../schedule/index.js";
import { MAX_RUNS_PER_RUN_ABOVE } from "../schedule/parse.js";
import { ValidationError } from "../validation.js";

/*
 * The bound on paths of `after` links (MAX_RUNS_PER_RUN_ABOVE, docs/api.md "Dependencies"). Each
 * run of an upstream queues one run of each job after it, so a job runs once per path from a job
 * above it down to it, and paths multiply: a lattice of width 2 (each layer's two jobs after both
 * of the layer above) runs its layer k 2^(k-1) times per run of its top, and 40 layers would queue
 * about 2^40 runs from one trigger (a request, outside runsPerMinute), written by the workers into
 * the tables and queues every tenant shares. Bounded per pair of jobs, one run queues at most that
 * many runs of each job below it: what it queues grows with the tenant's jobs (activeJobs), not
 * exponentially with its graph's depth. Chains and fan-outs make one path, a diamond 2, a job
 * after 20 jobs that run after one 20.
 */

const FIELD = "schedule.after.jobs";

/**
 * The most levels below a job an edit of its upstreams takes: on its longest path of `after` links
 * down, and so in its read below too (a level a round trip, by the shortest path to each job).
 * Creates and edits take at most 80 jobs above new upstreams (dependencies.ts), so with this a
 * chain that creates and edits build is at most 80 + 1 + 80 jobs long, and every walk of a
 * tenant's graph stays within the API's time. Without it, edits joined chains end to end.
 */
export const MAX_LEVELS_BELOW_EDIT = 80;

const upstreamIds = (schedule: ScheduleSpec): readonly string[] =>
  isAfterSchedule(schedule) ? [...new Set(schedule.after.jobs)] : [];

/**
 * The paths to each job from each job of `sources` above it, by source (in the order met).
 * `schedules` holds every job on a path between them (each job's upstreams, by id); a job not in
 * it starts no path. Walked on a stack of its own (`depthFirstFold`): the jobs above those below
 * an edited job are read without a depth bound, and a graph built before it may be thousands deep.
 */
export function pathsFrom(
  schedules: ReadonlyMap<string, ScheduleSpec>,
  sources: ReadonlySet<string>,
): (id: string) => ReadonlyMap<string, number> {
  const add = (paths: Map<string, number>, source: string, n: number) =>
    paths.set(source, Math.min(Number.MAX_SAFE_INTEGER, (paths.get(source) ?? 0) + n));
  return depthFirstFold<Map<string, number>, ReadonlyMap<string, number>>({
    children: (id) => {
      const schedule = schedules.get(id);
      return schedule === undefined ? undefined : upstreamIds(schedule);
    },
    start: () => new Map(),
    add: (paths, upstream, above) => {
      if (sources.has(upstream)) add(paths, upstream, 1);
      for (const [source, n] of above) add(paths, source, n);
    },
    end: (paths) => paths,
    // A cycle (which edits refuse) adds nothing more.
    none: () => new Map(),
  });
}

/**
 * Refuses (400 naming `schedule.after.jobs`) a graph where one run of a job of `sources` would
 * queue more than MAX_RUNS_PER_RUN_ABOVE runs of a job of `targets` (`pathsFrom`).
 */
function checkPaths(
  schedules: ReadonlyMap<string, ScheduleSpec>,
  sources: ReadonlySet<string>,
  targets: Iterable<string>,
  target: (id: string) => string,
): void {
  const pathsTo = pathsFrom(schedules, sources);
  for (const id of targets) {
    for (const [source, n] of pathsTo(id)) {
      if (n > MAX_RUNS_PER_RUN_ABOVE)
        throw new ValidationError([
          {
            field: FIELD,
            message: `one run of job ${source} would run ${target(id)} ${n.toLocaleString("en-US")} times, once for each path of after links from it down to it: at most ${MAX_RUNS_PER_RUN_ABOVE} are allowed`,
          },
        ]);
    }
  }
}

/**
 * A new job after `schedule`'s upstreams: refused when one run of a job above it (`above`, the
 * whole chain its check read) would run it more than MAX_RUNS_PER_RUN_ABOVE times. Nothing is
 * below a new job, so the jobs above it are all the paths to it.
 */
export function checkNewJobPaths(
  jobId: string,
  schedule: ScheduleSpec,
  above: ReadonlyMap<string, Job>,
): void {
  const schedules = new Map([...above].map(([id, job]) => [id, job.schedule]));
  schedules.set(jobId, schedule);
  checkPaths(schedules, new Set(above.keys()), [jobId], () => "this job");
}

/**
 * An edit of `job`'s upstreams to `schedule`'s: refused when one run of a job now above it
 * (`above`) would run it, or a job below it, more than MAX_RUNS_PER_RUN_ABOVE times. Only paths
 * through the job change, so only the jobs above it are sources; a path from one of them to a job
 * below may also pass by the job, through jobs above that one only: those are read too.
 */
export async function checkEditedJobPaths(
  engine: Engine,
  job: Job,
  schedule: ScheduleSpec,
  above: ReadonlyMap<string, Job>,
): Promise<void> {
  const sources = new Set(above.keys());
  const named = (id: string) => (id === job.jobId ? "this job" : `job ${id}`);
  if (job.dependents.length === 0) {
    checkNewJobPaths(job.jobId, schedule, above);
    return;
  }
  const below = await readJobsBelow(engine, job, MAX_LEVELS_BELOW_EDIT);
  // The read stops at the shortest path's levels; a link from the job into the middle of a longer
  // chain below it makes that shallow, so the longest path is measured on what was read.
  if (below === undefined || longestPathBelow(job.jobId, below) > MAX_LEVELS_BELOW_EDIT)
    throw new ValidationError([
      {
        field: FIELD,
        message: `the jobs after this one reach more than ${MAX_LEVELS_BELOW_EDIT} levels below it: too deep to count the runs this edit would make them run`,
      },
    ]);
  const known = new Map([...above, ...below]);
  const reached = await readJobsAbove(
    engine,
    job.tenantId,
    [...below.values()]
      .filter((j) => j.jobId !== job.jobId)
      .flatMap((j) => upstreamIds(j.schedule)),
    known,
  );
  const schedules = new Map([...reached].map(([id, j]) => [id, j.schedule]));
  schedules.set(job.jobId, schedule);
  checkPaths(schedules, sources, below.keys(), named);
}

/** The links on the longest path down from `jobId` through `below` (jobs by id, by their dependents). */
function longestPathBelow(jobId: string, below: ReadonlyMap<string, Job>): number {
  return depthFirstFold<{ links: number }, number>({
    children: (id) => below.get(id)?.dependents.filter((dependent) => below.has(dependent)),
    start: () => ({ links: 0 }),
    add: (longest, _dependent, links) => {
      longest.links = Math.max(longest.links, links + 1);
    },
    end: ({ links }) => links,
    // A cycle (which edits refuse) adds nothing more.
    none: () => 0,
  })(jobId);
}
