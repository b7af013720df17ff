import { describe, expect, it } from "vitest";
import { DEFAULT_SETTINGS } from "../../shared/config.js";
import { decideStart } from "../../shared/execution/start-decision.js";
import type { Job, Run } from "../../shared/model.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { testJob } from "../support/engine-fixture.js";

const GRACE_MS = 60_000;
const OCCURRENCE = new Date("2026-03-01T12:00:00.000Z");
/** A lease and 2 s after the occurrence: when the worker loop's redelivery comes, past the grace. */
const REDELIVERED = new Date(OCCURRENCE.getTime() + 62_000);

function job(activeRuns: Record<string, string>): Job {
  return {
    ...testJob({
      schedule: { cron: "0 * * * *", timezone: "UTC" },
      policies: { ...testJob().policies, misfire: "skip" },
    }),
    jobId: "01JOB",
    status: "ACTIVE",
    version: 1,
    nextRunAt: null,
    nextDueKey: null,
    createdAt: OCCURRENCE.toISOString(),
    updatedAt: OCCURRENCE.toISOString(),
    activeRuns,
    activeRevision: 1,
    bufferedRunId: null,
    parkedRuns: {},
    lastRun: null,
    dependents: [],
  };
}

/** The occurrence's first attempt as its next start holds it: `fence` the start's. */
function started(fields: Partial<Run>): Run {
  const { run } = queuedRun(
    {
      jobId: "01JOB",
      tenantId: "tenant-a",
      scheduledFor: OCCURRENCE,
      dueAt: OCCURRENCE,
      attempt: 1,
      priority: "normal",
      jobVersion: 1,
    },
    OCCURRENCE,
    DEFAULT_SETTINGS,
  );
  return { ...run, status: "RUNNING", ...fields };
}

const lapsed = new Date(OCCURRENCE.getTime() + 60_000).toISOString();

describe("decideStart: a start past the grace under misfire skip", () => {
  it("runs a run its job lists in activeRuns, its first start held unwritten (this start's fence 1)", () => {
    const run = started({ fence: 1 });
    const decided = decideStart(job({ [run.runId]: lapsed }), run, REDELIVERED, GRACE_MS);
    expect(decided.action).toBe("run");
  });

  it("skips as late a run never admitted (not listed), as before", () => {
    const run = started({ fence: 1 });
    const decided = decideStart(job({}), run, REDELIVERED, GRACE_MS);
    expect(decided).toMatchObject({
      action: "end",
      ending: { status: "SKIPPED", reason: expect.stringMatching(/^misfire: .*policy skip$/) },
    });
  });

  it("skips as late a listed run parked since (the park resets it, as it does a written start)", () => {
    const run = started({ fence: 2, parkedFence: 1 });
    const decided = decideStart(job({ [run.runId]: lapsed }), run, REDELIVERED, GRACE_MS);
    expect(decided).toMatchObject({ action: "end", ending: { status: "SKIPPED" } });
  });
});

describe("decideStart: a run a trigger or an upstream queued, on an instant the schedule has", () => {
  // Queued off the schedule (a trigger or a fan-out takes the instant it is made at), the job
  // edited since to a schedule that has that instant: its start past the grace is no misfire.
  const upstream = { jobId: "01UPSTREAM", runId: "01UPSTREAM@x#0001", scheduledFor: "x" };
  it.each([
    ["a trigger's (triggered)", { triggered: true }],
    ["an upstream's (trigger)", { trigger: upstream }],
  ] as const)("runs %s first attempt however late, under skip and fire_once", (_, fields) => {
    const run = started({ fence: 1, jobVersion: 0, ...fields });
    for (const misfire of ["skip", "fire_once"] as const) {
      const edited = { ...job({}), policies: { ...job({}).policies, misfire } };
      const decided = decideStart(
        edited,
        run,
        new Date(OCCURRENCE.getTime() + 3 * 3_600_000),
        GRACE_MS,
      );
      expect(decided.action, misfire).toBe("run");
    }
  });
});

describe("decideStart: a run asked to cancel while an earlier worker held it", () => {
  it("ends it cancelled as asked, counted as run (crashedRunning) whatever the job says; a skip or a park is not", () => {
    const run = started({
      fence: 2,
      cancelRequestedAt: lapsed,
      cancelledBy: "pause",
    });
    for (const status of ["ACTIVE", "PAUSED", "CANCELLED"] as const) {
      const decided = decideStart({ ...job({}), status }, run, REDELIVERED, GRACE_MS);
      expect(decided, status).toEqual({
        action: "end",
        ending: {
          status: "CANCELLED",
          reason: "job paused with running: cancel",
          honoursCancel: true,
          ran: true,
          crashedRunning: true,
          completesJob: false,
        },
      });
    }
    const late = decideStart(job({}), started({ fence: 1 }), REDELIVERED, GRACE_MS);
    expect(late).toMatchObject({ action: "end", ending: { status: "SKIPPED" } });
    expect(late.action === "end" && late.ending.ran === true).toBe(false);
  });
});

describe("decideStart: a completed job its delete has marked", () => {
  it("ends the run cancelled as of a job gone, unrun, where the same job unmarked runs it", () => {
    const completed: Job = { ...job({}), status: "COMPLETED" };
    const retry = started({ fence: 1, attempt: 2, scheduledFor: OCCURRENCE.toISOString() });
    expect(decideStart(completed, retry, REDELIVERED, GRACE_MS).action).toBe("run");
    const marked = { ...completed, deleteRequestedAt: REDELIVERED.toISOString() };
    expect(decideStart(marked, retry, REDELIVERED, GRACE_MS)).toEqual({
      action: "end",
      ending: { status: "CANCELLED", reason: "job no longer exists" },
    });
  });
});
