import { describe, expect, it } from "vitest";
import { LOOK_BACK_MS, runPolls, runsDownTo, unsureUpTo } from "../../client/run-follow.js";
import type { Run, RunStatus } from "../../client/types.js";

/**
 * Where each poll of `runPolls` reads from: after the first (every run), the earliest of a look-back
 * before the previous poll, the oldest run not ended then, and the newest occurrence seen.
 */
const NOW = Date.parse("2030-06-01T12:00:00Z");
const at = (minutes: number) => new Date(NOW + minutes * 60_000).toISOString();
const run = (minutes: number, status: RunStatus) =>
  ({ runId: `r${minutes}`, jobId: "j", scheduledFor: at(minutes), status }) as Run;

/** Polls over scripted reads (newest first); the `from` each read was asked for. */
function pollsOver(...reads: Run[][]) {
  const asked: (string | undefined)[] = [];
  const poll = runPolls(
    async (from) => {
      asked.push(from?.toISOString());
      return reads.shift() ?? [];
    },
    () => NOW,
  );
  return { poll, asked };
}

describe("runPolls", () => {
  it("reads every run first, then from the look-back before the previous poll", async () => {
    // A run queued ahead, ended runs before it: from the look-back, whatever lies before.
    const { poll, asked } = pollsOver(
      [run(1, "queued"), run(-600, "succeeded"), run(-1200, "dead")],
      [run(1, "queued")],
    );
    await poll();
    await poll();
    await poll();
    const lookBack = new Date(NOW - LOOK_BACK_MS).toISOString();
    expect(asked).toEqual([undefined, lookBack, lookBack]);
  });

  it("reads from the oldest run not ended, however old", async () => {
    const { poll, asked } = pollsOver(
      [run(10, "queued"), run(1, "running"), run(-5000, "queued"), run(-6000, "succeeded")],
      [run(10, "queued"), run(1, "succeeded"), run(-5000, "running")],
      [run(10, "queued"), run(1, "succeeded"), run(-5000, "failed"), run(-5000, "queued")],
    );
    await poll();
    await poll();
    await poll();
    await poll();
    // The old run, then its retry (at its occurrence) hold the start back; the future queued run
    // and the newest occurrence lie after the look-back.
    expect(asked.slice(1)).toEqual([at(-5000), at(-5000), at(-5000)]);
  });

  it("a job with no run reads every run each poll; one whose newest run is old reads from it", async () => {
    const empty = pollsOver([], []);
    await empty.poll();
    await empty.poll();
    await empty.poll();
    expect(empty.asked).toEqual([undefined, undefined, undefined]);

    // A paused job's last run, days ago: its resume's late occurrence comes after it.
    const paused = pollsOver([run(-4000, "succeeded"), run(-5440, "succeeded")]);
    await paused.poll();
    await paused.poll();
    expect(paused.asked).toEqual([undefined, at(-4000)]);
  });
});

describe("runsDownTo", () => {
  /** A listing of runs a minute apart from minute 0 back, pages of 3; the pages it was asked for. */
  function listing(count: number) {
    const pages: number[] = [];
    async function* runs() {
      for (let i = 0; i < count; i += 1) {
        if (i % 3 === 0) pages.push(i / 3);
        yield run(-i, "succeeded");
      }
    }
    return { runs: runs(), pages };
  }

  it("reads the newest page, however old its runs", async () => {
    const { runs, pages } = listing(10);
    const read = await runsDownTo(runs, NOW + 60_000, 3);
    expect(read.map((r) => r.runId)).toEqual(["r0", "r-1", "r-2"]);
    expect(pages).toEqual([0]);
  });

  it("reads every page down to the one that reaches the floor, and that page whole", async () => {
    const { runs, pages } = listing(10);
    const read = await runsDownTo(runs, NOW - 4 * 60_000, 3);
    expect(read).toHaveLength(6);
    expect(pages).toEqual([0, 1]);
  });
});

describe("unsureUpTo", () => {
  it("is the oldest occurrence of a first read of a page or more, in any order; none of a shorter one", () => {
    const read = [run(0, "queued"), run(-1, "succeeded"), run(-2, "failed")];
    expect(unsureUpTo(read, 3)).toBe(Date.parse(at(-2)));
    expect(unsureUpTo(read.toReversed(), 3)).toBe(Date.parse(at(-2)));
    expect(unsureUpTo(read, 4)).toBe(Number.NEGATIVE_INFINITY);
  });
});
