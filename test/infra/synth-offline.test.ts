import { spawn } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "./support/repo-root.js";

let scratch: string;
let result: { code: number | null; output: string };

/**
 * `npx cdk synth` as a user runs it on a fresh clone: no AWS credentials, no
 * network (every HTTP(S) request goes to a closed local port), and a `docker`
 * on the PATH that only records that someone called it.
 */
beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), "scheduler-synth-"));
  const dockerCalls = join(scratch, "docker-calls");
  writeFileSync(join(scratch, "docker"), `#!/bin/sh\necho "$@" >> '${dockerCalls}'\nexit 1\n`);
  chmodSync(join(scratch, "docker"), 0o755);

  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    // No credentials, no profile, no endpoint overrides, and not vitest's NODE_ENV=test
    // (which switches CDK apps to in-memory mode).
    if (key.startsWith("AWS_") || key.startsWith("CDK_") || key === "NODE_ENV") continue;
    env[key] = value;
  }
  Object.assign(env, {
    PATH: `${scratch}${delimiter}${process.env.PATH ?? ""}`,
    AWS_EC2_METADATA_DISABLED: "true",
    HTTP_PROXY: "http://127.0.0.1:9",
    HTTPS_PROXY: "http://127.0.0.1:9",
    http_proxy: "http://127.0.0.1:9",
    https_proxy: "http://127.0.0.1:9",
    NO_PROXY: "",
    no_proxy: "",
    npm_config_offline: "true",
    npm_config_update_notifier: "false",
  });
  const out = join(scratch, "cdk.out");
  result = await new Promise((resolve, reject) => {
    const child = spawn(
      "npx",
      ["cdk", "synth", "-q", "--no-notices", "-o", out, "-c", "stage=prod", "-c", "shardCount=8"],
      { cwd: REPO_ROOT, env, stdio: ["ignore", "pipe", "pipe"] },
    );
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, output }));
  });
}, 240_000);

afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe("npx cdk synth", () => {
  it("succeeds offline, with no account and no Docker", () => {
    expect(result.code, result.output).toBe(0);
    expect(existsSync(join(scratch, "docker-calls")), "docker was called").toBe(false);
  });

  it("tells the operator of a prod stage without alarmEmail that its alarms reach no one", () => {
    expect(result.output).toContain(
      "stage prod: no alarmEmail or alarmTopicArn, so the alarms go to a topic nobody is subscribed to",
    );
  });

  it("writes the stack template and an esbuild bundle per function", () => {
    const out = join(scratch, "cdk.out");
    const template: unknown = JSON.parse(
      readFileSync(join(out, "Scheduler-prod.template.json"), "utf8"),
    );
    expect(template).toHaveProperty("Resources");
    // An alarm on each table's throttling (test/infra/stack.test.ts checks what they read).
    const resources = Object.values(
      (template as { Resources: Record<string, { Type: string; Properties?: unknown }> }).Resources,
    );
    const throttling = resources.filter(
      (r) =>
        r.Type === "AWS::CloudWatch::Alarm" &&
        JSON.stringify(r.Properties).includes('"MetricName":"WriteThrottleEvents"'),
    );
    expect(throttling).toHaveLength(3);
    const bundles = readdirSync(out).filter(
      (entry) => entry.startsWith("asset.") && existsSync(join(out, entry, "index.mjs")),
    );
    expect(bundles).toHaveLength(5);
    // Each the code of a function on nodejs22.x arm64 (its S3 key is asset.<hash> with ".zip"),
    // and an ESM bundle with a source map.
    const functions = resources.filter((r) => r.Type === "AWS::Lambda::Function");
    for (const bundle of bundles) {
      const fn = functions.find((r) =>
        JSON.stringify(r.Properties).includes(`"S3Key":"${bundle.slice("asset.".length)}.zip"`),
      );
      expect(JSON.stringify(fn?.Properties), bundle).toMatch(
        /"Architectures":\["arm64"\].*"Runtime":"nodejs22\.x"|"Runtime":"nodejs22\.x".*"Architectures":\["arm64"\]/,
      );
      const code = readFileSync(join(out, bundle, "index.mjs"), "utf8");
      expect(code.startsWith("import { createRequire } from 'module';"), bundle).toBe(true);
      expect(existsSync(join(out, bundle, "index.mjs.map")), bundle).toBe(true);
    }
    // The API function's bundle carries the web console's build beside its handler.
    const withConsole = bundles.filter((bundle) =>
      ["app.js", "app.css"].every((file) => existsSync(join(out, bundle, "console", file))),
    );
    expect(withConsole).toHaveLength(1);
  });

  it("bundles an API function that serves the console, the reference, the document and the health check from its own files", async () => {
    const out = join(scratch, "cdk.out");
    const bundle = readdirSync(out).find((entry) =>
      existsSync(join(out, entry, "console", "app.js")),
    );
    expect(bundle).toBeDefined();
    // The bundle as Lambda loads it, in a Node process of its own; nothing it serves here touches AWS.
    // The events carry no authorizer context, as on the stack's routes without an authorizer.
    const requests = [
      "/console/jobs/01ABC",
      "/console/assets/app.js",
      "/docs",
      "/health",
      "/openapi.json",
    ];
    const script = `
      const { handler } = await import(${JSON.stringify(join(out, bundle ?? "", "index.mjs"))});
      for (const path of ${JSON.stringify(requests)}) {
        const answer = await handler({
          version: "2.0", routeKey: "GET " + path, rawPath: path, rawQueryString: "",
          headers: { host: "api1.execute-api.eu-west-1.amazonaws.com" },
          requestContext: { http: { method: "GET", path, protocol: "HTTP/1.1", sourceIp: "192.0.2.1", userAgent: "t" },
            domainName: "api1.execute-api.eu-west-1.amazonaws.com", stage: "$default", requestId: "r", routeKey: "GET " + path },
          isBase64Encoded: false,
        }, {});
        console.log(JSON.stringify({ path, status: answer.statusCode, type: answer.headers["content-type"], body: answer.body.slice(0, 2000) }));
      }`;
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      AWS_REGION: "eu-west-1",
      POWERTOOLS_LOG_LEVEL: "SILENT",
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
      CONSOLE_AUTH: JSON.stringify({ kind: "iam" }),
    };
    for (const name of ["JOBS_TABLE", "RUNS_TABLE", "WEBHOOK_SECRETS_TABLE"]) env[name] = "t";
    for (const name of ["QUEUE_URL_HIGH", "QUEUE_URL_NORMAL", "QUEUE_URL_LOW"]) env[name] = "q";
    const printed = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
        env,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let text = "";
      child.stdout.on("data", (chunk: Buffer) => {
        text += chunk.toString();
      });
      child.stderr.on("data", (chunk: Buffer) => {
        text += chunk.toString();
      });
      child.on("error", reject);
      child.on("close", (code) => (code === 0 ? resolve(text) : reject(new Error(text))));
    });
    const answers = printed
      .trim()
      .split("\n")
      .map(
        (line) => JSON.parse(line) as { path: string; status: number; type: string; body: string },
      );
    expect(answers.map((a) => [a.path, a.status])).toEqual(requests.map((path) => [path, 200]));
    const [page, script_, docs, health, openApi] = answers;
    expect(page?.body).toContain('<script type="module" src="/console/assets/app.js?v=');
    expect(page?.body).toContain('{"auth":{"kind":"iam"}');
    expect(script_?.type).toContain("text/javascript");
    expect(docs?.body).toContain("<title>Scheduler API reference</title>");
    expect(JSON.parse(health?.body ?? "null")).toEqual({ status: "ok" });
    expect(openApi?.body).toMatch(/^\{"openapi":"3\./);
  });

  // A passing run lists no plugin reports; the in-process tests show cdk-nag is wired to fail it.
  it("reports no failed validation (CDK's template validator, cdk-nag)", () => {
    const report: unknown = JSON.parse(
      readFileSync(join(scratch, "cdk.out", "validation-report.json"), "utf8"),
    );
    const plugins =
      typeof report === "object" && report !== null && "pluginReports" in report
        ? (report.pluginReports as { pluginName: string; conclusion: string }[])
        : [];
    expect(plugins.filter((p) => p.conclusion !== "success")).toEqual([]);
  });
});
