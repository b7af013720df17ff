import { createServer } from "node:net";
import { parseArgs } from "node:util";

// The SDK warns on every start that it will drop Node 20 next year; the sandbox says nothing it can act on.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

// `npm start`: the scheduler on this machine. Every option also reads an environment variable.
const options = {
  port: { type: "string" },
  "data-dir": { type: "string" },
  "tick-seconds": { type: "string" },
  workers: { type: "string" },
  endpoint: { type: "string" },
  prefix: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;
let parsed: ReturnType<typeof parseArgs<{ options: typeof options }>>;
try {
  parsed = parseArgs({ options });
} catch (error) {
  // A misspelt option, one without its value or a stray argument: a usage error, not a stack trace.
  console.error(
    `${error instanceof Error ? error.message : String(error)} (npm start -- --help lists the options)`,
  );
  process.exit(2);
}
const { values } = parsed;

if (values.help) {
  console.log(`usage: npm start -- [--port N] [--data-dir DIR] [--tick-seconds N] [--workers N] [--endpoint URL] [--prefix NAME]
  --port          PORT                  HTTP port of the API (3000)
  --data-dir      SCHEDULER_DATA_DIR    where DynamoDB Local keeps its data (.data)
  --tick-seconds  SCHEDULER_TICK_SECONDS  seconds between dispatcher passes (60)
  --workers       SCHEDULER_WORKERS     runs in progress at once (8)
  --endpoint      AWS_ENDPOINT_URL      use this AWS-compatible endpoint instead of the emulators
  AWS_ENDPOINT_URL_DYNAMODB=URL, AWS_ENDPOINT_URL_SQS=URL  one service's endpoint (before
                                        AWS_ENDPOINT_URL): the other service's emulator still starts
  --prefix        SCHEDULER_SANDBOX_PREFIX  names of the tables and queues: <prefix>-jobs, … (sandbox)
  ALLOW_PRIVATE_TARGETS=false           refuse webhook targets that are not public addresses, as deployed
  DEMO_JOB_TYPES=false                  refuse the demo job types sleep and fail, as a deployed API does
  WEBHOOK_SECRET_CACHE_SECONDS=N        how long workers reuse a tenant's webhook secrets (30)
  SCHEDULER_API_KEYS=key=tenant,…       bearer keys (default: local-dev-key for tenant default)
  SCHEDULER_JWT_ISSUER, SCHEDULER_JWT_AUDIENCE  take tokens from this OIDC issuer instead, as the
                                        stack's JWT option does; the console at /console signs in there
                                        as SCHEDULER_CONSOLE_CLIENT_ID (default: the first audience)
  SCHEDULER_CONSOLE_POLL_MS=N           the console's live pages poll every N ms (theirs: 2 s, 3 s)`);
  process.exit(0);
}

/** Whether something listens on 127.0.0.1:port already (the address the sandbox serves on). */
function portInUse(port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", (error) => {
      if ("code" in error && error.code === "EADDRINUSE") resolve(true);
      else reject(error);
    });
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(false)));
  });
}

function positive(
  name: string,
  raw: string | undefined,
  fallback: number,
  allowZero = false,
): number {
  if (raw === undefined || raw === "") return fallback;
  const value = decimalDigitsValue(raw);
  if (value === undefined || value < (allowZero ? 0 : 1)) {
    console.error(
      `${name} must be a whole number${allowZero ? "" : " above 0"} written in decimal digits, got "${raw}"`,
    );
    process.exit(2);
  }
  return value;
}

