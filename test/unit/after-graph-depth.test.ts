import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { pathsFrom } from "../../shared/jobs/path-bound.js";
import type { Job } from "../../shared/model.js";
import { peakRunsPerMinute } from "../../shared/quotas/limits.js";
import { isCounted, runsPerMinuteMeasure, runsPerRun } from "../../shared/quotas/run-measure.js";
import { isAfterSchedule, type ScheduleSpec } from "../../shared/schedule/index.js";
import { storedJob } from "../support/engine-fixture.js";

/**
 * The walks of an `after` graph that count paths and runs, on graphs too deep for a recursion:
 * creates read at most 80 jobs above a new job, but an edit may put a chain of 80 below the bottom
 * of another, and again, so a tenant's chain is as deep as it has jobs (activeJobs has no default
 * limit). Counted recursively, one frame a job, such a chain overflowed the call stack.
 */

const NOW = new Date("2026-03-01T12:00:00.000Z");
const DEEP = 50_000;

const runsAfter = (...ids: string[]): ScheduleSpec => ({ after: { jobs: ids, on: "success" } });

const BASE = storedJob("", NOW, { tenantId: "deep" });

const jobOf = (jobId: string, schedule: ScheduleSpec, dependents: string[] = []): Job => ({
  ...BASE,
  jobId,
  schedule,
  dependents,
});

/** `top` (a cron every minute), then `length` jobs each after the one before: the last is returned. */
function chain(length: number, top: Job = jobOf("c0", { cron: "* * * * *", timezone: "UTC" })) {
  const jobs = new Map<string, Job>([[top.jobId, top]]);
  let above = top;
  for (let i = 1; i <= length; i++) {
    const job = jobOf(`c${i}`, runsAfter(above.jobId));
    jobs.set(above.jobId, { ...above, dependents: [job.jobId] });
    jobs.set(job.jobId, job);
    above = job;
  }
  return { jobs, top: top.jobId, bottom: above.jobId };
}

describe("the walks of an after graph take chains as deep as a tenant's jobs", () => {
  const schedules = (jobs: ReadonlyMap<string, Job>) =>
    new Map([...jobs].map(([id, job]) => [id, job.schedule]));

  it(`counts the paths to a job below a chain ${DEEP.toLocaleString("en-US")} deep`, () => {
    // As an edit that puts the chain's top after a job counts them (`checkEditedJobPaths`): its
    // sources are the jobs above the edited one (80 at most), its targets the chain below it.
    const { jobs, top, bottom } = chain(DEEP);
    expect([...pathsFrom(schedules(jobs), new Set([top]))(bottom)]).toEqual([[top, 1]]);
  });

  it("counts the paths multiplied by a lattice above such a chain", () => {
    // Seven layers of two, each after both above: 128 paths from `root` to the chain's top.
    const jobs = new Map<string, Job>([["root", jobOf("root", { runAt: NOW.toISOString() })]]);
    let above = ["root"];
    for (let k = 1; k <= 7; k++) {
      const layer = [`l${k}a`, `l${k}b`];
      for (const id of layer) jobs.set(id, jobOf(id, runsAfter(...above)));
      above = layer;
    }
    const deep = chain(DEEP, jobOf("c0", runsAfter(...above)));
    for (const [id, job] of deep.jobs) jobs.set(id, job);
    const sources = new Set(["root", "l4a"]);
    expect([...pathsFrom(schedules(jobs), sources)(deep.bottom)]).toEqual([
      ["l4a", 8],
      ["root", 128],
    ]);
  });

  it("counts the runs one run of the top of such a chain makes", () => {
    const { jobs, top } = chain(DEEP);
    expect(runsPerRun(top, jobs)).toBe(DEEP + 1);
  });

  it("measures a job below such a chain as its top's peak", () => {
    const { jobs, bottom } = chain(DEEP);
    expect(runsPerMinuteMeasure(jobs, NOW)(runsAfter(bottom))).toBe(1);
  });
});

/*
 * The recursions the walks replaced, as they were: the reference each walk must equal, in values
 * and in the order a job's paths list their sources (the first past the bound is the one a 400
 * names), on any graph, cycles and jobs not read included.
 */
const upstreamIds = (schedule: ScheduleSpec): readonly string[] =>
  isAfterSchedule(schedule) ? [...new Set(schedule.after.jobs)] : [];
const saturated = (n: number): number => Math.min(n, Number.MAX_SAFE_INTEGER);

function recursivePathsFrom(
  schedules: ReadonlyMap<string, ScheduleSpec>,
  sources: ReadonlySet<string>,
): (id: string) => ReadonlyMap<string, number> {
  const pathsTo = new Map<string, Map<string, number>>();
  const onChain = new Set<string>();
  const of = (id: string): Map<string, number> => {
    const known = pathsTo.get(id);
    if (known !== undefined) return known;
    const paths = new Map<string, number>();
    const schedule = schedules.get(id);
    if (schedule === undefined || onChain.has(id)) return paths;
    onChain.add(id);
    for (const upstream of upstreamIds(schedule)) {
      const add = (source: string, n: number) =>
        paths.set(source, Math.min(Number.MAX_SAFE_INTEGER, (paths.get(source) ?? 0) + n));
      if (sources.has(upstream)) add(upstream, 1);
      for (const [source, n] of of(upstream)) add(source, n);
    }
    onChain.delete(id);
    pathsTo.set(id, paths);
    return paths;
  };
  return of;
}

