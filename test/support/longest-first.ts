import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that take longest in `npm test` (30 s to 5 min each on two cores), longest first.
 * Vitest starts the longest files first only when its results cache knows their durations; a
 * fresh clone (CI) has no cache and runs files in the order they were found, which put the model
 * test, the longest, near the end of its project with one worker idle beside it.
 */
const LONGEST = [
  "test/model/model.test.ts",
  "test/integration/dispatch.test.ts",
  "test/sandbox/restart.test.ts",
  "test/client/cli.test.ts",
  "test/console/console.test.ts",
  "test/client/client.test.ts",
  "test/api/schedule-fuzz.test.ts",
  "test/integration/fairness.test.ts",
  "test/api/valid-fuzz.test.ts",
  "test/integration/dispatch-recovery.test.ts",
];

function rank(file: TestSpecification): number {
  const index = LONGEST.findIndex((path) => file.moduleId.endsWith(path));
  return index === -1 ? LONGEST.length : index;
}

/** Vitest's order (projects apart, then cached durations), with the known long files first in each project. */
export class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const projects = [...new Set(sorted.map((file) => file.project.name))];
    return sorted
      .map((file, position) => ({ file, position }))
      .sort(
        (a, b) =>
          projects.indexOf(a.file.project.name) - projects.indexOf(b.file.project.name) ||
          rank(a.file) - rank(b.file) ||
          a.position - b.position,
      )
      .map(({ file }) => file);
  }
}