// The options and the environment are checked with only what that needs loaded: a refusal comes at
// once, not after the engine, the AWS SDK and the emulators' code (sandbox.ts, ~3 s of CPU).
const { localAuthFromEnv } = await import("../../shared/api/local-auth.js");
const { adminTenantsFrom } = await import("../../shared/api/auth.js");
const { lowPriorityShareFrom, sandboxSettingOverrides, secretCacheFrom } = await import(
  "./sandbox-env.js"
);
const { loadSettings } = await import("../../shared/config.js");
const { decimalDigitsValue } = await import("../../shared/decimal-digits.js");
const env = process.env;
const prefix = values.prefix ?? env.SCHEDULER_SANDBOX_PREFIX;
if (prefix !== undefined && !/^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$/.test(prefix)) {
  // Table and queue names allow letters, digits, "-" and "_"; queue names end at 80 characters.
  console.error(`--prefix must be 1-40 letters, digits, "-" or "_", got "${prefix}"`);
  process.exit(2);
}
let notice: string | null;
try {
  notice = localAuthFromEnv(env).notice;
  // Before the emulators start: the API reads it again when it starts, after them.
  adminTenantsFrom(env);
  // Likewise the settings taken from the environment (MIN_INTERVAL_MS, SHARD_COUNT, …).
  loadSettings(sandboxSettingOverrides(env));
  lowPriorityShareFrom(env);
  secretCacheFrom(env);
} catch (error) {
  console.error(error instanceof Error ? error.message : String(error));
  process.exit(2);
}
const port = positive("--port", values.port ?? env.PORT, 3000, true);
const tickSeconds = positive(
  "--tick-seconds",
  values["tick-seconds"] ?? env.SCHEDULER_TICK_SECONDS,
  60,
);
const workers = positive("--workers", values.workers ?? env.SCHEDULER_WORKERS, 8);
const portTaken = `port ${port} on 127.0.0.1 is in use (a sandbox already running?): stop what holds it, or give another with --port N or PORT`;
const isPortTaken = (error: unknown) =>
  error instanceof Error && "code" in error && error.code === "EADDRINUSE";
// Checked before the emulators start and the restart recovery runs on the data directory, which
// may be the running sandbox's own.
if (port !== 0 && (await portInUse(port))) {
  console.error(portTaken);
  process.exit(1);
}
const { startSandbox } = await import("./sandbox.js");
const { endpointFromEnv } = await import("../../shared/aws.js");
// `--endpoint` names both services'; else each as the SDK resolves it (endpointFromEnv).
const dynamoEndpoint = values.endpoint || endpointFromEnv("DYNAMODB", env);
const sqsEndpoint = values.endpoint || endpointFromEnv("SQS", env);
const sandbox = await startSandbox({
  port,
  dataDir: values["data-dir"] ?? env.SCHEDULER_DATA_DIR ?? ".data",
  tickSeconds,
  workers,
  ...(dynamoEndpoint ? { dynamoEndpoint } : {}),
  ...(sqsEndpoint ? { sqsEndpoint } : {}),
  ...(prefix ? { prefix } : {}),
}).catch((error: unknown) => {
  // Taken while the emulators started: they are stopped by now, and the stack says nothing more.
  if (!isPortTaken(error)) throw error;
  console.error(portTaken);
  process.exit(1);
});

console.log(`scheduler sandbox ready at ${sandbox.url}`);
const atEndpoints = [
  ...(dynamoEndpoint ? [`tables at ${dynamoEndpoint}`] : []),
  ...(sqsEndpoint ? [`queues at ${sqsEndpoint}`] : []),
].join(", ");
console.log(`  data:     ${sandbox.dataDir}${atEndpoints ? ` (${atEndpoints})` : ""}`);
console.log(
  env.ALLOW_PRIVATE_TARGETS === "false"
    ? "  webhooks: public addresses only (ALLOW_PRIVATE_TARGETS=false), as deployed"
    : "  webhooks: loopback and private addresses allowed (ALLOW_PRIVATE_TARGETS=false refuses them)",
);
console.log(
  env.DEMO_JOB_TYPES === "false"
    ? "  types:    no demo types (DEMO_JOB_TYPES=false), as deployed"
    : "  types:    demo types sleep and fail accepted (DEMO_JOB_TYPES=false refuses them)",
);
if (notice) console.log(`  auth:     ${notice}`);
console.log(`  console:  ${sandbox.url}/console`);
console.log(`  docs:     ${sandbox.url}/docs (GET /openapi.json); press Ctrl-C to stop`);

let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    console.log("stopping: no new claims; runs in progress get 3 s, then are released");
    sandbox.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(error);
        process.exit(1);
      },
    );
  });
}
