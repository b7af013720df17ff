import { describe, expect, it } from "vitest";
import { DEFAULT_SETTINGS } from "../../shared/config.js";
import { decideOnPredecessor } from "../../shared/execution/retry-predecessor.js";
import type { Job, Run, RunStatus } from "../../shared/model.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { storedJob } from "../support/engine-fixture.js";

const NOW = new Date("2026-03-01T12:00:00.000Z");
const OCCURRENCE = new Date("2026-03-01T11:59:00.000Z");

const oneOff = (status: Job["status"] = "ACTIVE"): Job => ({
  ...storedJob("01JOB", OCCURRENCE, { schedule: { runAt: OCCURRENCE.toISOString() } }),
  status,
});

const recurring = (): Job => ({ ...oneOff(), schedule: { cron: "* * * * *", timezone: "UTC" } });

function attempt(n: number, fields: Partial<Run> = {}): Run {
  const { run } = queuedRun(
    {
      jobId: "01JOB",
      tenantId: "tenant-a",
      scheduledFor: OCCURRENCE,
      dueAt: OCCURRENCE,
      attempt: n,
      priority: "normal",
      jobVersion: 1,
    },
    OCCURRENCE,
    DEFAULT_SETTINGS,
  );
  return { ...run, ...fields };
}

const predecessor = (status: RunStatus, fields: Partial<Run> = {}) =>
  attempt(1, { status, fence: 1, ...fields });
const next = attempt(2, { retryOf: { runId: attempt(1).runId, fence: 1 }, fence: 1 });

