import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { authFrom, SANDBOX_KEY } from "../../client/cli/context.js";
import { EXIT } from "../../client/cli/exit-codes.js";
import { cliProgram } from "../../client/cli/main.js";
import type { Job, Preview, Run, TenantQuotas } from "../../client/index.js";
import { type CliOutcome, runCaptured, spawnCaptured } from "../support/cli-run.js";
import { type SandboxProcess, spawnSandbox } from "../support/sandbox-process.js";
import { waitFor } from "../support/wait.js";

/**
 * `scheduler`, the CLI, against the sandbox (`npm start` as a child process)
 * over HTTP: every command, its JSON output parsed, its exit codes and error
 * output. Most run in-process through runCli (what bin/scheduler.mjs calls);
 * the bin itself and `npx scheduler` are run as processes too.
 */
const REPO = resolve(import.meta.dirname, "../..");
let sandbox: SandboxProcess;

beforeAll(async () => {
  // SCHEDULER_API_KEYS empty: the sandbox takes local-dev-key, which the CLI sends to a loopback API.
  sandbox = await spawnSandbox({
    prefix: `cli-${randomBytes(4).toString("hex")}`,
    tickSeconds: 1,
    workers: 8,
    // The dev key's tenant is the admin tenant, for `quotas set`. The shortest lease (6 s) makes
    // the heartbeat, which carries a cancel to a running run, every 2 s rather than every 10 s.
    // The shortest lookahead: a per-second job's create claims its first three minutes of runs,
    // not seven.
    env: {
      SCHEDULER_API_KEYS: "",
      ADMIN_TENANTS: "default",
      LEASE_SECONDS: "6",
      LOOKAHEAD_SECONDS: "60",
    },
  });
}, 120_000);

afterAll(async () => {
  await sandbox?.stop();
}, 30_000);

/** Runs the CLI against the sandbox. */
const cli = (args: readonly string[], env: Record<string, string> = {}) =>
  runCaptured(["--api", sandbox.url, ...args], env);

/** Runs a command with `-o json`, expects exit 0 and returns its parsed output. */
async function json<T>(...args: string[]): Promise<T> {
  const outcome = await cli(["-o", "json", ...args]);
  expect(outcome.code, outcome.err).toBe(EXIT.ok);
  expect(outcome.err).toBe("");
  return JSON.parse(outcome.out) as T;
}

/** Runs a command with `-o json` that must fail, and returns the parsed error it printed. */
async function failing(code: number, ...args: string[]) {
  const outcome = await cli(["-o", "json", ...args]);
  expect(outcome.code, `${outcome.out}${outcome.err}`).toBe(code);
  expect(outcome.out).toBe("");
  return (JSON.parse(outcome.err) as { error: Record<string, unknown> }).error;
}

const inSeconds = (seconds: number) => new Date(Date.now() + seconds * 1000).toISOString();
const tomorrow = () => inSeconds(86_400);

/** The run of a new job that failed for good at once, once the dead-letter list shows it. */
async function deadRun(): Promise<Run> {
  const job = await json<Job>(
    "jobs",
    "create",
    "--type",
    "fail",
    "--payload",
    '{"times":1,"retryable":false}',
    "--run-at",
    inSeconds(1),
  );
  let dead: Run | undefined;
  for (let tries = 0; tries < 150 && !dead; tries++) {
    await new Promise((done) => setTimeout(done, 200));
    dead = (await json<Run[]>("dead-letters", "list")).find((run) => run.jobId === job.id);
  }
  expect(dead?.status).toBe("dead");
  if (!dead) throw new Error(`no dead run of ${job.id}`);
  return dead;
}

