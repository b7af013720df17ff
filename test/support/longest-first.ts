import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that take longest in `npm test`, longest first within their group, ranked by their
 * times in a fresh-clone CI run (7 December 2026, of 24f6dcde, seconds per file): console 109,
 * model 106 (its sequences are new every run: 65 in another), offset-change-dispatch 38,
 * dispatch-recovery 35, reaper-cursor 34, the sandbox's cli 33, long-jobs 32, restart and the
 * client's cli 28, schedule-fuzz 27, synth-offline and security 25, clock-skew 24,
 * hostile-server, silent-endpoint and dst-dispatch 23, oidc 22, retry-again-edges and
 * bidi-breakout 21, fairness and keys 20, worker-lifecycle-faults, redrive-given-back,
 * catch-up-cap, run-endings and edit-kept-end 19. The unit project's hostile-server and the synth
 * project's synth-offline are placed among them, since vitest runs the three projects' files from
 * one queue. Files under about 19 s are left to vitest's order. Of the timed files (the same run):
 * the end-to-end file 35, policies 29, run-cancel 18, worker-fencing and retries 15,
 * lease-watch-deadline 13, dispatch-on-time 11, worker-loop 8.
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
  "test/console/console.test.ts",
  "test/model/model.test.ts",
  "test/integration/offset-change-dispatch.test.ts",
  "test/integration/dispatch-recovery.test.ts",
  "test/integration/reaper-cursor.test.ts",
  "test/sandbox/cli.test.ts",
  "test/integration/long-jobs.test.ts",
  "test/sandbox/restart.test.ts",
  "test/client/cli.test.ts",
  "test/api/schedule-fuzz.test.ts",
  "test/infra/synth-offline.test.ts",
  "test/console/security.test.ts",
  "test/integration/clock-skew.test.ts",
  "test/client/hostile-server.test.ts",
  "test/integration/silent-endpoint.test.ts",
  "test/integration/dst-dispatch.test.ts",
  "test/console/oidc.test.ts",
  "test/integration/retry-again-edges.test.ts",
  "test/console/bidi-breakout.test.ts",
  "test/integration/fairness.test.ts",
  "test/console/keys.test.ts",
  "test/integration/worker-lifecycle-faults.test.ts",
  "test/integration/redrive-given-back.test.ts",
  "test/integration/catch-up-cap.test.ts",
  "test/api/run-endings.test.ts",
  "test/api/edit-kept-end.test.ts",
  // The timed group.
  "test/e2e/scheduler.e2e.test.ts",
  "test/integration/policies.test.ts",
  "test/integration/run-cancel.test.ts",
  "test/integration/worker-fencing.test.ts",
  "test/integration/retries-and-types.test.ts",
  "test/integration/lease-watch-deadline.test.ts",
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
