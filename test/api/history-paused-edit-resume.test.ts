import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { type ApiHarness, startApi } from "./support.js";

/**
 * Through the API alone (found in a review of the run history). A `*\/2`-second job is paused
 * just after a claim queued its next 50 runs (100 s of them, parked by the pause), edited to every
 * second (the new schedule has every parked run's occurrence: they are kept), and resumed five
 * minutes later. The resume's claim finds its pending occurrence past the misfire grace and
 * records the missed occurrences SKIPPED, each put only where no item is, so a parked run it meets
 * is kept and the claim goes on. When the records rode in the transaction, each parked run met
 * cancelled it, the claim gave up after four rounds, and every pass after started again from
 * nothing: the job never moved on.
 */
const T0 = Date.parse("2030-05-01T00:00:00.000Z");
let now = new Date(T0);
let api: ApiHarness;

beforeAll(async () => {
  api = await startApi({ clock: () => now, settings: { shardCount: 1, maxShardCount: 1 } });
});
afterAll(() => api.close());

describe("a job paused, edited to a denser schedule that keeps its parked runs, resumed late", () => {
  it("goes on after the resume: its pending occurrence moves past the pause", async () => {
    const created = await api.call("POST", "/jobs", {
      body: {
        type: "noop",
        schedule: { cron: "*/2 * * * * *", timezone: "UTC" },
        misfirePolicy: "skip",
      },
    });
    expect(created.status, created.text).toBe(201);
    const jobId = JobSchema.parse(created.body).id;
    now = new Date(T0 + 1000);
    const paused = await api.call("POST", `/jobs/${jobId}/pause`);
    expect(paused.status, paused.text).toBe(200);
    const edited = await api.call("PATCH", `/jobs/${jobId}`, {
      body: { schedule: { cron: "* * * * * *", timezone: "UTC" } },
      headers: { "If-Match": `"${JobSchema.parse(paused.body).version}"` },
    });
    expect(edited.status, edited.text).toBe(200);
    // The create's claims queued 100 runs ahead (200 s): parked by the pause, kept by the edit.
    const kept = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs?limit=100`)).body);
    expect(kept.items.filter((r) => r.status === "queued")).toHaveLength(100);

    now = new Date(T0 + 5 * 60_000);
    const resumed = await api.call("POST", `/jobs/${jobId}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    // Three passes a minute apart: each failed pass left its 50 runs ahead put (not deleted), and
    // those lie among the next pass's missed occurrences, so a pass after a failed one meets parked
    // runs too. The bug failed every pass alike: 16 passes, to 20 minutes on, where the missed
    // occurrences outnumber the 1,000 a claim records, made the case 17 s rather than 11 (loaded).
    for (let minute = 5; minute <= 7; minute++) {
      now = new Date(T0 + minute * 60_000 + 1000);
      await dispatchShard(api.fixture.engine, 0, `pass-${minute}`);
    }
    const job = JobSchema.parse((await api.call("GET", `/jobs/${jobId}`)).body);
    // Every pass fails its claim ("found it changed 4 times; the next pass tries again").
    expect(job.nextRunAt).not.toBe("2030-05-01T00:00:01.000Z");
  }, 120_000);
});
