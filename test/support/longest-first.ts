import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that take longest in `npm test`, longest first within their group, by the last
 * fresh-clone CI (5 December 2026, of b09799d, on a heavily loaded machine: seconds on two cores,
 * with coverage, about 2.5 times a quiet machine's), the files trimmed since at what their trims
 * took off (dst-dispatch 186 then, claim-plain-rollback 113, model 102, leap-day-max-runs 55,
 * quota-accounting 86, stack 57, variants 50, claim-plain-races 52, run-control-attacks 49,
 * claim-puts 40, offset-change-dispatch 138, clock-skew 67, console 153): listed-runs-bound 181,
 * console about 135, cli 125, dispatch-recovery 113, restart 111, synth-offline 101, the sandbox's
 * cli 77, model about 77, claim-plain-rollback about 76, long-jobs 70, dispatch 70, resources 64,
 * dst-dispatch about 62, client 56, offset-change-dispatch about 55, security 55, noisy-tenant 51,
 * restore-from-backup 51, jobs-page-cursors 45, clock-skew about 44, oidc 43, quota-accounting
 * about 40. Files under about 40 s there are left to vitest's order. Of the timed files: the end-to-end file 81,
 * policies 49, worker-fencing 30, run-cancel 18, retries 16, dispatch-on-time 10, worker-loop 7.
 *
 * Vitest starts the longest files first only when its results cache knows their durations; a fresh
 * clone (CI) has no cache and runs the files of each project largest first, which is not longest
 * first (fairness, 15 s, is a third the size of contract, under 3 s): dst-dispatch and
 * crashed-first-attempt, absent from this list once, started 306 and 318 s into a run. Vitest runs
 * the files of one group (`sequence.groupOrder`) from one queue whatever their project, so a long
 * file of one project starts among the long files of another rather than after all of them. The
 * spike and chaos run alone, one at a time: their order does not change when they end.
 */
const LONGEST = [
  "test/integration/listed-runs-bound.test.ts",
  "test/console/console.test.ts",
  "test/client/cli.test.ts",
  "test/integration/dispatch-recovery.test.ts",
  "test/sandbox/restart.test.ts",
  "test/infra/synth-offline.test.ts",
  "test/sandbox/cli.test.ts",
  "test/model/model.test.ts",
  "test/integration/claim-plain-rollback.test.ts",
  "test/integration/long-jobs.test.ts",
  "test/integration/dispatch.test.ts",
  "test/sandbox/resources.test.ts",
  "test/integration/dst-dispatch.test.ts",
  "test/client/client.test.ts",
  "test/integration/offset-change-dispatch.test.ts",
  "test/console/security.test.ts",
  "test/integration/noisy-tenant.test.ts",
  "test/integration/restore-from-backup.test.ts",
  "test/api/jobs-page-cursors.test.ts",
  "test/integration/clock-skew.test.ts",
  "test/console/oidc.test.ts",
  "test/api/quota-accounting.test.ts",
  // The timed group.
  "test/e2e/scheduler.e2e.test.ts",
  "test/integration/policies.test.ts",
  "test/integration/worker-fencing.test.ts",
  "test/integration/run-cancel.test.ts",
  "test/integration/retries-and-types.test.ts",
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
