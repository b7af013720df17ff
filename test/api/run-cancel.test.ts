import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema, RunSchema } from "../../shared/api/schemas/runs.js";
import { sleep } from "../../shared/clock.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { MAX_ATTEMPT } from "../../shared/keys.js";
import { copyRunToAttempt } from "../support/seed.js";
import { yearlyCronHalfAYearAway } from "../support/time-of-day.js";
import { waitFor } from "../support/wait.js";
import {
  type ApiHarness,
  deadRunVia,
  expectError,
  KEY_B,
  laterJob,
  runOnce,
  startApi,
} from "./support.js";

/** A yearly cron that never falls due while the file runs (time-of-day.ts). */
const YEARLY_CRON = yearlyCronHalfAYearAway();

/** POST /jobs/{id}/runs/{runId}/cancel, POST /jobs/{id}/cancel and pause's `running` over HTTP. */
let api: ApiHarness;
const LEASE_MS = 3_000;
const HEARTBEAT_MS = 300;

beforeAll(async () => {
  api = await startApi({ settings: { leaseMs: LEASE_MS } });
});
afterAll(() => api.close());

async function created(body: Record<string, unknown>): Promise<string> {
  const reply = await api.call("POST", "/jobs", { body });
  expect(reply.status, reply.text).toBe(201);
  return JobSchema.parse(reply.body).id;
}

async function runsOf(jobId: string) {
  const reply = await api.call("GET", `/jobs/${jobId}/runs`);
  expect(reply.status, reply.text).toBe(200);
  return RunPageSchema.parse(reply.body).items;
}

describe("POST /jobs/{id}/runs/{runId}/cancel", () => {
  it("a queued run: 200 with the run cancelled, when and by what; a repeat answers it again", async () => {
    const id = await created(laterJob({ schedule: { cron: YEARLY_CRON, timezone: "UTC" } }));
    const triggered = await api.call("POST", `/jobs/${id}/trigger`);
    const runId = RunSchema.parse(triggered.body).runId;

    const reply = await api.call("POST", `/jobs/${id}/runs/${runId}/cancel`);
    expect(reply.status, reply.text).toBe(200);
    const run = RunSchema.parse(reply.body);
    expect(run).toMatchObject({ runId, status: "cancelled", cancelledBy: "api" });
    expect(run.cancelRequestedAt).toBe(run.finishedAt);
    expect(RunSchema.parse((await api.call("GET", `/jobs/${id}/runs/${runId}`)).body)).toEqual(run);

    // A client's retry of a cancel that went through (its answer lost): the cancel's answer.
    const again = await api.call("POST", `/jobs/${id}/runs/${runId}/cancel`);
    expect(again.status, again.text).toBe(200);
    expect(RunSchema.parse(again.body)).toEqual(run);
  });

  it("a run its job's cancel ended: 200 with the run as that cancel left it", async () => {
    const id = await created(laterJob({ schedule: { cron: YEARLY_CRON, timezone: "UTC" } }));
    const runId = RunSchema.parse((await api.call("POST", `/jobs/${id}/trigger`)).body).runId;
    expect((await api.call("POST", `/jobs/${id}/cancel`)).status).toBe(200);
    const ended = RunSchema.parse((await api.call("GET", `/jobs/${id}/runs/${runId}`)).body);
    expect(ended).toMatchObject({ status: "cancelled", cancelledBy: "job-cancel" });

    const reply = await api.call("POST", `/jobs/${id}/runs/${runId}/cancel`);
    expect(reply.status, reply.text).toBe(200);
    expect(RunSchema.parse(reply.body)).toEqual(ended);
  });

  it("a run that ended succeeded or dead: the 409's currentStatus is the run's, in the documented Error shape", async () => {
    // expectError parses the body with the Error schema the OpenAPI document (and so the typed
    // client's ErrorBody) is generated from: a run's status must be one it allows.
    const { jobId } = await deadRunVia(api);
    const [dead] = await runsOf(jobId);
    expect(dead?.status).toBe("dead");
    const refusedDead = expectError(
      await api.call("POST", `/jobs/${jobId}/runs/${dead?.runId}/cancel`),
      409,
      { code: "illegal_transition" },
    );
    expect(refusedDead.currentStatus).toBe("dead");

    const id = await created(laterJob({ schedule: { cron: YEARLY_CRON, timezone: "UTC" } }));
    const runId = RunSchema.parse((await api.call("POST", `/jobs/${id}/trigger`)).body).runId;
    await runOnce(api, id);
    const refused = expectError(await api.call("POST", `/jobs/${id}/runs/${runId}/cancel`), 409, {
      code: "illegal_transition",
    });
    expect(refused.currentStatus).toBe("succeeded");
  });

  it("a running run: 200 with cancelRequestedAt, then CANCELLED within a heartbeat", async () => {
    const jobId = await created({
      type: "report",
      payload: {},
      schedule: { runAt: new Date().toISOString() },
    });
    const { processing, running } = await startedSleepyReport(jobId);

    const reply = await api.call("POST", `/jobs/${jobId}/runs/${running.runId}/cancel`);
    const askedAt = Date.now();
    expect(reply.status, reply.text).toBe(200);
    const asked = RunSchema.parse(reply.body);
    expect(asked).toMatchObject({ status: "running", cancelledBy: "api" });
    expect(asked.cancelRequestedAt).not.toBeNull();

    expect(await processing).toBe("ack");
    expect(Date.now() - askedAt).toBeLessThan(HEARTBEAT_MS + 1_500);
    const [ended] = await runsOf(jobId);
    expect(ended).toMatchObject({
      status: "cancelled",
      cancelledBy: "api",
      cancelRequestedAt: asked.cancelRequestedAt,
      reason: "run cancelled",
    });
  }, 30_000);

  it("404 for an unknown run, another job's run, or another tenant's", async () => {
    const id = await created(laterJob({ schedule: { cron: YEARLY_CRON, timezone: "UTC" } }));
    const other = await created(laterJob({ schedule: { cron: YEARLY_CRON, timezone: "UTC" } }));
    const runId = RunSchema.parse((await api.call("POST", `/jobs/${id}/trigger`)).body).runId;
    expectError(await api.call("POST", `/jobs/${other}/runs/${runId}/cancel`), 404, {
      code: "not_found",
    });
    expectError(await api.call("POST", `/jobs/${id}/runs/${runId}/cancel`, { key: KEY_B }), 404, {
      code: "not_found",
    });
    expectError(await api.call("POST", `/jobs/${id}/runs/${id}-20300101T000000000-1/cancel`), 404, {
      code: "not_found",
    });
    // Nothing was changed by the refusals.
    expect(RunSchema.parse((await api.call("GET", `/jobs/${id}/runs/${runId}`)).body).status).toBe(
      "queued",
    );
  });
});

