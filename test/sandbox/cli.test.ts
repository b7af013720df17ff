import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer as createHttpServer } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const REPO = resolve(import.meta.dirname, "../..");

/** The ids of the processes whose command line contains `pattern`. */
function pids(pattern: string): number[] {
  try {
    return execFileSync("pgrep", ["-f", "--", pattern], { encoding: "utf8" })
      .trim()
      .split("\n")
      .filter(Boolean)
      .map(Number);
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

/** The java processes that belong to this data directory's DynamoDB Local. */
const javaFor = (dataDir: string) => pids(`dbPath ${dataDir}`);

const parentOf = (pid: number) =>
  Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[1]);

/** `npm start`'s own command line from package.json, so the test runs what a user runs. */
function startCommand(): string[] {
  const manifest = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as {
    scripts: { start: string };
  };
  const [program, ...args] = manifest.scripts.start.split(" ");
  if (program === "node") return [process.execPath, ...args];
  return [join(REPO, "node_modules/.bin", program ?? ""), ...args];
}

/**
 * `npm start` with `args` and `env` added, expected to refuse at once: its exit code and output.
 * One that starts instead would outlive the test, so it is stopped after 30 s (and the caller's
 * expectation of a refusal fails).
 */
async function startRefused(
  args: readonly string[],
  env: Record<string, string>,
): Promise<{ code: number | null; output: string }> {
  const [program = "", ...startArgs] = startCommand();
  const proc = spawn(program, [...startArgs, ...args], {
    cwd: REPO,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  let output = "";
  proc.stdout?.on("data", (chunk) => (output += chunk));
  proc.stderr?.on("data", (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => proc.once("exit", resolve));
  const startedAnyway = setTimeout(() => proc.kill("SIGINT"), 30_000);
  const code = await exited;
  clearTimeout(startedAnyway);
  return { code, output: output.trim() };
}

/**
 * Runs `refusals` against a new data directory (named after `name`), then checks that no DynamoDB
 * Local started for it, and removes it.
 */
async function refusedIn(
  name: string,
  refusals: (refusedDir: string) => Promise<void>,
): Promise<void> {
  const refusedDir = await mkdtemp(join(tmpdir(), `scheduler-cli-${name}-`));
  try {
    await refusals(refusedDir);
    expect(javaFor(refusedDir)).toEqual([]);
  } finally {
    await rm(refusedDir, { recursive: true, force: true });
  }
}

/** `npm start` launched in a process group of its own, as a shell's foreground job. */
interface LaunchedInOwnGroup {
  readonly dataDir: string;
  readonly group: number;
  /** Its URL once it says it is ready (rejected if it is not within 60 s or exits first). */
  readonly ready: Promise<string>;
  readonly exited: Promise<number | null>;
  /** Everything it printed so far, stdout and stderr. */
  output(): string;
  /** Kills what is left of the group and removes its data directory. */
  remove(): Promise<void>;
}

async function launchInOwnGroup(dataDir: string): Promise<LaunchedInOwnGroup> {
  const [program = "", ...args] = startCommand();
  // Its own process group, as a shell's foreground job: a terminal's Ctrl-C signals every process in it.
  const proc = spawn(program, [...args, "--port", "0", "--data-dir", dataDir], {
    cwd: REPO,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, SCHEDULER_API_KEYS: "" },
    detached: true,
  });
  const group = proc.pid ?? 0;
  let output = "";
  proc.stdout?.on("data", (chunk) => (output += chunk));
  proc.stderr?.on("data", (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => proc.once("exit", resolve));
  const ready = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready in 60 s:\n${output}`)), 60_000);
    proc.stdout?.on("data", () => {
      const match = /ready at (http:\/\/\S+)/.exec(output);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    proc.once("exit", (code) => reject(new Error(`exited with ${code}:\n${output}`)));
  });
  // Awaited by the case that uses it, which fails with its error.
  ready.catch(() => undefined);
  return {
    dataDir,
    group,
    ready,
    exited,
    output: () => output,
    remove: async () => {
      try {
        process.kill(-group, "SIGKILL");
      } catch {
        // The group is gone: the sandbox stopped.
      }
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

describe("npm start", () => {
  let child: ChildProcess | null = null;
  let dataDir = "";
  afterAll(async () => {
    child?.kill("SIGKILL");
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("serves /health within 60 s, and Ctrl-C stops it within a few seconds leaving nothing running, also while it is too busy to answer at once", async () => {
    dataDir = await mkdtemp(join(tmpdir(), "scheduler-cli-"));
    const started = Date.now();
    const [program = "", ...args] = startCommand();
    const proc = spawn(program, [...args, "--port", "0", "--data-dir", dataDir], {
      cwd: REPO,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, SCHEDULER_API_KEYS: "" },
    });
    child = proc;
    let output = "";
    proc.stdout?.on("data", (chunk) => (output += chunk));
    proc.stderr?.on("data", (chunk) => (output += chunk));
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`not ready in 60 s:\n${output}`)), 60_000);
      proc.stdout?.on("data", () => {
        const match = /ready at (http:\/\/\S+)/.exec(output);
        if (match?.[1]) {
          clearTimeout(timer);
          resolve(match[1]);
        }
      });
      proc.once("exit", (code) => reject(new Error(`exited with ${code}:\n${output}`)));
    });
    expect(Date.now() - started).toBeLessThan(60_000);
    const health = await fetch(`${url}/health`);
    expect(health.status).toBe(200);
    expect(output).toContain('"Authorization: Bearer local-dev-key" for tenant "default"');
    expect(output).toContain(`data:     ${dataDir}`);
    expect(javaFor(dataDir)).toHaveLength(1);

    const stopAsked = Date.now();
    const exited = new Promise<number | null>((resolve) =>
      proc.once("exit", (code) => resolve(code)),
    );
    // A loaded machine (CI on two cores) can leave the sandbox's event loop without a turn for a
    // while after Ctrl-C. Whatever serves the sandbox is held still for that while: a launcher that
    // relays the signal and gives up after a few milliseconds (tsx's CLI kills its child and
    // exits 130, leaving DynamoDB Local running) fails here.
    const serving = pids(`--data-dir ${dataDir}`).filter(
      (pid, _, all) => !all.some((other) => parentOf(other) === pid),
    );
    expect(serving).toHaveLength(1);
    for (const pid of serving) process.kill(pid, "SIGSTOP");
    proc.kill("SIGINT");
    await new Promise((done) => setTimeout(done, 500));
    for (const pid of serving) {
      try {
        process.kill(pid, "SIGCONT");
      } catch {
        // Already gone: killed by its launcher, which the exit code below shows.
      }
    }
    expect(await exited).toBe(0);
    expect(Date.now() - stopAsked).toBeLessThan(10_000);
    child = null;
    expect(javaFor(dataDir)).toEqual([]);
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  }, 90_000);

  /**
   * The Ctrl-C case's sandbox is launched as the first case's has stopped, and its DynamoDB Local
   * starts while the refusals run (none of which starts one): the wait for it to be ready was
   * the last case's alone.
   */
  describe("while the Ctrl-C case's sandbox starts", () => {
    let grace: LaunchedInOwnGroup | null = null;
    beforeAll(async () => {
      grace = await launchInOwnGroup(await mkdtemp(join(tmpdir(), "scheduler-cli-grace-")));
    });
    afterAll(async () => {
      if (grace) await grace.remove();
    });

    it("refuses an ADMIN_TENANTS entry that is no tenant id at once (exit 2, naming it), before any emulator starts", async () => {
      await refusedIn("admin", async (refusedDir) => {
        const refused = await startRefused(["--port", "0", "--data-dir", refusedDir], {
          ADMIN_TENANTS: "ops, ops team",
        });
        expect(refused).toEqual({
          code: 2,
          output:
            'ADMIN_TENANTS: "ops team" is not a tenant id (1 to 256 letters, digits and ._:/@+=|-, not . or ..)',
        });
      });
    }, 60_000);

    it("refuses a misspelt option, an option without its value and a stray argument at once (exit 2, naming it and --help), with no stack trace", async () => {
      await refusedIn("usage", async (refusedDir) => {
        const cases = [
          { args: ["--tick-second", "5"], names: "'--tick-second'" },
          { args: ["--port"], names: "'--port <value>'" },
          { args: ["3001"], names: "'3001'" },
        ];
        for (const { args, names } of cases) {
          const { code, output } = await startRefused(["--data-dir", refusedDir, ...args], {});
          expect(code, output).toBe(2);
          expect(output, args.join(" ")).toContain(names);
          expect(output, args.join(" ")).toContain("npm start -- --help");
          expect(output, args.join(" ")).not.toMatch(/\n\s+at |node:internal/);
        }
      });
    }, 60_000);

    it("refuses a MIN_INTERVAL_MS below one second at once (exit 2, naming it), before any emulator starts", async () => {
      await refusedIn("interval", async (refusedDir) => {
        const { code, output } = await startRefused(["--port", "0", "--data-dir", refusedDir], {
          MIN_INTERVAL_MS: "100",
        });
        expect(code, output).toBe(2);
        expect(output).toMatch(
          /^MIN_INTERVAL_MS must be an integer from 1000 to 86400000, got "100": .*per-second/,
        );
      });
    }, 60_000);

    // Read with Number(), `--port 0xBB8` served on 3000, `--workers 1e1` ran 10 workers and
    // LOW_PRIORITY_SHARE=0x0 kept low-priority runs no share, each unsaid.
    it("refuses a number not written in decimal digits at once (exit 2, naming it), before any emulator starts", async () => {
      await refusedIn("digits", async (refusedDir) => {
        const cases: { args: string[]; env: Record<string, string>; names: string }[] = [
          {
            args: ["--port", "0xBB8"],
            env: {},
            names: '--port must be a whole number written in decimal digits, got "0xBB8"',
          },
          {
            args: ["--workers", "1e1"],
            env: {},
            names: '--workers must be a whole number above 0 written in decimal digits, got "1e1"',
          },
          {
            args: [],
            env: { LOW_PRIORITY_SHARE: "0x0" },
            names:
              'LOW_PRIORITY_SHARE must be a number from 0 to 0.5 written in decimal digits, such as 0.25, got "0x0"',
          },
          {
            args: [],
            env: { WEBHOOK_SECRET_CACHE_SECONDS: "1e1" },
            names:
              'WEBHOOK_SECRET_CACHE_SECONDS must be a whole number from 0 to 3600 written in decimal digits, got "1e1"',
          },
        ];
        for (const { args, env, names } of cases) {
          const { code, output } = await startRefused(
            ["--port", "0", "--data-dir", refusedDir, ...args],
            env,
          );
          expect(code, output).toBe(2);
          expect(output).toBe(names);
        }
      });
    }, 180_000);

    it("refuses a port already in use at once (exit 1, naming the port and --port), before any emulator starts", async () => {
      // Another program, or a sandbox started earlier in another terminal, holds the port.
      const holder = createServer();
      const port = await new Promise<number>((resolve, reject) => {
        holder.once("error", reject);
        holder.listen(0, "127.0.0.1", () => {
          const address = holder.address();
          if (address !== null && typeof address === "object") resolve(address.port);
          else reject(new Error(`no port: ${String(address)}`));
        });
      });
      try {
        await refusedIn("port", async (refusedDir) => {
          const refused = await startRefused(["--port", String(port), "--data-dir", refusedDir], {
            SCHEDULER_API_KEYS: "",
          });
          expect(refused).toEqual({
            code: 1,
            output: `port ${port} on 127.0.0.1 is in use (a sandbox already running?): stop what holds it, or give another with --port N or PORT`,
          });
          expect(existsSync(join(refusedDir, "dynamodb"))).toBe(false); // no emulator started
        });
      } finally {
        await new Promise((done) => holder.close(done));
      }
    }, 60_000);

    it("Ctrl-C at a terminal (SIGINT to the whole process group) lets a run in progress end within the grace and records it", async () => {
      if (!grace) throw new Error("the sandbox was not launched");
      const { group, exited, ready } = grace;
      // The job's target: its delivery is the run in progress, answered a second after Ctrl-C.
      let delivered: () => void = () => undefined;
      const delivery = new Promise<void>((resolve) => (delivered = resolve));
      const target = createHttpServer((req, res) => {
        req.resume();
        delivered();
        setTimeout(() => res.writeHead(200).end("ok"), 1000);
      });
      const targetPort = await new Promise<number>((resolve, reject) => {
        target.once("error", reject);
        target.listen(0, "127.0.0.1", () => {
          const address = target.address();
          if (address !== null && typeof address === "object") resolve(address.port);
          else reject(new Error(`no port: ${String(address)}`));
        });
      });
      try {
        const url = await ready;
        const created = await fetch(`${url}/jobs`, {
          method: "POST",
          headers: { authorization: "Bearer local-dev-key", "content-type": "application/json" },
          body: JSON.stringify({
            type: "http",
            schedule: { runAt: new Date().toISOString() },
            target: { url: `http://127.0.0.1:${targetPort}/hook` },
          }),
        });
        expect(created.status).toBe(201);
        const { id } = (await created.json()) as { id: string };
        await delivery;
        process.kill(-group, "SIGINT");
        expect(await exited, grace.output()).toBe(0);
        expect(grace.output()).toContain(`run SUCCEEDED job ${id}`);
        expect(grace.output()).not.toMatch(/ERROR|ECONNREFUSED/);
        expect(javaFor(grace.dataDir)).toEqual([]);
      } finally {
        await new Promise((done) => target.close(done));
      }
    }, 90_000);
  });
});
