import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that take longest in `npm test`, longest first within their group: a run of 4 December
 * 2026 (seconds on two cores, with coverage): console 74, dst-dispatch 48, restart 43,
 * crashed-first-attempt 39, overlap-reruns 30, fairness 29, cli 27, model 24, dispatch-recovery 23,
 * client 21, buffer-one 20, quotas 19, endings 19, hostile-server 18, transaction-in-progress 18,
 * allow-bound 16; of the timed files, worker-fencing 41, policies 28, run-cancel 25, retries 16,
 * and the end-to-end file (67 s in that run, its tests one after another; side by side, 28-43 s
 * alone on a loaded machine). Vitest starts the longest files first only when its results cache
 * knows their durations; a fresh clone (CI) has no cache and runs the files of each project largest
 * first, which is not longest first (fairness, 29 s, is a third the size of contract, under 8 s), and
 * dst-dispatch and crashed-first-attempt, absent from this list before, started 306 and 318 s into
 * that run. Vitest runs the files of one group (`sequence.groupOrder`) from one queue whatever their
 * project, so a long file of one project starts among the long files of another rather than after
 * all of them. The spike and chaos run alone, one at a time: their order does not change when they
 * end. listed-runs-bound, absent from this list then (102 s in the last fresh-clone CI), takes 33-37 s
 * alone on a loaded machine since its fills are seeded and its cases run side by side: ranked by
 * that. worker-fencing (41 s) takes 22-23 s alone since its crash cases run side by side: ranked
 * by that, after run-cancel. clock-skew and restore-from-backup, added on 4 December, took 44 and
 * 23 s alone on a loaded machine (load 5-6); with their independent cases side by side, 37-38 and
 * 17 s: clock-skew's start-lag cases (20 s) still run one after another, so it is ranked by that,
 * after listed-runs-bound; restore-from-backup after allow-bound.
 */
const LONGEST = [
  "test/console/console.test.ts",
  "test/integration/dst-dispatch.test.ts",
  "test/sandbox/restart.test.ts",
  "test/integration/crashed-first-attempt.test.ts",
  "test/integration/listed-runs-bound.test.ts",
  "test/integration/clock-skew.test.ts",
  "test/integration/overlap-reruns.test.ts",
  "test/integration/fairness.test.ts",
  "test/client/cli.test.ts",
  "test/model/model.test.ts",
  "test/integration/dispatch-recovery.test.ts",
  "test/client/client.test.ts",
  "test/integration/buffer-one.test.ts",
  "test/integration/quotas.test.ts",
  "test/integration/endings.test.ts",
  "test/client/hostile-server.test.ts",
  "test/integration/transaction-in-progress.test.ts",
  "test/integration/allow-bound.test.ts",
  "test/integration/restore-from-backup.test.ts",
  // The timed group.
  "test/e2e/scheduler.e2e.test.ts",
  "test/integration/policies.test.ts",
  "test/integration/run-cancel.test.ts",
  "test/integration/worker-fencing.test.ts",
  "test/integration/retries-and-types.test.ts",
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
