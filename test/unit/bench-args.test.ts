import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { type BenchArgsIo, benchArgs } from "../../bench/args.js";

/**
 * The benches' command lines as README.md and docs/ give them (`npm run bench:spike -- --jobs N`,
 * `npm run bench -- --spike-jobs 500`), typed by someone new: `--help` lists the options, and a
 * mistake exits 2 naming it at once, before the bench starts a sandbox or emulators (each would
 * take minutes, or run the default 10,000-job spike).
 */
const REPO = resolve(import.meta.dirname, "../..");
/**
 * A bench's process loads the engine and the AWS SDK through tsx before it reads its arguments:
 * 2–6 s alone here, and under a load of 13 on two cores five at once outlasted vitest's 30 s for
 * a case. The process is given less time than its case, so that a slow one fails as a timeout of
 * the process, which says so, not of the case.
 */
const SPAWN_TIMEOUT_MS = 100_000;
const SPAWNING_CASE_TIMEOUT_MS = 120_000;

function bench(script: string, args: readonly string[]) {
  return new Promise<{ code: number | string | null; out: string; err: string }>((done) => {
    execFile(
      process.execPath,
      ["--import", "tsx", `bench/${script}`, ...args],
      { cwd: REPO, timeout: SPAWN_TIMEOUT_MS, env: { ...process.env, SCHEDULER_API_URL: "" } },
      (error, out, err) => done({ code: error === null ? 0 : (error.code ?? null), out, err }),
    );
  });
}

/** A process's exit, thrown so that benchArgs stops where the process would. */
class Exited extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

/** benchArgs on `args`, with spike.ts's options: what it printed and its exit code. */
function spikeArgs(args: readonly string[]) {
  const printed: string[] = [];
  const failed: string[] = [];
  const io: BenchArgsIo = {
    args,
    print: (text) => printed.push(text),
    fail: (text) => failed.push(text),
    exit: (code) => {
      throw new Exited(code);
    },
  };
  try {
    const values = benchArgs(
      "file:///repo/bench/spike.ts",
      {
        jobs: { type: "string", default: "10000" },
        workers: { type: "string" },
        concurrency: { type: "string", default: "16,64", list: true },
        "skip-spike": { type: "boolean", default: false },
      },
      io,
    );
    return { code: null, values, printed, failed: failed.join("\n") };
  } catch (error) {
    if (!(error instanceof Exited)) throw error;
    return { code: error.code, values: null, printed, failed: failed.join("\n") };
  }
}

describe("the benches' options", () => {
  it.concurrent.each([
    ["spike.ts", ["--jobs", "--concurrency", "--ms-per-create", "--data-parent"]],
    ["throughput.ts", ["--seconds", "--shards", "--concurrency", "--rate"]],
    ["fairness.ts", ["--a-jobs", "--b-jobs", "--workers", "--a-concurrent-runs"]],
    ["requests-per-run.ts", ["--runs", "--minutes"]],
    ["run.ts", ["--runs", "--spike-jobs", "--skip-spike", "--skip-throughput"]],
  ])(
    "%s --help lists its options and exits 0, starting nothing",
    async (script, options) => {
      const { code, out, err } = await bench(script, ["--help"]);
      expect(code, err).toBe(0);
      expect(out).toMatch(new RegExp(`^usage: tsx bench/${script.replace(".", "\\.")}`));
      for (const option of options) expect(out).toContain(option);
    },
    SPAWNING_CASE_TIMEOUT_MS,
  );

  it("takes numbers, lists of numbers and flags as given, and the defaults otherwise", () => {
    expect(spikeArgs(["--jobs", "500", "--concurrency", "8,32", "--skip-spike"])).toMatchObject({
      code: null,
      values: { jobs: "500", concurrency: "8,32", "skip-spike": true },
    });
    expect(spikeArgs([]).values).toEqual({
      jobs: "10000",
      concurrency: "16,64",
      "skip-spike": false,
    });
  });

  it.each([
    [["--jobs", "1,000"], '--jobs takes a number (default 10000), got "1,000"'],
    [["--jobs", "5oo"], '--jobs takes a number (default 10000), got "5oo"'],
    [["--jobs", ""], '--jobs takes a number (default 10000), got ""'],
    [
      ["--concurrency", "16;64"],
      '--concurrency takes comma-separated numbers (default 16,64), got "16;64"',
    ],
    [["--job", "500"], "Unknown option '--job'"],
    [["--jobs"], "Option '--jobs <value>' argument missing"],
    [["500"], "Unexpected argument '500'"],
  ])("%j exits 2 naming the mistake", (args, message) => {
    const { code, failed, printed } = spikeArgs(args);
    expect(code).toBe(2);
    expect(failed).toContain(message);
    expect(printed).toEqual([]);
  });

  it(
    "a mistake in the bench itself exits 2 with no stack trace, before it starts anything",
    async () => {
      const { code, out, err } = await bench("spike.ts", ["--jobs", "1,000"]);
      expect(code, err).toBe(2);
      expect(err.trim()).toBe('--jobs takes a number (default 10000), got "1,000"');
      expect(out).toBe("");
    },
    SPAWNING_CASE_TIMEOUT_MS,
  );
});