describe("decideOnPredecessor: a failure's next attempt runs only once the attempt before says FAILED", () => {
  it("runs after FAILED, and after a predecessor whose TTL removed it (it ended a retention ago)", () => {
    expect(decideOnPredecessor(oneOff(), next, predecessor("FAILED"), NOW)).toEqual({
      action: "run",
    });
    expect(decideOnPredecessor(oneOff(), next, null, NOW)).toEqual({ action: "run" });
  });

  it("waits while the predecessor may still fail: at least 5 s, past its lease, longer at each start, at most 15 min", () => {
    const leaseUntil = new Date(NOW.getTime() + 40_000).toISOString();
    const running = predecessor("RUNNING", { leaseUntil });
    const waited = decideOnPredecessor(oneOff(), next, running, NOW);
    expect(waited).toEqual({
      action: "wait",
      reason: `waiting: ${running.runId} has not ended (RUNNING)`,
      recheckAt: new Date(NOW.getTime() + 41_000),
    });
    const queued = predecessor("QUEUED", { fence: 0, leaseUntil: null });
    expect(decideOnPredecessor(oneOff(), next, queued, NOW)).toMatchObject({
      recheckAt: new Date(NOW.getTime() + 5_000),
    });
    expect(decideOnPredecessor(oneOff(), { ...next, fence: 4 }, queued, NOW)).toMatchObject({
      recheckAt: new Date(NOW.getTime() + 40_000),
    });
    expect(decideOnPredecessor(oneOff(), { ...next, fence: 20 }, queued, NOW)).toMatchObject({
      recheckAt: new Date(NOW.getTime() + 900_000),
    });
  });

  it("is SKIPPED, naming the predecessor, when it ended otherwise; an ACTIVE one-off completes with it", () => {
    for (const status of ["SUCCEEDED", "DEAD", "SKIPPED", "CANCELLED"] as const) {
      const ended = predecessor(status, { cancelledBy: status === "CANCELLED" ? "api" : null });
      expect(decideOnPredecessor(oneOff(), next, ended, NOW)).toEqual({
        action: "end",
        ending: {
          status: "SKIPPED",
          reason: `${ended.runId} ended ${status}, not FAILED: this retry does not run`,
          completesJob: true,
        },
      });
    }
    const succeeded = predecessor("SUCCEEDED");
    expect(decideOnPredecessor(oneOff("COMPLETED"), next, succeeded, NOW)).toMatchObject({
      ending: { completesJob: false },
    });
    expect(decideOnPredecessor(recurring(), next, succeeded, NOW)).toMatchObject({
      ending: { status: "SKIPPED", completesJob: false },
    });
  });

  it("runs when the one-off's occurrence was filed again at its very attempt (it is that occurrence's run, judged late as one); skipped at another attempt or time", () => {
    const cancelled = predecessor("CANCELLED", { cancelledBy: "api" });
    const filedAt = (attemptNo: number, at = OCCURRENCE): Job => ({
      ...oneOff(),
      oneOffAttempt: { at: at.toISOString(), attempt: attemptNo },
    });
    expect(decideOnPredecessor(filedAt(2), next, cancelled, NOW)).toEqual({
      action: "run",
      filedAttempt: true,
    });
    expect(decideOnPredecessor(filedAt(3), next, cancelled, NOW)).toMatchObject({
      ending: { status: "SKIPPED", completesJob: false },
    });
    expect(decideOnPredecessor(filedAt(2, NOW), next, cancelled, NOW)).toMatchObject({
      ending: { status: "SKIPPED", completesJob: true },
    });
  });

  it("runs after a one-off's occurrence a pause cancelled (its resume gives it this attempt), not a recurring job's", () => {
    const byPause = predecessor("CANCELLED", { cancelledBy: "pause" });
    expect(decideOnPredecessor(oneOff(), next, byPause, NOW)).toEqual({ action: "run" });
    expect(decideOnPredecessor(recurring(), next, byPause, NOW)).toMatchObject({
      action: "end",
      ending: { status: "SKIPPED" },
    });
  });

  it("runs after a pause-cancelled retry or replay of a one-off's occurrence moved away since (made recurring too); not a rerun's, a triggered run's, a dependent's or a recurring job's", () => {
    const moved: Job = { ...oneOff(), schedule: { runAt: NOW.toISOString() } };
    const retryByPause = attempt(2, { status: "CANCELLED", cancelledBy: "pause", fence: 1 });
    const retryOf = { runId: retryByPause.runId, fence: 1, oneOff: true } as const;
    const third = attempt(3, { retryOf, fence: 1 });
    const skipped = { action: "end", ending: { status: "SKIPPED" } };
    expect(decideOnPredecessor(moved, third, retryByPause, NOW)).toEqual({ action: "run" });
    // Put for a recurring job's occurrence (made a one-off since), or by a version before the flag.
    const ofRecurring = { ...third, retryOf: { runId: retryByPause.runId, fence: 1 } };
    expect(decideOnPredecessor(moved, ofRecurring, retryByPause, NOW)).toMatchObject(skipped);
    expect(decideOnPredecessor(moved, third, { ...retryByPause, rerun: true }, NOW)).toMatchObject(
      skipped,
    );
    expect(decideOnPredecessor(moved, third, retryByPause, NOW, true)).toMatchObject(skipped);
    const trigger = { jobId: "01UP", runId: "01UP#r", scheduledFor: OCCURRENCE.toISOString() };
    expect(decideOnPredecessor(moved, { ...third, trigger }, retryByPause, NOW)).toMatchObject(
      skipped,
    );
    // A one-off made recurring since: moved away too, and the retry runs.
    expect(decideOnPredecessor(recurring(), third, retryByPause, NOW)).toEqual({ action: "run" });
    expect(decideOnPredecessor(recurring(), ofRecurring, retryByPause, NOW)).toMatchObject(skipped);
  });
  it("after a run a pause cancelled (fence 0, no failed start's): waits while it runs, then runs, whatever the schedule now", () => {
    const byPause = attempt(2, { status: "CANCELLED", cancelledBy: "pause", fence: 1 });
    const afterPause = attempt(3, { retryOf: { runId: byPause.runId, fence: 0, oneOff: true } });
    const running = { ...byPause, status: "RUNNING" as const, leaseUntil: NOW.toISOString() };
    expect(decideOnPredecessor(recurring(), afterPause, running, NOW)).toMatchObject({
      action: "wait",
    });
    expect(decideOnPredecessor(recurring(), afterPause, byPause, NOW)).toEqual({ action: "run" });
  });
  it("after a run a pause cancelled: looks again after the backoff, not past the lease its worker's next heartbeat ends it within", () => {
    const afterPause = attempt(2, { retryOf: { runId: attempt(1).runId, fence: 0 }, fence: 1 });
    const leaseUntil = new Date(NOW.getTime() + 40_000).toISOString();
    const held = predecessor("RUNNING", { cancelledBy: "pause", leaseUntil });
    expect(decideOnPredecessor(oneOff(), afterPause, held, NOW)).toMatchObject({
      recheckAt: new Date(NOW.getTime() + 5_000),
    });
    // Never past the lease, however many starts it waited; its worker gone, the backoff alone.
    expect(decideOnPredecessor(oneOff(), { ...afterPause, fence: 20 }, held, NOW)).toMatchObject({
      recheckAt: new Date(NOW.getTime() + 41_000),
    });
    const lapsed = { ...held, leaseUntil: new Date(NOW.getTime() - 1_000).toISOString() };
    expect(decideOnPredecessor(oneOff(), { ...afterPause, fence: 3 }, lapsed, NOW)).toMatchObject({
      recheckAt: new Date(NOW.getTime() + 20_000),
    });
  });
  it("after a run a cancel ended never started (fence 0): waits out the first write a start held unwritten owes, then runs", () => {
    const finishedAt = new Date(NOW.getTime() - 4_000).toISOString();
    const unstarted = predecessor("CANCELLED", { cancelledBy: "api", fence: 0, finishedAt });
    const afterCancel = attempt(2, { retryOf: { runId: unstarted.runId, fence: 0, oneOff: true } });
    // Within a heartbeat (at most 10 s) of the cancel, and a second for clocks that disagree.
    expect(decideOnPredecessor(oneOff(), afterCancel, unstarted, NOW)).toMatchObject({
      action: "wait",
      recheckAt: new Date(NOW.getTime() + 7_000),
    });
    const later = new Date(NOW.getTime() + 7_000);
    expect(decideOnPredecessor(oneOff(), afterCancel, unstarted, later)).toEqual({ action: "run" });
    // Started once (fence 1): its worker's cancelled ending was its last write.
    const started = { ...unstarted, fence: 1 };
    expect(decideOnPredecessor(oneOff(), afterCancel, started, NOW)).toEqual({ action: "run" });
  });
});
