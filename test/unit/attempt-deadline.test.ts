import { describe, expect, it } from "vitest";
import { attemptDeadline } from "../../shared/execution/async-delivery.js";

const firstStart = "2026-03-01T12:00:00.000Z";
const timesOutAt = "2026-03-01T12:10:00.000Z";
const now = new Date("2026-03-01T12:01:05.000Z");
/** A run an older version handed over 0.4 s after its first start, with a 600 s timeout. */
const handedOverByThatVersion = {
  startedAt: firstStart,
  handedOverAt: "2026-03-01T12:00:00.400Z",
  timesOutAt,
};

describe("attemptDeadline", () => {
  it("is the job's timeout after the start for a first delivery", () => {
    expect(
      attemptDeadline({ startedAt: firstStart, handedOverAt: null, timesOutAt: null }, 60, now),
    ).toEqual({ at: new Date("2026-03-01T12:01:00.000Z"), seconds: 60 });
  });

  it("keeps the recorded timesOutAt and the timeout beside it, whatever the job's now", () => {
    const run = { ...handedOverByThatVersion, handedOverTimeoutSeconds: 600 };
    expect(attemptDeadline(run, 60, now)).toEqual({ at: new Date(timesOutAt), seconds: 600 });
  });

  it("derives the timeout of a run handed over before it was recorded from the start that set timesOutAt", () => {
    // That start still holds the run (a call of its target): exact.
    expect(attemptDeadline(handedOverByThatVersion, 60, now).seconds).toBe(600);
    // A later start replaced startedAt: the hand-over's instant stands in, rounded up.
    const restarted = { ...handedOverByThatVersion, startedAt: now.toISOString() };
    expect(attemptDeadline(restarted, 60, now)).toEqual({ at: new Date(timesOutAt), seconds: 600 });
  });
});