describe("POST /jobs/{id}/pause with running", () => {
  it("400 naming running for a bad value, and nothing is changed", async () => {
    const id = await created(laterJob());
    expectError(await api.call("POST", `/jobs/${id}/pause`, { body: { running: "stop" } }), 400, {
      code: "validation_failed",
      field: "running",
    });
    expectError(await api.call("POST", `/jobs/${id}/pause`, { body: { runing: "cancel" } }), 400, {
      code: "validation_failed",
    });
    expect(JobSchema.parse((await api.call("GET", `/jobs/${id}`)).body).status).toBe("active");
  });

  it("without a body, and with running: finish, pauses as before", async () => {
    const a = await created(laterJob());
    const b = await created(laterJob());
    expect(JobSchema.parse((await api.call("POST", `/jobs/${a}/pause`)).body).status).toBe(
      "paused",
    );
    const reply = await api.call("POST", `/jobs/${b}/pause`, { body: { running: "finish" } });
    expect(reply.status, reply.text).toBe(200);
    expect(JobSchema.parse(reply.body).status).toBe("paused");
  });

  it("running: cancel ends the run in progress CANCELLED by pause; POST /jobs/{id}/cancel by job-cancel", async () => {
    const schedule = { cron: YEARLY_CRON, timezone: "UTC" };
    for (const [action, by] of [
      ["pause", "pause"],
      ["cancel", "job-cancel"],
    ] as const) {
      const id = await created({ type: "report", payload: {}, schedule });
      expect((await api.call("POST", `/jobs/${id}/trigger`)).status).toBe(202);
      const { processing } = await startedSleepyReport(id);
      const reply = await api.call(
        "POST",
        `/jobs/${id}/${action}`,
        action === "pause" ? { body: { running: "cancel" } } : {},
      );
      expect(reply.status, reply.text).toBe(200);
      expect(await processing).toBe("ack");
      const runs = await runsOf(id);
      expect(runs.map((r) => [r.status, r.cancelledBy])).toEqual([["cancelled", by]]);
    }
  }, 40_000);
});

