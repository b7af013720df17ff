import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { waitFor } from "../support/wait.js";
import { type ApiHarness, createdVia, inMinutes, jobVia, startApi } from "./support.js";

/** Edits of a job over HTTP as a tenant makes them: while a run is under way, from a stale version. */
let api: ApiHarness;
/** Soon enough that the run's start is written (it shows `running`) within a second. */
const HEARTBEAT_MS = 300;

beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

const created = (body: Record<string, unknown>) => createdVia(api, body);

async function runsOf(jobId: string) {
  const reply = await api.call("GET", `/jobs/${jobId}/runs`);
  expect(reply.status, reply.text).toBe(200);
  return RunPageSchema.parse(reply.body).items;
}

const jobOf = (jobId: string) => jobVia(api, jobId);

/**
 * Starts the one-off's run with a `report` handler that holds until `finish` is called, and
 * waits until the run shows `running`.
 */
async function runningOneOff(jobId: string) {
  const f = api.fixture;
  let finish: () => void = () => undefined;
  const held = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const deps = f.workerDeps(
    "worker-edits",
    { report: async (_ctx: JobContext) => held },
    HEARTBEAT_MS,
  );
  const received = await f.nextDelivery(f.engine.queues.normal, jobId);
  const processing = f.process(deps, received);
  await waitFor("the run to be running", async () =>
    (await runsOf(jobId)).find((r) => r.status === "running"),
  );
  return { processing, finish };
}

describe("a one-off edited while its run is under way", () => {
  it("moved to a new runAt: the run's success leaves the job active at the new time", async () => {
    const job = await created({
      type: "report",
      payload: {},
      schedule: { runAt: new Date().toISOString() },
    });
    const { processing, finish } = await runningOneOff(job.id);

    const tomorrow = inMinutes(24 * 60);
    const edited = await api.call("PATCH", `/jobs/${job.id}`, {
      headers: { "If-Match": `"${job.version}"` },
      body: { schedule: { runAt: tomorrow } },
    });
    expect(edited.status, edited.text).toBe(200);
    expect(JobSchema.parse(edited.body)).toMatchObject({
      status: "active",
      nextRunAt: new Date(tomorrow).toISOString(),
    });

    finish();
    expect(await processing).toBe("ack");
    expect((await runsOf(job.id))[0]?.status).toBe("succeeded");
    // The occurrence the edit asked for is still to come.
    expect(await jobOf(job.id)).toMatchObject({
      status: "active",
      nextRunAt: new Date(tomorrow).toISOString(),
    });
  }, 30_000);

  it("turned into a recurring job: the one-off's success does not complete it", async () => {
    const job = await created({
      type: "report",
      payload: {},
      schedule: { runAt: new Date().toISOString() },
    });
    const { processing, finish } = await runningOneOff(job.id);

    const edited = await api.call("PATCH", `/jobs/${job.id}`, {
      headers: { "If-Match": `"${job.version}"` },
      body: { schedule: { cron: "0 0 1 1 *", timezone: "UTC" } },
    });
    expect(edited.status, edited.text).toBe(200);
    const nextRunAt = JobSchema.parse(edited.body).nextRunAt;
    expect(nextRunAt).not.toBeNull();

    finish();
    expect(await processing).toBe("ack");
    expect(await jobOf(job.id)).toMatchObject({ status: "active", nextRunAt });
  }, 30_000);
});

describe("PATCH from a stale version", () => {
  it("is 412 with the current ETag, even when the body would not fit the job as it stands now", async () => {
    const job = await created({
      type: "noop",
      schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
      overlapPolicy: "allow",
      maxConcurrent: 2,
    });
    // Another caller moves the job on: it no longer allows overlap.
    const moved = await api.call("PATCH", `/jobs/${job.id}`, {
      headers: { "If-Match": `"${job.version}"` },
      body: { overlapPolicy: "skip" },
    });
    expect(moved.status, moved.text).toBe(200);

    // This caller still holds the first version, where maxConcurrent was a valid change.
    const stale = await api.call("PATCH", `/jobs/${job.id}`, {
      headers: { "If-Match": `"${job.version}"` },
      body: { maxConcurrent: 3 },
    });
    expect(stale.status, stale.text).toBe(412);
    expect(stale.headers.get("etag")).toBe(`"${job.version + 1}"`);
  });
});
