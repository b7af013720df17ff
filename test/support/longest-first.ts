import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that take longest in `npm test`, longest first within their group, by a profile of the
 * whole suite (7 December 2026, of 8d02171, seconds per file on two cores with coverage; other
 * helpers' runs loaded the machine in its second half, so the figures are about 1.5 times a quiet
 * machine's), the files trimmed since at what their trims left of them (each back to back here
 * before and after, loaded: shard-count-rolling 212 then, about 61 now; noisy-tenant-gate-backlog
 * 58, about 35; history-paused-edit-resume 47, about 31; zone-cache 37 and dst-rules.property 34,
 * under 15 now and off the list): dst-dispatch 140, model 88, the sandbox's cli 82, long-jobs 75,
 * console 68, shard-count-rolling about 61, listed-runs-bound 50, dispatch-recovery 48,
 * claim-plain-rollback 48, worker-lifecycle-faults 47, restart 44, dispatch 43, reaper-cursor 42,
 * noisy-tenant 38, clock-skew 35, noisy-tenant-gate-backlog about 35, overlap-reruns 34, the
 * client's cli 33, history-paused-edit-resume about 31, bench-args 27, fairness 26, edit-kept-end
 * 26, catch-up-cap 26, stack 25, history-skipped-records 25, offset-change-dispatch 24,
 * retry-again-edges 24. Files under about 24 s there are left to vitest's order. Of the timed
 * files: the end-to-end file 45, policies 45, run-cancel 20, retries 18; worker-fencing,
 * dispatch-on-time and worker-loop under 15.
 *
 * Vitest starts the longest files first only when its results cache knows their durations; a fresh
 * clone (CI) has no cache and runs the files of each project largest first, which is not longest
 * first: shard-count-rolling, a 90-line file of one test, absent from this list, started 1,226 s
 * into that run and ended the services group 212 s later. Vitest runs the files of one group
 * (`sequence.groupOrder`) from one queue whatever their project, so a long file of one project
 * (a unit file) starts among the long files of another rather than after all of them. The spike
 * and chaos run alone, one at a time: their order does not change when they end.
 */
const LONGEST = [
  "test/integration/dst-dispatch.test.ts",
  "test/model/model.test.ts",
  "test/sandbox/cli.test.ts",
  "test/integration/long-jobs.test.ts",
  "test/console/console.test.ts",
  "test/integration/shard-count-rolling.test.ts",
  "test/integration/listed-runs-bound.test.ts",
  "test/integration/dispatch-recovery.test.ts",
  "test/integration/claim-plain-rollback.test.ts",
  "test/integration/worker-lifecycle-faults.test.ts",
  "test/sandbox/restart.test.ts",
  "test/integration/dispatch.test.ts",
  "test/integration/reaper-cursor.test.ts",
  "test/integration/noisy-tenant.test.ts",
  "test/integration/clock-skew.test.ts",
  "test/integration/noisy-tenant-gate-backlog.test.ts",
  "test/integration/overlap-reruns.test.ts",
  "test/client/cli.test.ts",
  "test/api/history-paused-edit-resume.test.ts",
  "test/unit/bench-args.test.ts",
  "test/integration/fairness.test.ts",
  "test/api/edit-kept-end.test.ts",
  "test/integration/catch-up-cap.test.ts",
  "test/infra/stack.test.ts",
  "test/integration/history-skipped-records.test.ts",
  "test/integration/offset-change-dispatch.test.ts",
  "test/integration/retry-again-edges.test.ts",
  // The timed group.
  "test/e2e/scheduler.e2e.test.ts",
  "test/integration/policies.test.ts",
  "test/integration/run-cancel.test.ts",
  "test/integration/retries-and-types.test.ts",
  "test/integration/worker-fencing.test.ts",
  "test/integration/dispatch-on-time.test.ts",
  "test/integration/worker-loop.test.ts",
];

function rank(file: TestSpecification): number {
  const index = LONGEST.findIndex((path) => file.moduleId.endsWith(path));
  return index === -1 ? LONGEST.length : index;
}

/** Vitest's order (groups apart, then projects, then cached durations), with the known long files first in each group. */
export class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    return sorted
      .map((file, position) => ({ file, position }))
      .sort(
        (a, b) =>
          a.file.project.config.sequence.groupOrder - b.file.project.config.sequence.groupOrder ||
          rank(a.file) - rank(b.file) ||
          a.position - b.position,
      )
      .map(({ file }) => file);
  }
}
