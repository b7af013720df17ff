import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema, RunSchema } from "../../shared/api/schemas/runs.js";
import { parseRunId } from "../../shared/keys.js";
import { startRun } from "../../shared/storage/run-start.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { inProcessApi } from "./support.js";

/**
 * A run cancel sent on a run a pause cancelled (`running: "cancel"`): answered as the pause left
 * the run, and the resume still gives the one-off's occurrence its next attempt.
 */
const KEY = "run-cancel-repeats-key";
const TENANT = "tenant-run-cancel-repeats";

let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture();
});
afterAll(() => f.destroy());

const call = (method: string, path: string, body?: unknown) =>
  inProcessApi(f.engine, { key: KEY, tenant: TENANT })(method, path, { body });

async function runsOf(jobId: string) {
  const reply = await call("GET", `/jobs/${jobId}/runs`);
  expect(reply.status, reply.text).toBe(200);
  return RunPageSchema.parse(reply.body).items;
}

describe("POST /jobs/{id}/runs/{runId}/cancel on a run a pause cancelled", () => {
  it("200 with the run as the pause left it, nothing written; the resume gives the occurrence its next attempt", async () => {
    const made = await call("POST", "/jobs", {
      type: "noop",
      schedule: { runAt: new Date(Date.now() + 60_000).toISOString() },
    });
    expect(made.status, made.text).toBe(201);
    const jobId = JobSchema.parse(made.body).id;
    const [queued] = await runsOf(jobId);
    const ref = parseRunId(queued?.runId ?? "");
    if (ref === null) throw new Error(`not a run id: ${queued?.runId}`);
    // Started by a worker that died long ago: its lease has lapsed, so the pause ends it now.
    const started = await startRun(f.engine, ref, "gone-worker", new Date(Date.now() - 3_600_000));
    expect(started.kind).toBe("started");

    const paused = await call("POST", `/jobs/${jobId}/pause`, { running: "cancel" });
    expect(paused.status, paused.text).toBe(200);
    const ended = RunSchema.parse((await call("GET", `/jobs/${jobId}/runs/${queued?.runId}`)).body);
    expect(ended).toMatchObject({ status: "cancelled", cancelledBy: "pause" });
    const jobPaused = await call("GET", `/jobs/${jobId}`);

    const cancel = await call("POST", `/jobs/${jobId}/runs/${queued?.runId}/cancel`);
    expect(cancel.status, cancel.text).toBe(200);
    expect(RunSchema.parse(cancel.body)).toEqual(ended);
    expect((await call("GET", `/jobs/${jobId}`)).body).toEqual(jobPaused.body);

    const resumed = await call("POST", `/jobs/${jobId}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    const runs = await runsOf(jobId);
    expect(runs.map((run) => [run.attempt, run.status])).toEqual([
      [2, "queued"],
      [1, "cancelled"],
    ]);
    const again = await call("POST", `/jobs/${jobId}/runs/${queued?.runId}/cancel`);
    expect(again.status, again.text).toBe(200);
    expect(RunSchema.parse(again.body)).toEqual(ended);
  });
});
