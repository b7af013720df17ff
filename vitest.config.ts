import { defineConfig } from "vitest/config";

/**
 * Three projects. `unit`: pure tests, no emulator, seconds. `synth`: the CDK
 * app synthesized and checked offline, no emulator. `services`: everything
 * that talks to DynamoDB and SQS; only this project has the global setup that
 * starts DynamoDB Local and fauxqs, so a run that selects no file of it (e.g.
 * `npm run test:unit`) starts neither.
 */
const SYNTH_TESTS = [
  "test/infra/settings.test.ts",
  "test/infra/stack.test.ts",
  "test/infra/synth-offline.test.ts",
  "test/infra/variants.test.ts",
];
const UNIT_TESTS = [
  "test/unit/**/*.test.ts",
  "test/api/units.test.ts",
  "test/client/generated.test.ts",
];

export default defineConfig({
  test: {
    environment: "node",
    testTimeout: 30_000,
    hookTimeout: 120_000,
    env: {
      // Node 20 is our runtime; the SDK's end-of-support notice would otherwise
      // be printed by every test worker.
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED:
        process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ?? "true",
    },
    projects: [
      { extends: true, test: { name: "unit", include: UNIT_TESTS } },
      { extends: true, test: { name: "synth", include: SYNTH_TESTS } },
      {
        extends: true,
        test: {
          name: "services",
          include: ["test/**/*.test.ts"],
          exclude: [...UNIT_TESTS, ...SYNTH_TESTS],
          globalSetup: ["test/support/global-setup.ts"],
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
      // 96.7 % of lines, 95.2 % of statements, 96.8 % of functions, 87.9 % of branches.
      thresholds: {
        "shared/**/*.ts": { lines: 93, statements: 92, functions: 93, branches: 85 },
      },
    },
  },
});
