import { afterEach, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { plannedTime, windowMsOf } from "../../shared/schedule/index.js";
import { type ApiHarness, startApi } from "../api/support.js";

/**
 * A jittered job's occurrences the misfire policy records `skipped` after an outage (adversarial
 * review h87). docs/api.md (Jitter): a run "shows the planned time as `plannedFor` (equal to
 * `scheduledFor` without a window)", and lateness counts from it. The claim writes its SKIPPED
 * records without their planned time (claim-writes.ts, skippedRun's runSpec), so each shows
 * `plannedFor` equal to `scheduledFor` though the job has a window, where the preview before the
 * outage showed the jittered time and the run the same claim queued keeps its own.
 */
let nowMs = 0;
let api: ApiHarness | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

describe("a windowed job's occurrences skipped at a late claim", () => {
  it("show their planned time as plannedFor, as its queued runs do", async () => {
    nowMs = Date.parse("2027-11-07T03:50:00Z");
    const harness = await startApi({
      clock: () => new Date(nowMs),
      settings: { shardCount: 1, maxShardCount: 1 },
    });
    api = harness;
    const schedule = { cron: "*/30 * * * *", timezone: "America/New_York" };
    const created = await harness.call("POST", "/jobs", {
      body: { type: "noop", schedule, window: "PT30M", misfirePolicy: "skip" },
    });
    expect(created.status, created.text).toBe(201);
    const job = JobSchema.parse(created.body);
    await dispatchShard(harness.fixture.engine, 0, "before");
    // The dispatchers are down from 23:50 EDT to 01:47 EST, over the night the clocks go back.
    nowMs = Date.parse("2027-11-07T06:47:00Z");
    await dispatchShard(harness.fixture.engine, 0, "after");

    const reply = await harness.call("GET", `/jobs/${job.id}/runs?limit=100`);
    expect(reply.status, reply.text).toBe(200);
    const skipped = RunPageSchema.parse(reply.body).items.filter((r) => r.status === "skipped");
    expect(skipped.length).toBeGreaterThan(0);
    const windowMs = windowMsOf("PT30M");
    const shown = skipped.map((r) => [r.scheduledFor, r.plannedFor]);
    const planned = skipped.map((r) => [
      r.scheduledFor,
      plannedTime(job.id, new Date(r.scheduledFor), windowMs, schedule).toISOString(),
    ]);
    expect(shown).toEqual(planned);
  }, 60_000);
});