describe("POST /jobs/{id}/resume after a pause cancelled a run at the last attempt", () => {
  /**
   * A job paused with running: cancel whose cancelled run is copied to attempt 9999, as if its
   * occurrence had been replayed up to there (each replay is the next attempt).
   */
  async function pausedWithLastAttemptCancelled(schedule: Record<string, unknown>) {
    const id = await created({ type: "report", payload: {}, schedule });
    if (!("runAt" in schedule))
      expect((await api.call("POST", `/jobs/${id}/trigger`)).status).toBe(202);
    const { processing } = await startedSleepyReport(id);
    const paused = await api.call("POST", `/jobs/${id}/pause`, { body: { running: "cancel" } });
    expect(paused.status, paused.text).toBe(200);
    expect(await processing).toBe("ack");
    const [cancelled] = await runsOf(id);
    expect(cancelled).toMatchObject({ status: "cancelled", cancelledBy: "pause", attempt: 1 });
    if (cancelled === undefined) throw new Error("no cancelled run");
    const last = await copyRunToAttempt(
      api.fixture.engine,
      { jobId: id, scheduledFor: cancelled.scheduledFor, attempt: 1 },
      MAX_ATTEMPT,
    );
    return { id, last };
  }

  const attemptsOf = async (id: string) =>
    (await runsOf(id)).map((r) => [r.attempt, r.status]).sort(([a], [b]) => Number(a) - Number(b));
  const dueEntriesOf = async (id: string) =>
    (await api.fixture.dueEntries()).filter((e) => e.jobId === id);

  it("a one-off: 409 illegal_transition naming the run and its attempt; the job stays paused, nothing written; a new runAt lets it resume", async () => {
    const { id, last } = await pausedWithLastAttemptCancelled({ runAt: new Date().toISOString() });
    const before = JobSchema.parse((await api.call("GET", `/jobs/${id}`)).body);

    const refused = expectError(await api.call("POST", `/jobs/${id}/resume`), 409, {
      code: "illegal_transition",
    });
    expect(refused.currentStatus).toBe("paused");
    expect(refused.message).toContain(last);
    expect(refused.message).toMatch(/9999/);
    // Nothing was written: the job is as it was, with no new run and nothing pending.
    expect(JobSchema.parse((await api.call("GET", `/jobs/${id}`)).body)).toEqual(before);
    expect(await attemptsOf(id)).toEqual([
      [1, "cancelled"],
      [MAX_ATTEMPT, "cancelled"],
    ]);
    expect(await dueEntriesOf(id)).toEqual([]);
    // A repeat is refused the same way.
    expectError(await api.call("POST", `/jobs/${id}/resume`), 409, { code: "illegal_transition" });

    // The way on: a new runAt is a new occurrence, whose first attempt the resume plans.
    const runAt = new Date(Date.now() + 3_600_000).toISOString();
    const edited = await api.call("PATCH", `/jobs/${id}`, {
      body: { schedule: { runAt } },
      headers: { "If-Match": `"${before.version}"` },
    });
    expect(edited.status, edited.text).toBe(200);
    const resumed = await api.call("POST", `/jobs/${id}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    expect(JobSchema.parse(resumed.body)).toMatchObject({ status: "active", nextRunAt: runAt });
    expect((await dueEntriesOf(id)).map((e) => [e.scheduledFor, e.attempt])).toEqual([[runAt, 1]]);
  }, 40_000);

  it("a recurring job: resumes (200) to its next occurrence, the cancelled run not run again; a trigger is a first attempt", async () => {
    const { id } = await pausedWithLastAttemptCancelled({ cron: YEARLY_CRON, timezone: "UTC" });
    const resumed = await api.call("POST", `/jobs/${id}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    const job = JobSchema.parse(resumed.body);
    expect(job.status).toBe("active");
    expect(await attemptsOf(id)).toEqual([
      [1, "cancelled"],
      [MAX_ATTEMPT, "cancelled"],
    ]);
    expect((await dueEntriesOf(id)).map((e) => [e.scheduledFor, e.attempt])).toEqual([
      [job.nextRunAt, 1],
    ]);
    const triggered = await api.call("POST", `/jobs/${id}/trigger`);
    expect(triggered.status, triggered.text).toBe(202);
    expect(RunSchema.parse(triggered.body)).toMatchObject({ attempt: 1, status: "queued" });
  }, 40_000);
});

/** As `startedSleepy`, for a job of the custom type `report` (the API accepts it; the worker sleeps). */
async function startedSleepyReport(jobId: string) {
  const f = api.fixture;
  const deps = f.workerDeps(
    "worker-api",
    { report: async (ctx: JobContext) => sleep(30_000, ctx.signal) },
    HEARTBEAT_MS,
  );
  const received = await f.nextDelivery(f.engine.queues.normal, jobId);
  const processing = f.process(deps, received);
  const running = await waitFor("the run to be running", async () =>
    (await runsOf(jobId)).find((r) => r.status === "running"),
  );
  return { processing, running };
}