describe("jobs", () => {
  it("create from flags, get, list (json and table)", async () => {
    const job = await json<Job>(
      "jobs",
      "create",
      "--type",
      "noop",
      "--name",
      "weekday report",
      "--cron",
      "0 9 * * 1-5",
      "--timezone",
      "Europe/Berlin",
      "--payload",
      '{"report":"daily"}',
      "--max-attempts",
      "3",
      "--misfire",
      "skip",
    );
    expect(job).toMatchObject({
      name: "weekday report",
      status: "active",
      schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Berlin" },
      payload: { report: "daily" },
      policies: { misfirePolicy: "skip", retry: { maxAttempts: 3 } },
    });
    expect(await json<Job>("jobs", "get", job.id)).toEqual(job);
    const listed = await json<Job[]>("jobs", "list", "--status", "active");
    expect(listed.map((j) => j.id)).toContain(job.id);

    const table = await cli(["jobs", "list"]);
    expect(table.code).toBe(EXIT.ok);
    const [header, ...rows] = table.out.trimEnd().split("\n");
    expect(header).toMatch(/^ID\s+NAME\s+TYPE\s+STATUS\s+SCHEDULE\s+NEXT RUN\s+LAST RUN$/);
    const row = rows.find((line) => line.startsWith(job.id));
    // The next run in the schedule's own zone (09:00 Berlin is +01:00 or +02:00).
    expect(row).toMatch(
      /cron "0 9 \* \* 1-5" in Europe\/Berlin\s+\d{4}-\d\d-\d\d 09:00:00 \+0[12]:00/,
    );
    const one = await cli(["jobs", "get", job.id]);
    expect(one.out).toMatch(/^next run\s+\d{4}-\d\d-\d\d 09:00:00 \+0[12]:00$/m);
  });

  it("create from a body file with flags over it; --limit caps the listing", async () => {
    const dir = await mkdtemp(join(tmpdir(), "scheduler-cli-"));
    const file = join(dir, "job.json");
    await writeFile(
      file,
      JSON.stringify({ type: "noop", name: "from file", schedule: { runAt: tomorrow() } }),
    );
    const job = await json<Job>("jobs", "create", "--file", file, "--name", "flag wins");
    expect(job).toMatchObject({ name: "flag wins", type: "noop" });
    await json<Job>(
      "jobs",
      "create",
      "--body",
      JSON.stringify({ type: "noop" }),
      "--run-at",
      tomorrow(),
    );
    expect(await json<Job[]>("jobs", "list", "--limit", "1")).toHaveLength(1);
  });

  it("create-batch from a file answers each job; one refused sets the exit code of its error", async () => {
    const dir = await mkdtemp(join(tmpdir(), "scheduler-cli-"));
    const good = join(dir, "jobs.json");
    await writeFile(
      good,
      JSON.stringify({
        jobs: [
          { type: "noop", name: "batch 1", schedule: { runAt: tomorrow() } },
          { type: "noop", name: "batch 2", schedule: { every: "PT1H" } },
        ],
      }),
    );
    const results = await json<{ status: number; job: Job }[]>(
      "jobs",
      "create-batch",
      "--file",
      good,
    );
    expect(results.map((r) => [r.status, r.job.name])).toEqual([
      [201, "batch 1"],
      [201, "batch 2"],
    ]);
    const mixed = join(dir, "mixed.json");
    await writeFile(
      mixed,
      JSON.stringify([
        { type: "noop", name: "batch 3", schedule: { runAt: tomorrow() } },
        { type: "noop", schedule: { cron: "0 9 * * *" } },
      ]),
    );
    const outcome = await cli(["jobs", "create-batch", "--file", mixed]);
    expect(outcome.code, outcome.err).toBe(EXIT.invalid);
    expect(outcome.out).toMatch(/^0\s+201\s+\S+\s+batch 3/m);
    expect(outcome.out).toMatch(/^1\s+400\s+-\s+-\s+validation_failed \(schedule\.timezone\)/m);
    expect(outcome.err).toMatch(/1 of 2 jobs were not created/);
  });

  it("create with input the API refuses exits 3 naming the field; bad flags exit 2", async () => {
    const error = await failing(
      EXIT.invalid,
      "jobs",
      "create",
      "--type",
      "noop",
      "--cron",
      "0 9 * * *",
      "--timezone",
      "CET",
    );
    expect(error).toMatchObject({
      status: 400,
      code: "validation_failed",
      field: "schedule.timezone",
    });
    const text = await cli(["jobs", "create", "--type", "noop", "--run-at", "yesterday-ish"]);
    expect(text.code).toBe(EXIT.invalid);
    expect(text.err).toMatch(/^error: validation_failed \(400\): schedule\.runAt/);

    for (const args of [
      ["jobs", "create", "--max-attempts", "three"],
      ["jobs", "create", "--payload", "{not json"],
      ["jobs", "create", "--misfire", "sometimes"],
      ["jobs", "create", "--file", "/nonexistent/job.json"],
      ["jobs", "get"],
      ["jobs", "frobnicate"],
      ["--output", "yaml", "jobs", "list"],
    ]) {
      const outcome = await cli(args);
      expect(outcome.code, args.join(" ")).toBe(EXIT.usage);
      expect(outcome.err, args.join(" ")).toMatch(/error/);
    }
  });

  it("--body and --file keep every field a flag does not override", async () => {
    const body = {
      type: "noop",
      name: "from body",
      schedule: { runAt: tomorrow() },
      payload: { order: 42 },
      priority: "low",
      timeoutSeconds: 120,
      misfirePolicy: "skip",
    };
    const fromBody = await json<Job>("jobs", "create", "--body", JSON.stringify(body));
    expect(fromBody).toMatchObject({
      name: "from body",
      payload: { order: 42 },
      priority: "low",
      timeoutSeconds: 120,
      policies: { misfirePolicy: "skip" },
    });
    const file = join(await mkdtemp(join(tmpdir(), "scheduler-cli-")), "job.json");
    await writeFile(file, JSON.stringify(body));
    const fromFile = await json<Job>("jobs", "create", "--file", file, "--priority", "high");
    expect(fromFile).toMatchObject({ name: "from body", payload: { order: 42 }, priority: "high" });
    const edited = await json<Job>(
      ...["jobs", "edit", fromFile.id, "--body", '{"name": "edited", "payload": {"order": 43}}'],
    );
    expect(edited).toMatchObject({ name: "edited", payload: { order: 43 }, priority: "high" });
  });

  it("--body's target and retry keep their fields beside a --header or --max-delay flag", async () => {
    const body = {
      type: "http",
      schedule: { runAt: tomorrow() },
      target: { url: "http://127.0.0.1:2/hook", timeoutSeconds: 5 },
      retry: { maxAttempts: 2 },
    };
    const job = await json<Job>(
      ...["jobs", "create", "--body", JSON.stringify(body), "--header", "X-Order: 42"],
      ...["--max-delay", "60"],
    );
    expect(job.target).toMatchObject({ url: "http://127.0.0.1:2/hook", timeoutSeconds: 5 });
    expect(job.policies.retry).toMatchObject({ maxAttempts: 2, maxDelaySeconds: 60 });
  });

  it("--payload null is JSON null: a create without a payload, an edit that removes it", async () => {
    const none = await json<Job>(
      ...["jobs", "create", "--type", "noop", "--run-at", tomorrow(), "--payload", "null"],
    );
    expect(none.payload).toBeNull();
    const given = await json<Job>(
      ...["jobs", "create", "--type", "noop", "--run-at", tomorrow(), "--payload", '{"a":1}'],
    );
    expect(given.payload).toEqual({ a: 1 });
    const removed = await json<Job>("jobs", "edit", given.id, "--payload", "null");
    expect(removed.payload).toBeNull();
  });

  it("--payload and --body keep a number's digits a double would change, sent and shown", async () => {
    const id = "12345678901234567890";
    const fine = "0.1000000000000000055511151231257827";
    const payload = `{"id":${id},"r":${fine}}`;
    const noop = ["jobs", "create", "--type", "noop", "--run-at", tomorrow()];
    const created = await cli(["-o", "json", ...noop, "--payload", payload]);
    expect(created.code, created.err).toBe(EXIT.ok);
    expect(created.out).toContain(`"id": ${id},\n    "r": ${fine}\n`);
    const jobId = (JSON.parse(created.out) as Job).id;
    expect((await cli(["-o", "json", "jobs", "get", jobId])).out).toContain(`"id": ${id},`);
    expect((await cli(["jobs", "get", jobId])).out).toContain(payload);
    const body = `{"payload":[${id}]}`;
    const edited = await cli(["-o", "json", "jobs", "edit", jobId, "--body", body]);
    expect(edited.code, edited.err).toBe(EXIT.ok);
    expect(edited.out.replace(/\s+/g, "")).toContain(`"payload":[${id}]`);
  });

  it("edit reads the version itself, or takes --version; a stale one exits 6", async () => {
    const job = await json<Job>("jobs", "create", "--type", "noop", "--run-at", tomorrow());
    const edited = await json<Job>(
      "jobs",
      "edit",
      job.id,
      "--name",
      "renamed",
      "--priority",
      "high",
    );
    expect(edited).toMatchObject({ name: "renamed", priority: "high", version: 2 });
    const stale = await failing(
      EXIT.versionConflict,
      "jobs",
      "edit",
      job.id,
      "--version",
      "1",
      "--name",
      "x",
    );
    expect(stale).toMatchObject({
      status: 412,
      code: "version_mismatch",
      expectedVersion: 1,
      currentVersion: 2,
    });
    const text = await cli(["jobs", "edit", job.id, "--version", "1", "--name", "x"]);
    expect(text.err).toMatch(/the job is at version 2, not 1/);
    const atVersion = await json<Job>(
      "jobs",
      "edit",
      job.id,
      "--version",
      "2",
      "--every",
      "PT1H",
      "--in-flight",
      "complete",
    );
    expect(atVersion).toMatchObject({ version: 3, policies: { inFlight: "complete" } });
    expect(atVersion.schedule).toMatchObject({ every: "PT1H" });
  });

  it("edit --url, --header or --target-timeout changes that part of the target and keeps the rest", async () => {
    const target = {
      url: "http://127.0.0.1:2/hook-old",
      headers: { Authorization: "Bearer receiver-key" },
      timeoutSeconds: 20,
      mode: "async",
    };
    const job = await json<Job>(
      ...["jobs", "create", "--body", JSON.stringify({ type: "http", target })],
      ...["--cron", "0 9 1 1 *", "--timezone", "UTC"],
    );
    const moved = await json<Job>("jobs", "edit", job.id, "--url", "http://127.0.0.1:2/hook-new");
    expect(moved.target).toEqual({ ...target, url: "http://127.0.0.1:2/hook-new" });
    const more = await json<Job>(
      ...["jobs", "edit", job.id, "--version", "2", "--header", "X-Order: 42"],
      ...["--target-timeout", "30"],
    );
    expect(more).toMatchObject({ version: 3 });
    expect(more.target).toEqual({
      ...target,
      url: "http://127.0.0.1:2/hook-new",
      headers: { ...target.headers, "X-Order": "42" },
      timeoutSeconds: 30,
    });
    // A whole target from --body replaces it, as PATCH does.
    const replaced = await json<Job>(
      ...["jobs", "edit", job.id, "--body", '{"target":{"url":"http://127.0.0.1:2/only"}}'],
    );
    expect(replaced.target).toEqual({ url: "http://127.0.0.1:2/only" });
  });

  it("edit --header replaces the job's header of that name in any casing; a target flag on a noop job is the API's 400 naming target", async () => {
    const target = {
      url: "http://127.0.0.1:2/hook",
      headers: { Authorization: "Bearer old-key", "X-Tenant": "7" },
    };
    const job = await json<Job>(
      ...["jobs", "create", "--body", JSON.stringify({ type: "http", target })],
      ...["--cron", "0 9 1 1 *", "--timezone", "UTC"],
    );
    // Header names are case-insensitive (the API refuses one given twice in two casings), so the
    // header the flag names replaces the job's, spelt as the flag spells it.
    const rotated = await json<Job>(
      ...["jobs", "edit", job.id, "--header", "authorization: Bearer new-key"],
    );
    expect(rotated.target).toEqual({
      url: target.url,
      headers: { "X-Tenant": "7", authorization: "Bearer new-key" },
    });
    // So does --header over a target in --body.
    const created = await json<Job>(
      ...["jobs", "create", "--body", JSON.stringify({ type: "http", target })],
      ...["--run-at", tomorrow(), "--header", "x-tenant: 8"],
    );
    expect(created.target?.headers).toEqual({ Authorization: "Bearer old-key", "x-tenant": "8" });
    const noop = await json<Job>("jobs", "create", "--type", "noop", "--run-at", tomorrow());
    const refused = await failing(EXIT.invalid, "jobs", "edit", noop.id, "--url", target.url);
    expect(refused).toMatchObject({ status: 400 });
    expect(JSON.stringify(refused)).toContain("only applies to http jobs");
  });

  it("--end-at and --max-runs on create and edit; none removes them; a one-off refuses them (exit 3)", async () => {
    const endAt = inSeconds(30 * 86_400);
    const job = await json<Job>(
      "jobs",
      "create",
      "--type",
      "noop",
      "--every",
      "PT1H",
      "--start-at",
      tomorrow(),
      "--end-at",
      endAt,
      "--max-runs",
      "10",
    );
    expect(job).toMatchObject({ endAt, maxRuns: 10, occurrencesQueued: 0 });
    const shown = await cli(["jobs", "get", job.id]);
    expect(shown.out).toMatch(/^ends\s+at \d{4}-.*, or after 10 runs \(0 queued\)$/m);
    const edited = await json<Job>("jobs", "edit", job.id, "--max-runs", "3", "--end-at", "none");
    expect(edited).toMatchObject({ endAt: null, maxRuns: 3 });
    const cleared = await json<Job>("jobs", "edit", job.id, "--max-runs", "none");
    expect(cleared).toMatchObject({ endAt: null, maxRuns: null });
    // On create, as its --help says of each, none is no end and no window: over --body's too.
    const unended = await json<Job>(
      "jobs",
      "create",
      "--type",
      "noop",
      "--every",
      "PT1H",
      "--start-at",
      tomorrow(),
      "--body",
      JSON.stringify({ endAt, maxRuns: 4, window: "PT5M" }),
      "--end-at",
      "none",
      "--max-runs",
      "none",
      "--window",
      "none",
    );
    expect(unended).toMatchObject({ endAt: null, maxRuns: null, window: null });
    const refused = await failing(
      EXIT.invalid,
      "jobs",
      "create",
      "--type",
      "noop",
      "--run-at",
      tomorrow(),
      "--max-runs",
      "2",
    );
    expect(refused).toMatchObject({ status: 400, field: "maxRuns" });
  });

  it("create --after --on: the dependent runs after its upstream; get shows dependents and the run's upstream", async () => {
    const upstream = await json<Job>("jobs", "create", "--type", "noop", "--run-at", tomorrow());
    const dependent = await json<Job>(
      "jobs",
      "create",
      "--type",
      "noop",
      "--after",
      upstream.id,
      "--on",
      "completion",
    );
    expect(dependent.schedule).toEqual({ after: { jobs: [upstream.id], on: "completion" } });
    expect((await json<Job>("jobs", "get", upstream.id)).dependents).toEqual([dependent.id]);
    const upstreamTable = await cli(["jobs", "get", upstream.id]);
    expect(upstreamTable.out).toMatch(new RegExp(`dependents\\s+${dependent.id}`));
    const dependentTable = await cli(["jobs", "get", dependent.id]);
    expect(dependentTable.out).toContain(`after ${upstream.id} on completion`);
    const upstreamRun = await json<Run>("jobs", "trigger", upstream.id, "--idempotency-key", "k1");
    const repeated = await json<Run>("jobs", "trigger", upstream.id, "--idempotency-key", "k1");
    expect(repeated.runId).toBe(upstreamRun.runId);
    let runs: Run[] = [];
    for (let tries = 0; tries < 100 && runs.length === 0; tries++) {
      await new Promise((done) => setTimeout(done, 200));
      runs = await json<Run[]>("runs", "list", dependent.id);
    }
    expect(runs.map((run) => run.trigger?.runId)).toEqual([upstreamRun.runId]);
    const refused = await failing(
      EXIT.invalid,
      "jobs",
      "create",
      "--type",
      "noop",
      "--after",
      "01J0000000000000000000000X",
    );
    expect(refused).toMatchObject({ field: "schedule.after.jobs" });
  });

  it("a name with a line break, a tab or a terminal escape prints escaped in tables, one line a job", async () => {
    const name = "line one\nline two\tthen \u001b[2Jcleared";
    /** The control characters in printed text, but the line breaks that end its lines. */
    const controlsIn = (text: string) =>
      [...text].filter((char) => char !== "\n" && (char < " " || char === "\u007f"));
    const job = await json<Job>(
      "jobs",
      "create",
      "--type",
      "noop",
      "--run-at",
      tomorrow(),
      "--name",
      name,
    );
    expect(job.name).toBe(name); // JSON prints the name as the API stored it
    const shown = String.raw`line one\nline two\tthen \u001b[2Jcleared`;
    const got = await cli(["jobs", "get", job.id]);
    expect(got.out).toContain(`name        ${shown}\n`);
    expect(controlsIn(got.out)).toEqual([]);
    const listed = await cli(["jobs", "list", "--limit", "1"]);
    const lines = listed.out.trimEnd().split("\n");
    expect(lines).toHaveLength(2);
    expect(lines[1]).toContain(shown);
    expect(controlsIn(listed.out)).toEqual([]);
  });

  it("pause, resume, trigger, cancel; a refused transition exits 5; an unknown job exits 4", async () => {
    const job = await json<Job>("jobs", "create", "--type", "noop", "--run-at", tomorrow());
    expect((await json<Job>("jobs", "pause", job.id)).status).toBe("paused");
    expect((await json<Job>("jobs", "resume", job.id)).status).toBe("active");
    const run = await json<Run>("jobs", "trigger", job.id);
    expect(run).toMatchObject({ jobId: job.id, status: "queued" });
    expect((await json<Job>("jobs", "cancel", job.id)).status).toBe("cancelled");
    const refused = await failing(EXIT.conflict, "jobs", "resume", job.id);
    expect(refused).toMatchObject({ code: "illegal_transition", currentStatus: "cancelled" });
    const missing = await failing(EXIT.notFound, "jobs", "get", "01J0000000000000000000000X");
    expect(missing).toMatchObject({ status: 404, code: "not_found" });
  });

  it("delete cancels and removes the job (exit 0); its runs stay listed; a repeat exits 4", async () => {
    const job = await json<Job>("jobs", "create", "--type", "noop", "--run-at", tomorrow());
    const run = await json<Run>("jobs", "trigger", job.id);
    expect(await json<{ id: string; deleted: boolean }>("jobs", "delete", job.id)).toEqual({
      id: job.id,
      deleted: true,
    });
    const missing = await failing(EXIT.notFound, "jobs", "get", job.id);
    expect(missing).toMatchObject({ status: 404, code: "not_found" });
    // The sandbox's workers may run the no-op before the delete reaches it: either way it stays listed.
    const runs = await json<Run[]>("runs", "list", job.id);
    expect(runs.map((r) => r.runId)).toEqual([run.runId]);
    expect(["cancelled", "succeeded"]).toContain(runs[0]?.status);
    await failing(EXIT.notFound, "jobs", "delete", job.id);
    const table = await cli(["jobs", "delete", job.id]);
    expect(table.code).toBe(EXIT.notFound);
  });

  it("delete whose answer is lost: the retry finds the job gone, and the delete exits 0 saying so", async () => {
    const job = await json<Job>("jobs", "create", "--type", "noop", "--run-at", tomorrow());
    // The first DELETE is done by the sandbox, and its connection broken instead of its answer sent
    // on: lost whatever the sandbox's speed (a client timeout raced a loaded sandbox's delete).
    const deletes: number[] = [];
    const outcome = await behindProxy(
      async (request, answer) => {
        const reply = await answer();
        if (request.method === "DELETE" && deletes.push(reply.status) === 1) return null;
        return reply;
      },
      ["-o", "json", "jobs", "delete", job.id],
    );
    expect(outcome.code, outcome.err).toBe(EXIT.ok);
    expect(JSON.parse(outcome.out)).toEqual({ id: job.id, gone: true });
    expect(deletes).toEqual([204, 404]);
    await failing(EXIT.notFound, "jobs", "get", job.id);
    // Asked once more, it is not found: only a retry's 404 follows an attempt that may have deleted it.
    await failing(EXIT.notFound, "jobs", "delete", job.id);
  });

  it("delete of an id that never existed, whose first attempt API Gateway answered 502, does not say it deleted a job", async () => {
    const typo = "01JD0000000000000000000000";
    // API Gateway's 502 for the first DELETE (the function failed before it ran); the retry reaches the sandbox.
    let deletes = 0;
    const relay = async (request: IncomingMessage, answer: () => Promise<ProxyReply>) =>
      request.method === "DELETE" && ++deletes === 1
        ? { status: 502, body: Buffer.from('{"message":"Internal server error"}') }
        : answer();
    for (const format of ["json", "table"]) {
      deletes = 0;
      const outcome = await behindProxy(relay, ["-o", format, "jobs", "delete", typo]);
      expect(outcome.code, outcome.err).toBe(EXIT.ok);
      expect(deletes).toBe(2);
      if (format === "json") expect(JSON.parse(outcome.out)).toEqual({ id: typo, gone: true });
      else expect(outcome.out).toMatch(/^job \S+ is gone: not confirmed deleted by this command/);
      expect(outcome.out).not.toMatch(/deleted job|"deleted"/);
    }
  });
});

