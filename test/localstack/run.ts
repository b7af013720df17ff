import { spawn } from "node:child_process";
import { join, resolve } from "node:path";

/**
 * `npm run test:localstack`: once LocalStack answers (compose.localstack.yaml starts it), runs the
 * integration, API and end-to-end suites against it. The suites take their endpoint from
 * AWS_ENDPOINT_URL (test/support/global-setup.ts then starts no emulator); LocalStack accepts any
 * credentials, and its resources live in one region, so both are fixed here. Arguments go to
 * vitest: files or directories instead of the three suites, or options such as -t.
 */
const REPO = resolve(import.meta.dirname, "../..");
const endpoint = process.env.LOCALSTACK_ENDPOINT ?? "http://localhost:4566";
const region = process.env.AWS_REGION ?? "us-east-1";
const SERVICES = ["dynamodb", "sqs"];
const READY_STATES = new Set(["available", "running"]);
const TIMEOUT_MS = 180_000;

/** Waits until LocalStack's health endpoint reports every service the suites use as ready. */
async function waitForLocalStack(): Promise<void> {
  const deadline = Date.now() + TIMEOUT_MS;
  let last = "no answer yet";
  while (Date.now() < deadline) {
    try {
      const response = await fetch(`${endpoint}/_localstack/health`, {
        signal: AbortSignal.timeout(2_000),
      });
      const health: unknown = await response.json();
      const services =
        typeof health === "object" && health !== null && "services" in health
          ? (health.services as Record<string, unknown>)
          : {};
      const waiting = SERVICES.filter((name) => !READY_STATES.has(String(services[name])));
      if (response.ok && waiting.length === 0) return;
      last = `${response.status}, waiting for ${waiting.map((n) => `${n} (${String(services[n])})`).join(", ")}`;
    } catch (error) {
      last = String(error);
    }
    await new Promise((done) => setTimeout(done, 1_000));
  }
  throw new Error(`LocalStack at ${endpoint} not ready within ${TIMEOUT_MS / 1000} s: ${last}`);
}

await waitForLocalStack();

const env: NodeJS.ProcessEnv = { ...process.env };
// Nothing may point the suites elsewhere: per-service endpoints win over AWS_ENDPOINT_URL, a
// profile or session would sign as someone else, and SCHEDULER_API_URL makes e2e go remote.
for (const name of [
  "AWS_ENDPOINT_URL_DYNAMODB",
  "AWS_ENDPOINT_URL_SQS",
  "AWS_PROFILE",
  "AWS_SESSION_TOKEN",
  "SCHEDULER_API_URL",
]) {
  delete env[name];
}
Object.assign(env, {
  AWS_ENDPOINT_URL: endpoint,
  AWS_REGION: region,
  AWS_DEFAULT_REGION: region,
  AWS_ACCESS_KEY_ID: "test",
  AWS_SECRET_ACCESS_KEY: "test",
});

// Files or directories given replace the three suites; options (-t …) are passed on as well.
const args = process.argv.slice(2);
const suites = args.some((arg) => !arg.startsWith("-"))
  ? []
  : ["test/integration", "test/api", "test/e2e"];
const vitest = spawn(
  process.execPath,
  [join(REPO, "node_modules/vitest/vitest.mjs"), "run", ...suites, ...args],
  { cwd: REPO, env, stdio: "inherit" },
);
vitest.once("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