function recursiveMeasure(
  jobs: ReadonlyMap<string, Job>,
  now: Date,
): (schedule: ScheduleSpec) => number {
  const measured = new Map<string, number>();
  const onChain = new Set<string>();
  const ofSchedule = (schedule: ScheduleSpec): number => {
    if (!isAfterSchedule(schedule)) return peakRunsPerMinute(schedule, now);
    let sum = 0;
    for (const id of schedule.after.jobs) sum = saturated(sum + ofJob(id));
    return sum;
  };
  const ofJob = (id: string): number => {
    const known = measured.get(id);
    if (known !== undefined) return known;
    const job = jobs.get(id);
    if (job === undefined || !isCounted(job) || onChain.has(id)) return 0;
    onChain.add(id);
    const measure = ofSchedule(job.schedule);
    onChain.delete(id);
    measured.set(id, measure);
    return measure;
  };
  return ofSchedule;
}

function recursiveRunsPerRun(jobId: string, jobs: ReadonlyMap<string, Job>): number {
  const counted = new Map<string, number>();
  const onChain = new Set<string>();
  const of = (id: string): number => {
    const known = counted.get(id);
    if (known !== undefined) return known;
    const job = jobs.get(id);
    if (job === undefined || onChain.has(id)) return 0;
    onChain.add(id);
    let runs = 1;
    for (const dependentId of job.dependents) {
      const dependent = jobs.get(dependentId);
      const runsAfter =
        dependent !== undefined &&
        dependent.tenantId === job.tenantId &&
        isCounted(dependent) &&
        isAfterSchedule(dependent.schedule) &&
        dependent.schedule.after.jobs.includes(id);
      if (runsAfter) runs = saturated(runs + of(dependentId));
    }
    onChain.delete(id);
    counted.set(id, runs);
    return runs;
  };
  return of(jobId);
}

/** Up to 24 jobs, `j0`..; each after some of them (`dag`: only those before it), and ids never read. */
const graphs = (dag: boolean) =>
  fc.integer({ min: 1, max: 24 }).chain((n) => {
    const id = fc.oneof(
      { weight: 9, arbitrary: fc.nat({ max: n - 1 }).map((i) => `j${i}`) },
      { weight: 1, arbitrary: fc.constant("unread") },
    );
    const job = (i: number) =>
      fc
        .record({
          times: fc.constantFrom<ScheduleSpec | null>(
            null,
            null,
            { runAt: NOW.toISOString() },
            { cron: "* * * * *", timezone: "UTC" },
            { cron: "*/10 * * * * *", timezone: "UTC" },
          ),
          upstreams: fc.array(id, { maxLength: 5 }),
          dependents: fc.uniqueArray(id, { maxLength: 6 }),
          status: fc.constantFrom<Job["status"]>("ACTIVE", "ACTIVE", "PAUSED", "CANCELLED"),
          tenantId: fc.constantFrom("deep", "deep", "deep", "other"),
        })
        .map(({ times, upstreams, dependents, status, tenantId }): Job => {
          const above = dag
            ? upstreams.filter((u) => u === "unread" || Number(u.slice(1)) < i)
            : upstreams;
          return {
            ...jobOf(`j${i}`, times ?? runsAfter(...above), dependents),
            status,
            tenantId,
          };
        });
    return fc.tuple(
      fc.tuple(...Array.from({ length: n }, (_, i) => job(i))),
      fc.uniqueArray(id, { maxLength: 6 }),
      fc.array(id, { minLength: 1, maxLength: 12 }),
    );
  });

describe("the walks count as the recursions they replaced did", () => {
  for (const dag of [true, false]) {
    it(`on random ${dag ? "DAGs" : "graphs, cycles included"}`, () => {
      fc.assert(
        fc.property(graphs(dag), ([list, sourceList, asked]) => {
          const jobs = new Map(list.map((job) => [job.jobId, job]));
          const schedules = new Map(list.map((job) => [job.jobId, job.schedule]));
          const sources = new Set(sourceList);
          // The same questions in the same order: each answers from what the ones before kept.
          const walked = pathsFrom(schedules, sources);
          const recursed = recursivePathsFrom(schedules, sources);
          for (const id of asked) expect([...walked(id)]).toEqual([...recursed(id)]);
          const measure = runsPerMinuteMeasure(jobs, NOW);
          const recursiveOf = recursiveMeasure(jobs, NOW);
          for (const id of asked) {
            const schedule = jobs.get(id)?.schedule ?? runsAfter(id);
            expect(measure(schedule)).toBe(recursiveOf(schedule));
            expect(runsPerRun(id, jobs)).toBe(recursiveRunsPerRun(id, jobs));
          }
        }),
        { numRuns: 300 },
      );
    });
  }
});
