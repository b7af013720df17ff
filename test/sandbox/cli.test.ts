import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

/** The java processes that belong to this data directory's DynamoDB Local. */
function javaFor(dataDir: string): string[] {
  try {
    return execFileSync("pgrep", ["-f", `dbPath ${dataDir}`], { encoding: "utf8" })
      .trim()
      .split("\n")
      .filter(Boolean);
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

describe("npm start", () => {
  let child: ChildProcess | null = null;
  let dataDir = "";
  afterAll(async () => {
    child?.kill("SIGKILL");
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("serves /health within 60 s, and Ctrl-C stops it within a few seconds leaving nothing running", async () => {
    dataDir = await mkdtemp(join(tmpdir(), "scheduler-cli-"));
    const started = Date.now();
    const proc = spawn(
      process.execPath,
      ["--import", "tsx", "infra/sandbox/main.ts", "--port", "0", "--data-dir", dataDir],
      {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, SCHEDULER_API_KEYS: "" },
      },
    );
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
    proc.kill("SIGINT");
    expect(await exited).toBe(0);
    expect(Date.now() - stopAsked).toBeLessThan(10_000);
    child = null;
    expect(javaFor(dataDir)).toEqual([]);
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  }, 90_000);
});
