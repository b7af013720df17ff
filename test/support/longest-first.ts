import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that take longest in `npm test`, longest first within their group, by the last
 * fresh-clone CI (5 December 2026, 683 s; seconds on two cores, with coverage): console 76,
 * dst-dispatch 68, restart 44, model 38, clock-skew 32, dispatch-recovery 31, jobs-page-cursors 23,
 * restore-from-backup 23, listed-runs-bound 23, cli 21, silent-endpoint 20, quotas 18, dispatch 17,
 * parked-runs-limit 16, fairness 15, outage-past-retention 15, quota-accounting 15, security 14,
 * client 14, run-endings 14, unwritten-start 12, claim-puts 12, the sandbox's cli 11,
 * synth-offline 11; crashed-first-attempt (24 s then) is ranked by the 13-15 s it takes alone
 * since its misfire cases run side by side. Files under 11 s (hostile-server, allow-bound, endings
 * and batch-create among them since their waits went) are left to vitest's order. Of the timed
 * files: the end-to-end file 26, policies 22, worker-fencing 19, run-cancel 16 (22 then, its
 * describes one after another), retries 11, dispatch-on-time 10, worker-loop 8-9 (11 then).
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
  "test/console/console.test.ts",
  "test/integration/dst-dispatch.test.ts",
  "test/sandbox/restart.test.ts",
  "test/model/model.test.ts",
  "test/integration/clock-skew.test.ts",
  "test/integration/dispatch-recovery.test.ts",
  "test/api/jobs-page-cursors.test.ts",
  "test/integration/restore-from-backup.test.ts",
  "test/integration/listed-runs-bound.test.ts",
  "test/client/cli.test.ts",
  "test/integration/silent-endpoint.test.ts",
  "test/integration/quotas.test.ts",
  "test/integration/dispatch.test.ts",
  "test/integration/parked-runs-limit.test.ts",
  "test/integration/fairness.test.ts",
  "test/integration/outage-past-retention.test.ts",
  "test/api/quota-accounting.test.ts",
  "test/console/security.test.ts",
  "test/client/client.test.ts",
  "test/api/run-endings.test.ts",
  "test/integration/crashed-first-attempt.test.ts",
  "test/integration/unwritten-start.test.ts",
  "test/integration/claim-puts.test.ts",
  "test/sandbox/cli.test.ts",
  "test/infra/synth-offline.test.ts",
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
