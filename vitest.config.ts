import { defineConfig } from "vitest/config";
import { LongestFirst } from "./test/support/longest-first.js";

/**
 * Five projects. `unit`: pure tests, no emulator, seconds. `synth`: the CDK
 * app synthesized and checked offline, no emulator. `services`: everything
 * that talks to DynamoDB and SQS. `timed` and `alone`: the services files that
 * bound how soon something happens in wall-clock time. Only `services` and
 * `timed` have the global setup that starts DynamoDB Local and fauxqs, so a
 * run that selects no file of theirs (e.g. `npm run test:unit`) starts
 * neither.
 *
 * `unit`, `synth` and `services` run their files two at a time (vitest's
 * default on two cores is one: cores - 1); much of a services file's time is
 * waiting for a second, a lease or a heartbeat to pass, which another file
 * can use. The `timed` files run after them, two at a time with nothing else
 * running, so that another file's burst of CPU (a CDK synth, a JVM starting,
 * Chromium) does not count against their bounds; each mostly waits, and two
 * of them together kept their bounds (three runs of the eight, 85-89 s
 * instead of 137 s one at a time; the end-to-end sandbox's file beside them
 * too). The `alone` files, which load the machine themselves (the spike and
 * chaos), run last, one at a time. `services` and `timed` each start their own
 * pair of emulators. `alone` starts none: the spike and chaos each run a
 * sandbox, which starts emulators of its own, and vitest runs the projects'
 * global setups one after another before the first file, so a pair nobody
 * used cost the whole run a JVM's start (DynamoDB Local took 4.3 s of it on
 * a loaded machine) and its memory for the run.
 */
const SYNTH_TESTS = [
  "test/infra/settings.test.ts",
  "test/infra/stack.test.ts",
  "test/infra/synth-offline.test.ts",
  "test/infra/variants.test.ts",
];
/**
 * What each asserts in wall-clock time: a start lag under 1 s (e2e,
 * dispatch-on-time, worker-loop), a retry's start within 1.5 s of its due time (retries-and-types),
 * a buffered run starting within 1.5 s of the one ahead (policies), a cancel
 * within a heartbeat plus 1.5 s (run-cancel), a message back within a lease
 * plus 3 s (worker-fencing), a delayed message visible within 1 s of its delay
 * (emulators), a spike's p99 start lag (bench) and chaos's drain windows.
 */
const TIMED_TESTS = [
  "test/integration/dispatch-on-time.test.ts",
  "test/integration/worker-loop.test.ts",
  "test/integration/retries-and-types.test.ts",
  "test/integration/policies.test.ts",
  "test/integration/run-cancel.test.ts",
  "test/api/run-cancel.test.ts",
  "test/integration/worker-fencing.test.ts",
  // A handler stopped within 1.2 s of its lease's end while its heartbeat's write hangs or answers late.
  "test/integration/lease-watch-deadline.test.ts",
  // Another tenant's delivery within 1.5 s while six runs' webhook hosts go unanswered.
  "test/integration/dns-isolation.test.ts",
  "test/integration/emulators.test.ts",
  "test/e2e/scheduler.e2e.test.ts",
  // Bounds no wall-clock time: it fakes undici's timers, which takes a process of its own (this
  // project isolates its files; unit and services share modules between files).
  "test/integration/slow-targets.test.ts",
];
const ALONE_TESTS = ["test/bench/spike.test.ts", "test/chaos/chaos.test.ts"];
const UNIT_TESTS = [
  "test/unit/**/*.test.ts",
  "test/api/units.test.ts",
  "test/client/generated.test.ts",
  "test/client/hostile-server.test.ts",
];

export default defineConfig({
  test: {
    environment: "node",
    testTimeout: 30_000,
    maxWorkers: 2,
    sequence: { sequencer: LongestFirst },
    hookTimeout: 120_000,
    env: {
      // Node 20 is our runtime; the SDK's end-of-support notice would otherwise
      // be printed by every test worker.
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED:
        process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ?? "true",
    },
    projects: [
      {
        extends: true,
        // A worker's process runs unit file after unit file (vitest's `isolate: false`): each
        // file in a process of its own loaded the AWS SDK, zod and the rest again, and that was
        // half the unit project's time (60 s of CPU instead of 30 s for its 40 files, here). The
        // unit files stub no global, environment variable or module; the module state they share
        // is memo caches (compiled cron expressions, zone rules), the same whoever fills them.
        test: { name: "unit", include: UNIT_TESTS, isolate: false },
      },
      { extends: true, test: { name: "synth", include: SYNTH_TESTS } },
      {
        extends: true,
        test: {
          name: "services",
          include: ["test/**/*.test.ts"],
          exclude: [...UNIT_TESTS, ...SYNTH_TESTS, ...TIMED_TESTS, ...ALONE_TESTS],
          globalSetup: ["test/support/global-setup.ts"],
          // A worker's process runs services file after services file, each with fresh copies of
          // our modules (fresh-modules.ts): a process per file loaded the AWS SDK, undici, zod and
          // hono again for every file, most of vitest's import time (14 of these files: import
          // 47-62 s isolated, 12-13 s so; CPU 80 s and 53 s).
          isolate: false,
          setupFiles: ["test/support/fresh-modules.ts"],
        },
      },
      {
        extends: true,
        test: {
          name: "timed",
          include: TIMED_TESTS,
          globalSetup: ["test/support/global-setup.ts"],
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: {
          name: "alone",
          include: ALONE_TESTS,
          maxWorkers: 1,
          sequence: { groupOrder: 2 },
        },
      },
    ],
    coverage: {
      provider: "v8",
      reportOnFailure: true,
      include: ["shared/**/*.ts", "functions/**/*.ts"],
      reporter: ["text-summary", "json-summary", "html"],
      reportsDirectory: "coverage",
      // The floor for shared/, a little under what the whole suite measures (README, Testing):
      // 98.0 % of lines, 96.5 % of statements, 97.7 % of functions, 90.5 % of branches.
      thresholds: {
        "shared/**/*.ts": { lines: 96, statements: 95, functions: 96, branches: 89 },
      },
    },
  },
});
