import { describe, expect, it } from "vitest";
import { runSpike } from "../../bench/spike.js";
import { intFromEnv } from "../support/env-knobs.js";

/**
 * The spike benchmark inside `npm test`, at N = 200, asserting only that
 * nothing collapsed: every job succeeded and p99 start lag stayed under 5 s.
 * The issue's N = 1,000 and 10,000 are measured by `npm run bench:spike`
 * (README); at 1,000 this test took a minute of `npm test`, with nothing
 * beside it (the `alone` project).
 *
 * Two of the benchmark's defaults keep it about the scheduler rather than
 * this machine:
 * - The sandbox has a worker slot per job, as a Lambda fleet scaled out to
 *   the spike would have (workerConcurrency goes to 1,000 per priority). With
 *   64 slots each run held its slot for most of a second while the emulators
 *   queued requests: 1,000 took 14 s to drain, and p99 was 14 s.
 * - DynamoDB Local keeps its data on tmpfs (/dev/shm) where there is one: on
 *   this VM's disk its SQLite writes add about 3 s to the drain.
 * What is left is the emulators' pace: about 450 DynamoDB requests a second
 * on two cores shared with the sandbox, four a run.
 * SPIKE_TEST_JOBS sets N; SPIKE_P99_BOUND_MS the bound.
 */
const JOBS = intFromEnv("SPIKE_TEST_JOBS", 200);
const P99_BOUND_MS = intFromEnv("SPIKE_P99_BOUND_MS", 5_000);

describe("spike", () => {
  it(
    `${JOBS} one-off jobs due on the same second all succeed, p99 start lag under ${P99_BOUND_MS} ms`,
    async () => {
      const lines: string[] = [];
      const result = await runSpike({
        jobs: JOBS,
        resultsDir: null,
        // Creates run at 50-100/s here (200 took 3.7 s in CI): the jobs are due 6 s + 20 ms × N
        // after the first.
        baseLeadMs: 6_000,
        msPerCreate: 20,
        print: (l) => lines.push(l),
      });
      console.log(lines.filter((l) => l.startsWith("spike") || l.startsWith("created")).join("\n"));
      expect(result.notSucceeded).toBe(0);
      expect(result.lagMs.p99).toBeLessThan(P99_BOUND_MS);
    },
    60_000 + JOBS * 200,
  );
});