describe("a create, trigger, replay or rotation that may have been applied, under the command's own key", () => {
  /** API Gateway's 502 after the API applied the request, asking for the retry at once. */
  const appliedThen502 = async (request: IncomingMessage, answer: () => Promise<ProxyReply>) => {
    if (request.method !== "POST") return answer();
    await answer();
    return {
      status: 502,
      body: Buffer.from('{"message":"Internal server error"}'),
      headers: { "Retry-After": "0" },
    };
  };
  const HINT = /retry with --idempotency-key (\S+) to avoid a duplicate/;

  it("a create answered 502 to its every attempt prints the key it sent (exit 1); run again with it, the one job it made", async () => {
    const name = `lost-create-${randomBytes(4).toString("hex")}`;
    const args = ["jobs", "create", "--type", "noop", "--name", name, "--run-at", tomorrow()];
    const keys: string[] = [];
    const outcome = await behindProxy((request, answer) => {
      if (request.method === "POST") keys.push(String(request.headers["idempotency-key"]));
      return appliedThen502(request, answer);
    }, args);
    expect(outcome.code, outcome.err).toBe(EXIT.failed);
    expect(outcome.err).toMatch(HINT);
    const key = HINT.exec(outcome.err)?.[1] ?? "";
    // The client's retries sent it, and it is the only one sent.
    expect(keys.length).toBeGreaterThan(1);
    expect(new Set(keys)).toEqual(new Set([key]));
    const again = await json<Job>(...args, "--idempotency-key", key);
    const named = (await json<Job[]>("jobs", "list", "--limit", "10000")).filter(
      (job) => job.name === name,
    );
    expect(named.map((job) => job.id)).toEqual([again.id]);
  });

  it("a trigger whose connection broke on every attempt prints the key it sent (exit 9; JSON: idempotencyKey); run again with it, the one run", async () => {
    const job = await json<Job>("jobs", "create", "--type", "noop", "--run-at", tomorrow());
    const keys: string[] = [];
    const outcome = await behindProxy(
      async (request, answer) => {
        if (request.method !== "POST") return answer();
        keys.push(String(request.headers["idempotency-key"]));
        await answer();
        return null;
      },
      ["-o", "json", "jobs", "trigger", job.id],
    );
    expect(outcome.code, outcome.err).toBe(EXIT.unreachable);
    const error = (
      JSON.parse(outcome.err) as { error: { message: string; idempotencyKey?: string } }
    ).error;
    expect(error.message).toMatch(/it may have been applied/);
    const key = error.idempotencyKey ?? "";
    expect(keys.length).toBeGreaterThan(1);
    expect(new Set(keys)).toEqual(new Set([key]));
    const again = await json<Run>("jobs", "trigger", job.id, "--idempotency-key", key);
    const runs = await json<Run[]>("runs", "list", job.id);
    expect(runs.map((run) => run.runId)).toEqual([again.runId]);
  });

  it("a replay answered 502 to its every attempt prints the key it sent (exit 1); run again with it, the one run", async () => {
    const dead = await deadRun();
    const keys: string[] = [];
    const outcome = await behindProxy(
      (request, answer) => {
        if (request.method === "POST") keys.push(String(request.headers["idempotency-key"]));
        return appliedThen502(request, answer);
      },
      ["dead-letters", "replay", dead.runId],
    );
    expect(outcome.code, outcome.err).toBe(EXIT.failed);
    expect(outcome.err).toMatch(HINT);
    const key = HINT.exec(outcome.err)?.[1] ?? "";
    expect(keys.length).toBeGreaterThan(1);
    expect(new Set(keys)).toEqual(new Set([key]));
    const again = await json<Run>("dead-letters", "replay", dead.runId, "--idempotency-key", key);
    const replays = (await json<Run[]>("runs", "list", dead.jobId)).filter(
      (run) => run.attempt === 2,
    );
    expect(replays.map((run) => run.runId)).toEqual([again.runId]);
  });

  it("a rotation answered 502 to its every attempt prints the key it sent (JSON: idempotencyKey); run again with it, the secret it made", async () => {
    const before = await json<{ secret: string }>("webhook-secret", "get");
    const keys: string[] = [];
    const outcome = await behindProxy(
      (request, answer) => {
        if (request.method === "POST") keys.push(String(request.headers["idempotency-key"]));
        return appliedThen502(request, answer);
      },
      ["-o", "json", "webhook-secret", "rotate"],
    );
    expect(outcome.code, outcome.err).toBe(EXIT.failed);
    const key = (JSON.parse(outcome.err) as { error: { idempotencyKey?: string } }).error
      .idempotencyKey;
    expect(keys.length).toBeGreaterThan(1);
    expect(new Set(keys)).toEqual(new Set([key]));
    // The rotation the first attempt made, answered again, not a second one.
    const again = await json<{ secret: string }>(
      "webhook-secret",
      "rotate",
      "--idempotency-key",
      key ?? "",
    );
    expect(again.secret).not.toBe(before.secret);
    expect((await json<{ secret: string }>("webhook-secret", "get")).secret).toBe(again.secret);
  });

  it("prints no key after a 4xx (nothing was written), nor for the user's own key or none", async () => {
    const args = ["jobs", "create", "--type", "noop", "--run-at", tomorrow()];
    for (const [status, code] of [
      [400, "validation_failed"],
      [401, "unauthorized"],
      [403, "forbidden"],
      [404, "not_found"],
      [409, "conflict"],
      [422, "validation_failed"],
    ] as const) {
      const refused = async () => ({
        status,
        body: Buffer.from(JSON.stringify({ error: { code, message: "refused" } })),
      });
      const outcome = await behindProxy(refused, args);
      expect(outcome.code, `${status}: ${outcome.err}`).not.toBe(EXIT.ok);
      expect(outcome.err, String(status)).not.toMatch(/idempotency-key/);
    }
    // A 500: it may have been applied, and the user knows the key, or sent none.
    const internal = async () => ({
      status: 500,
      body: Buffer.from('{"error":{"code":"internal","message":"internal error"}}'),
    });
    const mine = await behindProxy(internal, [...args, "--idempotency-key", "my-own-key"]);
    const none = await behindProxy(internal, [...args, "--no-idempotency-key"]);
    for (const outcome of [mine, none]) {
      expect(outcome.code, outcome.err).toBe(EXIT.failed);
      expect(outcome.err).not.toMatch(HINT);
    }
    // The same 500 to a key of the command's own: the key is printed.
    expect((await behindProxy(internal, args)).err).toMatch(HINT);
  });
});

