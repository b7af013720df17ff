import { describe, expect, it } from "vitest";
import { DEFAULT_SETTINGS } from "../../shared/config.js";
import { decideStart } from "../../shared/execution/start-decision.js";
import type { Job, Run } from "../../shared/model.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { testJob } from "../support/engine-fixture.js";

const GRACE_MS = 60_000;
const MINUTE = 60_000;
/** The old schedule's occurrence the run was queued for, version 1. */
const OLD = new Date("2026-03-01T12:00:00.000Z");
/** Ten minutes on: the workers were down, the run is past the grace. */
const LATE = new Date(OLD.getTime() + 10 * MINUTE);

/** The job at version 2, an edit since the run was queued having given it `schedule`. */
function edited(schedule: ScheduleSpec, misfire: MisfirePolicy): Job {
  return {
    ...testJob({
      schedule,
      policies: { ...testJob().policies, misfire, inFlight: "complete" },
    }),
    jobId: "01JOB",
    status: "ACTIVE",
    version: 2,
    nextRunAt: null,
    nextDueKey: null,
    createdAt: OLD.toISOString(),
    updatedAt: OLD.toISOString(),
    activeRuns: {},
    activeRevision: 1,
    bufferedRunId: null,
    parkedRuns: {},
    lastRun: null,
    dependents: [],
  };
}

function startedRun(fields: Partial<Run>): Run {
  const { run } = queuedRun(
    {
      jobId: "01JOB",
      tenantId: "tenant-a",
      scheduledFor: OLD,
      dueAt: OLD,
      attempt: 1,
      priority: "normal",
      jobVersion: 1,
    },
    OLD,
    DEFAULT_SETTINGS,
  );
  return { ...run, status: "RUNNING", fence: 1, ...fields };
}

/**
 * f0ab123 records a late first attempt of a schedule an edit replaced (kept by `inFlight:
 * "complete"`) SKIPPED under misfire skip. What it must not reach: a one-off's job completed by
 * the skip of its old runAt's run (its new runAt would never run), and a run that waited on its
 * overlap policy (started before: recovery, not a misfire).
 */
describe("decideStart: a late first attempt of a replaced schedule under misfire skip", () => {
  it("a one-off whose runAt an edit moved: its old run is skipped as late, the job not completed", () => {
    const job = edited({ runAt: new Date(OLD.getTime() + 30 * MINUTE).toISOString() }, "skip");
    const decided = decideStart(job, startedRun({}), LATE, GRACE_MS);
    expect(decided).toEqual({
      action: "end",
      ending: {
        status: "SKIPPED",
        reason: "misfire: started 600 s late, past the 60 s grace; policy skip",
        completesJob: false,
      },
    });
  });

  it("a one-off made recurring: its old run is skipped as late, the job not completed", () => {
    const job = edited({ every: "PT1H", startAt: LATE.toISOString() }, "skip");
    const decided = decideStart(job, startedRun({}), LATE, GRACE_MS);
    expect(decided.action === "end" && decided.ending.completesJob).toBe(false);
  });

  it("a run held back by its overlap policy (buffered, this start's fence 2) runs", () => {
    const job = edited({ every: "PT1H", startAt: LATE.toISOString() }, "skip");
    expect(decideStart(job, startedRun({ fence: 2 }), LATE, GRACE_MS).action).toBe("run");
  });

  it("a run the reaper re-sent after a lost message runs within the grace from that re-send", () => {
    const job = edited({ every: "PT1H", startAt: LATE.toISOString() }, "skip");
    const resent = new Date(LATE.getTime() - 30_000).toISOString();
    expect(decideStart(job, startedRun({ misfireFrom: resent }), LATE, GRACE_MS).action).toBe(
      "run",
    );
  });
});
