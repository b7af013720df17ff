import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that take longest in `npm test`, longest first within their group. The `services`
 * files are ranked by a run of that project alone on a quiet machine (7 December 2026, of
 * 40797be7, two at a time, seconds per file): console 84, dst-dispatch 65, listed-runs-bound 64,
 * model 58, worker-lifecycle-faults 46, reaper-cursor 43, the sandbox's cli 41, dispatch-recovery
 * 40, shard-count-rolling 39, long-jobs 35, jobs-page-cursors 31, restart 30, quota-accounting 27,
 * silent-endpoint, oidc and quota-recount-parts-races 23, clock-skew, noisy-tenant, security and
 * offset-change-dispatch 22, the client's cli, fairness, valid-fuzz, claim-plain-rollback,
 * lease-watch-slow-beat and noisy-tenant-gate-backlog 21, one-off-below-floor and
 * outage-past-retention 20. Files trimmed since keep their place (dst-dispatch, listed-runs-bound,
 * worker-lifecycle-faults, long-jobs, restart, lease-watch-slow-beat and console's cases do less
 * now). The unit project's hostile-server (24) and the synth project's synth-offline (17), from
 * the fresh-clone CI run of the same commit, are placed among them, since vitest runs the three
 * projects' files from one queue. Files under about 20 s are left to vitest's order. Of the timed
 * files (that CI run): the end-to-end file 25, policies 22, run-cancel 16, lease-watch-deadline
 * 13, retries 13, worker-fencing 12, dispatch-on-time 10, worker-loop 8.
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
  "test/integration/dst-dispatch.test.ts",
  "test/integration/listed-runs-bound.test.ts",
  "test/model/model.test.ts",
  "test/integration/worker-lifecycle-faults.test.ts",
  "test/integration/reaper-cursor.test.ts",
  "test/sandbox/cli.test.ts",
  "test/integration/dispatch-recovery.test.ts",
  "test/integration/shard-count-rolling.test.ts",
  "test/integration/long-jobs.test.ts",
  "test/api/jobs-page-cursors.test.ts",
  "test/sandbox/restart.test.ts",
  "test/api/quota-accounting.test.ts",
  "test/client/hostile-server.test.ts",
  "test/integration/silent-endpoint.test.ts",
  "test/console/oidc.test.ts",
  "test/integration/quota-recount-parts-races.test.ts",
  "test/integration/clock-skew.test.ts",
  "test/integration/noisy-tenant.test.ts",
  "test/console/security.test.ts",
  "test/integration/offset-change-dispatch.test.ts",
  "test/client/cli.test.ts",
  "test/integration/fairness.test.ts",
  "test/api/valid-fuzz.test.ts",
  "test/integration/claim-plain-rollback.test.ts",
  "test/integration/lease-watch-slow-beat.test.ts",
  "test/integration/noisy-tenant-gate-backlog.test.ts",
  "test/integration/one-off-below-floor.test.ts",
  "test/integration/outage-past-retention.test.ts",
  "test/infra/synth-offline.test.ts",
  // The timed group.
  "test/e2e/scheduler.e2e.test.ts",
  "test/integration/policies.test.ts",
  "test/integration/run-cancel.test.ts",
  "test/integration/lease-watch-deadline.test.ts",
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