interface ProxyReply {
  readonly status: number;
  readonly body: Buffer;
  readonly headers?: Readonly<Record<string, string>>;
}

/**
 * Runs the CLI against a proxy in front of the sandbox: `relay` gets each request and its answer
 * from the sandbox (`answer()`, read only when called) and returns what to send back, or null to
 * break the connection instead (an answer lost on the way).
 */
async function behindProxy(
  relay: (
    request: IncomingMessage,
    answer: () => Promise<ProxyReply>,
  ) => Promise<ProxyReply | null>,
  args: readonly string[],
): Promise<CliOutcome> {
  const proxy = createServer((request, response) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const answer = async () => {
        const reply = await fetch(`${sandbox.url}${request.url ?? "/"}`, {
          method: request.method ?? "GET",
          headers: Object.fromEntries(
            ["authorization", "content-type", "idempotency-key"].flatMap((name) => {
              const value = request.headers[name];
              return typeof value === "string" ? [[name, value]] : [];
            }),
          ),
          ...(chunks.length > 0 ? { body: Buffer.concat(chunks) } : {}),
        });
        return { status: reply.status, body: Buffer.from(await reply.arrayBuffer()) };
      };
      const reply = await relay(request, answer);
      if (reply === null) {
        response.destroy();
        return;
      }
      response
        .writeHead(reply.status, { "Content-Type": "application/json", ...reply.headers })
        .end(reply.body);
    })();
  });
  await new Promise<void>((done) => proxy.listen(0, "127.0.0.1", done));
  try {
    // The client's backoff between attempts (500 ms doubling: 3.5 s for a trigger whose every
    // attempt broke) is not waited out: the cases assert which attempts were sent, with which key,
    // and what the CLI made of their answers, none of it when; the attempts and delays decided are
    // the client's own (client-retries.test.ts pins them).
    return await runCaptured(
      ["--api", `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, ...args],
      {},
      { retrySleep: async () => undefined },
    );
  } finally {
    proxy.closeAllConnections();
    await new Promise<void>((done) => proxy.close(() => done()));
  }
}

// The cases of this group and the next each create jobs of their own and read only those (the
// dead letters' list is searched for its own job's): they run side by side, their time mostly
// waiting for the sandbox to start, beat or end a run.
describe.concurrent("cancelling runs", () => {
  /** A `sleep` job due now whose run the sandbox's workers have started. */
  async function runningSleep(extra: string[] = []): Promise<{ job: Job; run: Run }> {
    const job = await json<Job>(
      "jobs",
      "create",
      "--type",
      "sleep",
      "--payload",
      '{"ms":60000}',
      ...extra,
    );
    const run = await waitFor("its run to be running", async () =>
      (await json<Run[]>("runs", "list", job.id)).find((r) => r.status === "running"),
    );
    return { job, run };
  }

  it("runs cancel JOB RUN cancels a running run within a heartbeat; a second cancel exits 0 with the run as it stands", async () => {
    const { job, run } = await runningSleep(["--run-at", new Date().toISOString()]);
    const asked = await json<Run>("runs", "cancel", job.id, run.runId);
    expect(asked).toMatchObject({ runId: run.runId, status: "running", cancelledBy: "api" });
    // The sandbox's heartbeat: a third of the lease, at most 10 s.
    const ended = await waitFor(
      "the run to end",
      async () => {
        const now = await json<Run>("runs", "get", job.id, run.runId);
        return now.status === "running" ? undefined : now;
      },
      15_000,
    );
    expect(ended).toMatchObject({ status: "cancelled", cancelledBy: "api" });
    // A repeat answers the cancelled run (docs/api.md "Retrying requests"): a script's retry of
    // a cancel whose answer it lost ends as the first would have.
    const again = await json<Run>("runs", "cancel", job.id, run.runId);
    expect(again).toEqual(ended);
  }, 40_000);

  it("jobs pause --running cancel cancels the run in progress; a bad --running exits 2", async () => {
    const { job, run } = await runningSleep(["--run-at", new Date().toISOString()]);
    expect((await cli(["jobs", "pause", job.id, "--running", "stop"])).code).toBe(EXIT.usage);
    expect((await json<Job>("jobs", "pause", job.id, "--running", "cancel")).status).toBe("paused");
    const ended = await waitFor(
      "the run to end",
      async () => {
        const now = await json<Run>("runs", "get", job.id, run.runId);
        return now.status === "running" ? undefined : now;
      },
      15_000,
    );
    expect(ended).toMatchObject({ status: "cancelled", cancelledBy: "pause" });
  }, 40_000);
});

describe.concurrent("runs and dead letters", () => {
  it("runs watch follows runs live; runs list and get show them", async () => {
    const job = await json<Job>("jobs", "create", "--type", "noop", "--run-at", inSeconds(4));
    const watched = await cli([
      "-o",
      "json",
      "runs",
      "watch",
      job.id,
      "--count",
      "1",
      "--interval",
      "200",
      "--timeout",
      "40",
    ]);
    expect(watched.code, watched.err).toBe(EXIT.ok);
    const lines = watched.out
      .trimEnd()
      .split("\n")
      .map((line) => JSON.parse(line) as Run);
    expect(lines.at(-1)).toMatchObject({ jobId: job.id, status: "succeeded" });
    const runs = await json<Run[]>("runs", "list", job.id);
    expect(runs.map((run) => run.status)).toEqual(["succeeded"]);
    const runId = runs[0]?.runId ?? "";
    expect(await json<Run>("runs", "get", job.id, runId)).toEqual(runs[0]);
    const table = await cli(["runs", "list", job.id]);
    expect(table.out).toMatch(/^RUN\s+ATTEMPT\s+STATUS\s+SCHEDULED FOR/);
    expect(table.out).toContain(runId);
    await failing(EXIT.notFound, "runs", "get", job.id, `${job.id}-20300101T000000000-1`);
  });

  it("runs watch --since shows a run that ended before the watch began", async () => {
    const since = new Date().toISOString();
    const job = await json<Job>("jobs", "create", "--type", "noop", "--run-at", inSeconds(1));
    let runs: Run[] = [];
    for (let tries = 0; tries < 150 && runs[0]?.status !== "succeeded"; tries++) {
      await new Promise((done) => setTimeout(done, 200));
      runs = await json<Run[]>("runs", "list", job.id);
    }
    const watched = await cli([
      "-o",
      "json",
      "runs",
      "watch",
      job.id,
      "--since",
      since,
      "--count",
      "1",
      "--timeout",
      "10",
    ]);
    expect(watched.code, watched.err).toBe(EXIT.ok);
    expect(JSON.parse(watched.out)).toEqual(runs[0]);
    // The same instant written in New York's winter offset, and a minute after it in Kolkata's.
    const inOffset = (ms: number, minutes: number, offset: string) =>
      `${new Date(ms + minutes * 60_000).toISOString().slice(0, -1)}${offset}`;
    const sinceMs = Date.parse(since);
    const watchSince = (instant: string) =>
      cli([
        "-o",
        "json",
        "runs",
        "watch",
        job.id,
        "--since",
        instant,
        "--count",
        "1",
        "--timeout",
        "1",
      ]);
    const same = await watchSince(inOffset(sinceMs, -300, "-05:00"));
    expect(same.code, same.err).toBe(EXIT.ok);
    expect(JSON.parse(same.out)).toEqual(runs[0]);
    const finishedMs = Date.parse(runs[0]?.finishedAt ?? "");
    const after = await watchSince(inOffset(finishedMs + 60_000, 330, "+0530"));
    expect(after.code).toBe(EXIT.timedOut);
    const late = await cli(["runs", "watch", job.id, "--count", "1", "--timeout", "1"]);
    expect(late.code).toBe(EXIT.timedOut);
    expect((await cli(["runs", "watch", job.id, "--since", "soon"])).code).toBe(EXIT.usage);
  });

  it("runs watch: an --interval, --count or --timeout that is not a whole number above 0 exits 2 naming it, before any request", async () => {
    const cases = [
      ["--interval", "0"],
      ["--interval", "-5"],
      ["--interval", "soon"],
      ["--interval", "1.5"],
      // Past Node's longest timer, which fires at once: polled without a pause.
      ["--interval", "2147483648"],
      ["--count", "0"],
      ["--timeout", "0"],
      ["--timeout", "9".repeat(400)],
    ];
    for (const [flag = "", value = ""] of cases) {
      // Nobody listens there: a request would exit 9 (cannot reach the API).
      const { code, err } = await runCaptured([
        "--api",
        "http://127.0.0.1:9",
        "runs",
        "watch",
        "01J0000000000000000000000X",
        flag,
        value,
      ]);
      expect(code, `${flag} ${value}: ${err}`).toBe(EXIT.usage);
      expect(err).toContain(flag);
    }
  });

  it("runs watch: a --since that is not an ISO-8601 instant with Z or an offset exits 2 naming it, before any request", async () => {
    const cases = [
      // Date.parse reads these as a year (2001), a day of 2001, and the machine's own time zone.
      "1",
      "Dec 3",
      "2026-12-03T13:00",
      "2026-12-03",
      // Not a real day: Date.parse rolls it over to March 2.
      "2026-02-30T00:00:00Z",
      "2026-12-03T24:00:00Z",
      "2026-12-03T13:00:00+25:00",
      "soon",
    ];
    for (const since of cases) {
      // Nobody listens there: a request would exit 9 (cannot reach the API).
      const { code, out, err } = await runCaptured([
        "--api",
        "http://127.0.0.1:9",
        "runs",
        "watch",
        "01J0000000000000000000000X",
        "--since",
        since,
      ]);
      expect(code, `--since ${since}: ${err}`).toBe(EXIT.usage);
      expect(err).toContain("--since");
      expect(err).toContain(JSON.stringify(since));
      expect(out).toBe("");
    }
  });

  it("runs watch exits 10 when --count is not reached within --timeout", async () => {
    const job = await json<Job>("jobs", "create", "--type", "noop", "--run-at", tomorrow());
    const outcome = await cli([
      "runs",
      "watch",
      job.id,
      "--count",
      "1",
      "--timeout",
      "1",
      "--interval",
      "200",
    ]);
    expect(outcome.code).toBe(EXIT.timedOut);
    expect(outcome.err).toMatch(/0 of 1 runs ended within 1 s/);
  });

  it("dead-letters list and replay; a second replay exits 5", async () => {
    const dead = await deadRun();
    const replayed = await json<Run>("dead-letters", "replay", dead.runId);
    expect(replayed).toMatchObject({ jobId: dead.jobId, attempt: 2 });
    const twice = await failing(EXIT.conflict, "dead-letters", "replay", dead.runId);
    expect(twice.code).toBe("not_replayable");
    const table = await cli(["dead-letters", "list"]);
    expect(table.out).toMatch(/^JOB\s+RUN\s+ATTEMPT\s+STATUS/);
  });
});

describe("searching run history", () => {
  it("runs list --status --from --to filters on the server; a bad filter is refused", async () => {
    const job = await json<Job>("jobs", "create", "--type", "noop", "--every", "PT1S");
    let succeeded: Run[] = [];
    for (let tries = 0; tries < 100 && succeeded.length < 2; tries++) {
      await new Promise((done) => setTimeout(done, 200));
      succeeded = await json<Run[]>(
        "runs",
        "list",
        job.id,
        "--status",
        "succeeded",
        "--limit",
        "2",
      );
    }
    expect(succeeded.map((run) => run.status)).toEqual(["succeeded", "succeeded"]);
    const past = await json<Run[]>("runs", "list", job.id, "--to", "now", "--limit", "2");
    const after = Date.now();
    expect(past).toHaveLength(2);
    for (const run of past) expect(Date.parse(run.scheduledFor)).toBeLessThan(after);
    const [newest, older] = succeeded;
    const between = await json<Run[]>(
      ...["runs", "list", job.id, "--status", "succeeded,failed"],
      ...["--from", older?.scheduledFor ?? "", "--to", newest?.scheduledFor ?? ""],
    );
    // Under load a once-a-second job's runs can end out of order, so a run between the two newest
    // succeeded ones may have ended by now: it is in the range too. Newest is not (`--to` excludes).
    expect(between.map((run) => run.runId)).toContain(older?.runId);
    for (const run of between) {
      expect(["succeeded", "failed"]).toContain(run.status);
      expect(Date.parse(run.scheduledFor)).toBeGreaterThanOrEqual(
        Date.parse(older?.scheduledFor ?? ""),
      );
      expect(Date.parse(run.scheduledFor)).toBeLessThan(Date.parse(newest?.scheduledFor ?? ""));
    }
    const usage = await cli(["runs", "list", job.id, "--status", "succeeded,finished"]);
    expect(usage.code).toBe(EXIT.usage);
    expect(usage.err).toMatch(/"finished" is not a run status/);
    const invalid = await failing(EXIT.invalid, "runs", "list", job.id, "--from", "yesterday");
    expect(invalid.field).toBe("from");
    expect((await cli(["jobs", "cancel", job.id])).code).toBe(EXIT.ok);
  });

  it("schedules preview --from: a DST night months ahead, of a schedule and of a job", async () => {
    const schedule = ["--cron", "30 2 * * *", "--timezone", "Europe/Berlin"];
    const from = ["--from", "2030-03-30T12:00:00Z", "--count", "2"];
    const expected = [
      { utc: "2030-03-31T01:30:00.000Z", local: "2030-03-31T03:30:00.000+02:00" },
      { utc: "2030-04-01T00:30:00.000Z", local: "2030-04-01T02:30:00.000+02:00" },
    ];
    const checked = await json<Preview>("schedules", "preview", ...schedule, ...from);
    expect(checked.occurrences).toEqual(expected);
    const job = await json<Job>("jobs", "create", "--type", "noop", ...schedule);
    const ofJob = await json<Preview>("schedules", "preview", "--job", job.id, ...from);
    expect(ofJob.occurrences).toEqual(expected);
    const invalid = await failing(EXIT.invalid, "schedules", "preview", ...schedule, "--from", "x");
    expect(invalid.field).toBe("from");
  });
});

describe("schedules and the webhook secret", () => {
  it("schedules preview: a table in the schedule's own zone, JSON, a job's, and errors", async () => {
    const args = [
      "schedules",
      "preview",
      "--cron",
      "30 9 * * MON-FRI",
      "--timezone",
      "America/New_York",
    ];
    const preview = await json<Preview>(...args, "--count", "3");
    expect(preview.timezone).toBe("America/New_York");
    expect(preview.occurrences).toHaveLength(3);
    const table = await cli([...args, "--count", "2"]);
    expect(table.code).toBe(EXIT.ok);
    const lines = table.out.trimEnd().split("\n");
    expect(lines[0]).toBe('cron "30 9 * * MON-FRI" in America/New_York; times in America/New_York');
    expect(lines[1]).toMatch(/^#\s+LOCAL \(America\/New_York\)\s+UTC$/);
    expect(lines.slice(2)).toHaveLength(2);
    for (const line of lines.slice(2)) expect(line).toMatch(/T09:30:00\.000-0[45]:00\s+\S+Z$/);

    const job = await json<Job>("jobs", "create", "--type", "noop", "--every", "PT15M");
    const ofJob = await json<Preview>("schedules", "preview", "--job", job.id, "--count", "4");
    expect(ofJob.occurrences).toHaveLength(4);

    expect((await cli(["schedules", "preview"])).code).toBe(EXIT.usage);
    const invalid = await failing(EXIT.invalid, "schedules", "preview", "--every", "PT0S");
    expect(invalid.field).toBe("schedule.every");
  });

  it("schedules preview --end-at and --max-runs stop where a job created with them would; bad values are refused", async () => {
    const hourly = [
      "schedules",
      "preview",
      "--every",
      "PT1H",
      "--start-at",
      "2030-01-01T00:00:00Z",
    ];
    const hours = (preview: Preview) => preview.occurrences.map((occurrence) => occurrence.utc);
    const ended = await json<Preview>(
      ...hourly,
      "--end-at",
      "2030-01-01T02:30:00Z",
      "--count",
      "10",
    );
    expect(hours(ended)).toEqual([
      "2030-01-01T00:00:00.000Z",
      "2030-01-01T01:00:00.000Z",
      "2030-01-01T02:00:00.000Z",
    ]);
    const counted = await json<Preview>(...hourly, "--max-runs", "2", "--count", "10");
    expect(hours(counted)).toEqual(["2030-01-01T00:00:00.000Z", "2030-01-01T01:00:00.000Z"]);
    const both = await json<Preview>(
      ...hourly,
      ...["--end-at", "2030-01-01T05:00:00Z", "--max-runs", "4", "--count", "10"],
    );
    expect(hours(both)).toHaveLength(4);
    const table = await cli([...hourly, "--max-runs", "1"]);
    expect(table.code).toBe(EXIT.ok);
    expect(table.out.trimEnd().split("\n").slice(2)).toHaveLength(1);

    const notNumber = await cli([...hourly, "--max-runs", "three"]);
    expect(notNumber.code).toBe(EXIT.usage);
    expect(notNumber.err).toMatch(/"three" is not a whole number/);
    expect((await failing(EXIT.invalid, ...hourly, "--max-runs", "0")).field).toBe("maxRuns");
    // A whole number past 2^53 is one all the same: the API names the field's own bound.
    const huge = await failing(EXIT.invalid, ...hourly, "--max-runs", "99999999999999999999");
    expect(huge.field).toBe("maxRuns");
    expect(huge.message).toMatch(/<=\d+$/);
    expect(huge.message).not.toContain("9007199254740991");
    // Past a double's range it would be sent as null (no limit): refused before any request.
    const endless = await cli([...hourly, "--max-runs", "9".repeat(400)]);
    expect(endless.code).toBe(EXIT.usage);
    expect(endless.err).toMatch(/is too large/);
    expect((await failing(EXIT.invalid, ...hourly, "--end-at", "soon")).field).toBe("endAt");
    const oneOff = ["schedules", "preview", "--run-at", "2030-01-01T00:00:00Z"];
    expect((await failing(EXIT.invalid, ...oneOff, "--max-runs", "2")).field).toBe("maxRuns");
    const job = await json<Job>("jobs", "create", "--type", "noop", "--every", "PT15M");
    const withJob = await cli(["schedules", "preview", "--job", job.id, "--max-runs", "2"]);
    expect(withJob.code).toBe(EXIT.usage);
    expect(withJob.err).toMatch(/--end-at and --max-runs go with a schedule/);
    expect((await cli(["jobs", "cancel", job.id])).code).toBe(EXIT.ok);
  });

  it("--window sets the jitter window, edit --window none removes it; a job's preview shows planned times", async () => {
    const job = await json<Job>(
      "jobs",
      "create",
      "--type",
      "noop",
      "--every",
      "PT15M",
      "--window",
      "PT5M",
    );
    expect(job.window).toBe("PT5M");
    const table = await cli(["schedules", "preview", "--job", job.id, "--count", "2"]);
    expect(table.code).toBe(EXIT.ok);
    const lines = table.out.trimEnd().split("\n");
    expect(lines[1]).toMatch(/^#\s+LOCAL \(UTC\)\s+UTC\s+PLANNED \(UTC\)$/);
    for (const line of lines.slice(2)) expect(line).toMatch(/Z\s+\S+Z$/);
    const tooLong = await failing(EXIT.invalid, "jobs", "edit", job.id, "--window", "PT16M");
    expect(tooLong.field).toBe("window");
    const cleared = await json<Job>("jobs", "edit", job.id, "--window", "none");
    expect(cleared.window).toBeNull();
  });

  it("webhook-secret get and rotate", async () => {
    const first = await json<{ secret: string }>("webhook-secret", "get");
    expect(first.secret).toMatch(/^whsec_/);
    const plain = await cli(["webhook-secret", "get"]);
    expect(plain.out).toBe(`${first.secret}\n`);
    const rotated = await json<{ secret: string }>("webhook-secret", "rotate");
    expect(rotated.secret).not.toBe(first.secret);
    expect((await json<{ secret: string }>("webhook-secret", "get")).secret).toBe(rotated.secret);
  });
});

describe("quotas", () => {
  it("quotas get and set; a create over a quota exits 12 naming it; set with no quota removes the override", async () => {
    const own = await json<TenantQuotas>("quotas", "get");
    expect(own).toMatchObject({ tenantId: "default", override: {} });
    const set = await json<TenantQuotas>("quotas", "set", "default", "--max-priority", "normal");
    expect(set.override).toEqual({ maxPriority: "normal" });
    expect(set.quotas.maxPriority).toBe("normal");
    const table = await cli(["quotas", "get", "default"]);
    expect(table.out).toMatch(/maxPriority\s+normal\s+override/);
    const refused = await failing(
      EXIT.quotaExceeded,
      "jobs",
      "create",
      "--type",
      "noop",
      "--run-at",
      tomorrow(),
      "--priority",
      "high",
    );
    expect(refused).toMatchObject({
      code: "quota_exceeded",
      field: "priority",
      quota: "maxPriority",
    });
    expect((await json<TenantQuotas>("quotas", "set", "default")).override).toEqual({});
    const bad = await cli(["quotas", "set", "default", "--concurrent-runs", "many"]);
    expect(bad.code).toBe(EXIT.usage);
  });

  it("quotas set --active-jobs none lifts the limit (null in the override), as its help says", async () => {
    const set = await json<TenantQuotas>(
      ...["quotas", "set", "cli-none", "--active-jobs", "none", "--runs-per-minute", "none"],
      ...["--concurrent-runs", "7"],
    );
    expect(set.override).toEqual({ activeJobs: null, runsPerMinute: null, concurrentRuns: 7 });
    expect(set.quotas).toMatchObject({ activeJobs: null, runsPerMinute: null, concurrentRuns: 7 });
    const table = await cli(["quotas", "get", "cli-none"]);
    expect(table.out).toMatch(/activeJobs\s+none\s+override/);
    expect((await json<TenantQuotas>("quotas", "set", "cli-none")).override).toEqual({});
  });
});

describe("credentials, reachability, help", () => {
  it("an unknown key exits 7; an API nobody listens on exits 9", async () => {
    const refused = await failing(EXIT.unauthorized, "--key", "nobody", "jobs", "list");
    expect(refused).toMatchObject({ status: 401, code: "unauthorized" });
    const fromEnv = await cli(["jobs", "list"], { SCHEDULER_API_KEY: "nobody" });
    expect(fromEnv.code).toBe(EXIT.unauthorized);
    const { code, err } = await runCaptured(["--api", "http://127.0.0.1:9", "jobs", "list"]);
    expect(code).toBe(EXIT.unreachable);
    expect(err).toMatch(/^error: cannot reach the API/);
  });

  it("an --api or SCHEDULER_API_URL that is not an http(s) URL exits 2 naming where it came from", async () => {
    const flag = await runCaptured(["--api", "127.0.0.1:3000", "jobs", "list"], {});
    expect(flag.code).toBe(EXIT.usage);
    expect(flag.err).toMatch(/^error: --api: "127\.0\.0\.1:3000" is not an http\(s\) URL/);
    const notAUrl = await runCaptured(["--api", "localhost", "jobs", "list"], {});
    expect(notAUrl.code).toBe(EXIT.usage);
    expect(notAUrl.err).toMatch(/^error: --api: "localhost"/);
    const fromEnv = await runCaptured(["jobs", "list"], { SCHEDULER_API_URL: "api.example.com" });
    expect(fromEnv.code).toBe(EXIT.usage);
    expect(fromEnv.err).toMatch(/^error: SCHEDULER_API_URL: "api\.example\.com"/);
    const json = await runCaptured(["-o", "json", "--api", "localhost", "jobs", "list"], {});
    expect(json.code).toBe(EXIT.usage);
    expect(JSON.parse(json.err)).toEqual({ error: { message: expect.stringMatching(/^--api: /) } });
  });

  it("an --api with a user name or password in it exits 2 without printing the password", async () => {
    for (const [args, env, source] of [
      [["--api", "http://tenant:hunter2@127.0.0.1:9", "jobs", "list"], {}, "--api"],
      [
        ["jobs", "list"],
        { SCHEDULER_API_URL: "https://tenant:hunter2@api.example.com" },
        "SCHEDULER_API_URL",
      ],
    ] as const) {
      const { code, err } = await runCaptured(args, env);
      expect(code, err).toBe(EXIT.usage);
      expect(err).toMatch(new RegExp(`^error: ${source}: `));
      expect(err).not.toContain("hunter2");
    }
  });

  it("SigV4 with no credentials to be found exits 7, and with no region exits 2 naming --region; nothing is sent", async () => {
    const requests: string[] = [];
    const server = createServer((request, response) => {
      requests.push(`${request.method} ${request.url}`);
      response.writeHead(500).end();
    });
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    const api = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const home = await mkdtemp(join(tmpdir(), "cli-no-aws-"));
    // No AWS configuration, keys or instance role: the default chain finds nothing. The SDK's
    // chain reads the process's environment and files, so these runs are processes of their own
    // (about a second of CPU each), side by side.
    const env = {
      PATH: process.env.PATH ?? "",
      HOME: home,
      AWS_CONFIG_FILE: join(home, "config"),
      AWS_SHARED_CREDENTIALS_FILE: join(home, "credentials"),
      AWS_EC2_METADATA_DISABLED: "true",
    };
    const bin = (args: string[], extra: Record<string, string> = {}) =>
      spawnCaptured(process.execPath, ["bin/scheduler.mjs", "--api", api, ...args], {
        cwd: REPO,
        env: { ...env, ...extra },
      });
    try {
      const [noCredentials, asJson] = await Promise.all([
        bin(["--profile", "nosuch", "jobs", "list"], { AWS_REGION: "eu-west-1" }),
        bin(["-o", "json", "--profile", "nosuch", "--region", "eu-west-1", "jobs", "list"]),
      ]);
      expect(noCredentials.code, noCredentials.err).toBe(EXIT.unauthorized);
      expect(noCredentials.err).toMatch(/^error: no AWS credentials to sign requests with/);
      expect(noCredentials.err).toContain("--key");
      expect(asJson.code, asJson.err).toBe(EXIT.unauthorized);
      expect(asJson.out).toBe("");
      expect(JSON.parse(asJson.err)).toEqual({
        error: { message: expect.stringMatching(/^no AWS credentials/) },
      });
      // The region is the CLI's own reading of its flags and the environment it is given (io.env),
      // refused before a client or the SDK's chain is made: run in this process, with none.
      const noRegion = await runCaptured(["--api", api, "--profile", "nosuch", "jobs", "list"], {});
      expect(noRegion.code, noRegion.err).toBe(EXIT.usage);
      expect(noRegion.err).toMatch(/^error: no region to sign requests to 127\.0\.0\.1:\d+ for/);
      expect(noRegion.err).toContain("--region");
      expect(requests).toEqual([]);
    } finally {
      await new Promise((done) => server.close(done));
    }
  }, 30_000);

  it("chooses the bearer key, the sandbox's key, or SigV4", () => {
    const io = { stdout: () => undefined, stderr: () => undefined };
    const flags = { output: "table" as const };
    expect(authFrom({ ...flags, key: "k" }, "https://api.example.com", { ...io, env: {} })).toEqual(
      {
        kind: "bearer",
        key: "k",
      },
    );
    expect(
      authFrom(flags, "https://api.example.com", { ...io, env: { SCHEDULER_API_KEY: "e" } }),
    ).toEqual({ kind: "bearer", key: "e" });
    expect(authFrom(flags, "http://127.0.0.1:3000", { ...io, env: {} })).toEqual({
      kind: "bearer",
      key: SANDBOX_KEY,
    });
    expect(authFrom(flags, "http://localhost:3000", { ...io, env: {} })).toEqual({
      kind: "bearer",
      key: SANDBOX_KEY,
    });
    expect(
      authFrom({ ...flags, profile: "dev" }, "http://127.0.0.1:3000", { ...io, env: {} }),
    ).toEqual({ kind: "sigv4", profile: "dev" });
    expect(
      authFrom(
        { ...flags, region: "eu-west-1" },
        "https://abc.execute-api.eu-west-1.amazonaws.com",
        { ...io, env: {} },
      ),
    ).toEqual({ kind: "sigv4", region: "eu-west-1" });
  });

  it("--help works on every command and exits 0", async () => {
    const commands: string[][] = [];
    const walk = (command: Command, path: string[]) => {
      commands.push(path);
      for (const sub of command.commands) walk(sub, [...path, sub.name()]);
    };
    walk(cliProgram({ stdout: () => undefined, stderr: () => undefined, env: {} }), []);
    expect(commands.length).toBeGreaterThanOrEqual(1 + 5 + 9 + 3 + 2 + 1 + 2);
    for (const path of commands) {
      const outcome = await cli([...path, "--help"]);
      expect(outcome.code, path.join(" ")).toBe(EXIT.ok);
      expect(outcome.out).toContain(`Usage: scheduler${path.map((p) => ` ${p}`).join("")}`);
    }
  });

  it("bin/scheduler.mjs and `npx scheduler` run the CLI as a process", async () => {
    const run = (command: string, args: string[]) =>
      // Offline: npx must find the bin in this package, never look a package up.
      spawnCaptured(command, args, {
        cwd: REPO,
        env: { ...process.env, npm_config_offline: "true" },
      });
    // Each process spends a second or more of CPU starting tsx (npx about three): side by side.
    const job = await json<Job>("jobs", "create", "--type", "noop", "--run-at", tomorrow());
    const [listed, deleted, watchExit, viaNpx] = await Promise.all([
      run(process.execPath, [
        "bin/scheduler.mjs",
        "--api",
        sandbox.url,
        "-o",
        "json",
        "jobs",
        "list",
        "--limit",
        "2",
      ]),
      run(process.execPath, [
        "bin/scheduler.mjs",
        "--api",
        sandbox.url,
        "jobs",
        "delete",
        "01J0000000000000000000000X",
      ]),
      // runs watch follows until Ctrl-C, then exits 0.
      (async () => {
        const watch = spawn(
          process.execPath,
          ["bin/scheduler.mjs", "--api", sandbox.url, "runs", "watch", job.id],
          {
            cwd: REPO,
            stdio: ["ignore", "pipe", "pipe"],
          },
        );
        const exit = new Promise<number | null>((done) => watch.once("exit", done));
        await new Promise<void>((done) => watch.stdout.once("data", () => done()));
        watch.kill("SIGINT");
        return exit;
      })(),
      run("npx", ["scheduler", "--api", sandbox.url, "webhook-secret", "get"]),
    ]);
    expect(listed.code, listed.err).toBe(EXIT.ok);
    expect(JSON.parse(listed.out)).toHaveLength(2);
    expect(deleted.code).toBe(EXIT.notFound);
    expect(watchExit).toBe(EXIT.ok);
    expect(viaNpx.code, viaNpx.err).toBe(EXIT.ok);
    expect(viaNpx.out).toMatch(/^whsec_\S+\n$/);
  }, 60_000);
});
