import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that take longest in `npm test`, longest first: a fresh-clone CI run of 2 December
 * 2026 (seconds on two cores): e2e 74, console 56, model 54, restart 47, client 39, cli 38,
 * fairness 38, long-jobs 34, overlap-reruns 31, worker-fencing 31, synth-offline 28, dispatch 28,
 * run-cancel 26, endings 23, policies 22; then three that were among the longest before and took
 * under 19 s in that run. Vitest starts the longest files first only when its results cache knows
 * their durations; a fresh clone (CI) has no cache and runs the files of each project largest
 * first, which is not longest first (fairness, 38 s, is a third the size of contract, under 19 s)
 * and put the model test, the longest, near the end of its project with one worker idle beside it.
 * Vitest runs the files of one group (`sequence.groupOrder`) from one queue whatever their
 * project, so a long file of one project (synth-offline) starts among the long files of another
 * (services) rather than after all of them. The spike and chaos run alone, one at a time: their
 * order does not change when they end.
 */
const LONGEST = [
  "test/e2e/scheduler.e2e.test.ts",
  "test/console/console.test.ts",
  "test/model/model.test.ts",
  "test/sandbox/restart.test.ts",
  "test/client/client.test.ts",
  "test/client/cli.test.ts",
  "test/integration/fairness.test.ts",
  "test/integration/long-jobs.test.ts",
  "test/integration/overlap-reruns.test.ts",
  "test/integration/worker-fencing.test.ts",
  "test/infra/synth-offline.test.ts",
  "test/integration/dispatch.test.ts",
  "test/integration/run-cancel.test.ts",
  "test/integration/endings.test.ts",
  "test/integration/policies.test.ts",
  "test/api/schedule-fuzz.test.ts",
  "test/api/valid-fuzz.test.ts",
  "test/integration/dispatch-recovery.test.ts",
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
