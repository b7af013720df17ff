import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import type { runEmulators } from "../support/sandbox-process.js";

/**
 * The benches (`npm run bench:spike`, `bench:fairness`, `bench`) spawn their sandbox with the tests'
 * `spawnSandbox`, outside vitest: there no project provides emulators, and vitest's inject() throws
 * ("Vitest failed to access its internal state"), so the sandbox must start its own, as `npm start`
 * does. Run here in a process of its own, with none of vitest's environment.
 */
const REPO = resolve(import.meta.dirname, "../..");

function outsideVitest(script: string) {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith("VITEST")),
  );
  return new Promise<{ code: number | string | null; out: string; err: string }>((done) => {
    execFile(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "--eval", script],
      { cwd: REPO, timeout: 60_000, env },
      (error, out, err) => done({ code: error === null ? 0 : (error.code ?? null), out, err }),
    );
  });
}

describe("spawnSandbox outside vitest (the benches)", () => {
  it("takes no emulators of a test run, so the sandbox starts its own", async () => {
    const run = await outsideVitest(
      `const { runEmulators } = await import(${JSON.stringify(resolve(REPO, "test/support/sandbox-process.ts"))});
       console.log(JSON.stringify(runEmulators()));`,
    );
    expect(run.err).not.toContain("Vitest failed to access its internal state");
    expect(run.code).toBe(0);
    const endpoints: ReturnType<typeof runEmulators> = JSON.parse(run.out);
    expect(endpoints).toEqual({});
  }, 60_000);
});
