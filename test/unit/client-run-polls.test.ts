import { describe, expect, it } from "vitest";
import { LOOK_BACK_MS, runPolls } from "../../client/run-follow.js";
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
