import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { PreviewSchema } from "../../shared/api/schemas/previews.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { plannedTime, type ScheduleSpec } from "../../shared/schedule/index.js";
import { type ApiHarness, expectError, runOnce, startApi } from "./support.js";

/** The job's `window` (jitter) over HTTP: accepted, shown, previewed, refused with its field. */
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

const MINUTE = 60_000;
const hourly: ScheduleSpec = { cron: "0 * * * *", timezone: "UTC" };

async function create(body: Record<string, unknown>) {
  const reply = await api.call("POST", "/jobs", { body: { type: "noop", ...body } });
  expect(reply.status, reply.text).toBe(201);
  return JobSchema.parse(reply.body);
}

describe("window", () => {
  it("is stored and shown; the job's preview gives each occurrence's planned time inside it", async () => {
    const job = await create({ schedule: hourly, window: "PT5M" });
    expect(job.window).toBe("PT5M");
    expect((await create({ schedule: hourly })).window).toBeNull();

    const reply = await api.call("GET", `/jobs/${job.id}/preview?count=24`);
    expect(reply.status, reply.text).toBe(200);
    const preview = PreviewSchema.parse(reply.body);
    expect(preview.occurrences).toHaveLength(24);
    for (const occurrence of preview.occurrences) {
      const at = new Date(occurrence.utc);
      expect(occurrence.plannedFor).toBe(plannedTime(job.id, at, 5 * MINUTE, hourly).toISOString());
      const offset = Date.parse(occurrence.plannedFor ?? "") - at.getTime();
      expect(offset).toBeGreaterThanOrEqual(0);
      expect(offset).toBeLessThan(5 * MINUTE);
    }
    // Asked again, the same planned times: they are a function of the job and the occurrence.
    const again = PreviewSchema.parse(
      (await api.call("GET", `/jobs/${job.id}/preview?count=24`)).body,
    );
    expect(again.occurrences).toEqual(preview.occurrences);
    // A schedule's preview has no job id to plan with, and a job without a window plans nothing.
    const bare = await api.call("POST", "/schedules/preview", { body: { schedule: hourly } });
    expect(PreviewSchema.parse(bare.body).occurrences[0]?.plannedFor).toBeUndefined();
  });

  it("a preview across the night clocks go forward plans each occurrence before the next one", async () => {
    // 01:30 and 03:30 in New York: two hours apart on the wall clock, one in real time on
    // 2027-03-14. The window is the wall-clock period; each job id hashes its own offsets.
    const overNight: ScheduleSpec = { cron: "30 1,3 * * *", timezone: "America/New_York" };
    const inverted: string[] = [];
    for (let i = 0; i < 12; i++) {
      const job = await create({ schedule: overNight, window: "PT2H" });
      const reply = await api.call(
        "GET",
        `/jobs/${job.id}/preview?count=4&from=2027-03-13T12:00:00Z`,
      );
      expect(reply.status, reply.text).toBe(200);
      const { occurrences } = PreviewSchema.parse(reply.body);
      expect(occurrences.map((o) => o.utc)).toEqual([
        "2027-03-14T06:30:00.000Z",
        "2027-03-14T07:30:00.000Z",
        "2027-03-15T05:30:00.000Z",
        "2027-03-15T07:30:00.000Z",
      ]);
      occurrences.forEach((o, k) => {
        const next = occurrences[k + 1];
        if (next !== undefined && (o.plannedFor ?? "") >= next.utc)
          inverted.push(`${job.id}: ${o.utc} planned ${o.plannedFor}, after ${next.utc}`);
      });
    }
    expect(inverted).toEqual([]);
  });

  it("400 naming window: not a duration, longer than the period, on a one-off; nothing written", async () => {
    const before = (await api.fixture.jobs()).length;
    for (const [body, message] of [
      [{ schedule: hourly, window: "5 minutes" }, /ISO-8601 duration/],
      [{ schedule: hourly, window: "PT0S" }, /positive/],
      [{ schedule: hourly, window: "PT61M" }, /longer than the schedule's period \(3600 s/],
      [{ schedule: { every: "PT10M" }, window: "PT11M" }, /longer than the schedule's period/],
      [{ schedule: { runAt: "2031-01-01T00:00:00Z" }, window: "PT5M" }, /recurring schedules/],
    ] as const) {
      const reply = await api.call("POST", "/jobs", { body: { type: "noop", ...body } });
      const error = expectError(reply, 400, { code: "validation_failed", field: "window" });
      expect(JSON.stringify(error)).toMatch(message);
    }
    expect((await api.fixture.jobs()).length).toBe(before);
  });

  it("an edit may change or remove it; a schedule it no longer fits is refused naming window", async () => {
    const job = await create({ schedule: hourly, window: "PT30M" });
    const patch = (version: number, body: Record<string, unknown>) =>
      api.call("PATCH", `/jobs/${job.id}`, { body, headers: { "If-Match": `"${version}"` } });

    const tooShort = await patch(1, { schedule: { cron: "*/10 * * * *", timezone: "UTC" } });
    expectError(tooShort, 400, { code: "validation_failed", field: "window" });

    const narrowed = await patch(1, {
      schedule: { cron: "*/10 * * * *", timezone: "UTC" },
      window: "PT10M",
    });
    expect(narrowed.status, narrowed.text).toBe(200);
    expect(JobSchema.parse(narrowed.body)).toMatchObject({ version: 2, window: "PT10M" });

    const removed = await patch(2, { window: null });
    expect(removed.status, removed.text).toBe(200);
    expect(JobSchema.parse(removed.body).window).toBeNull();
    const preview = PreviewSchema.parse((await api.call("GET", `/jobs/${job.id}/preview`)).body);
    // No planned time of its own; an occurrence a claim queued under PT10M (when the clock puts
    // the next one inside the create's reach) keeps the run's.
    const queued = new Map(
      (await api.fixture.runs())
        .filter((r) => r.jobId === job.id && r.plannedFor !== r.scheduledFor)
        .map((r) => [r.scheduledFor, r.plannedFor]),
    );
    expect(preview.occurrences.map((o) => o.plannedFor)).toEqual(
      preview.occurrences.map((o) => queued.get(o.utc)),
    );
  });

  it("an edit of the window leaves a queued occurrence's planned time: the preview shows the one its run keeps", async () => {
    const startAt = new Date(Math.ceil((Date.now() + MINUTE) / 1000) * 1000).toISOString();
    const every: ScheduleSpec = { every: "PT1H", startAt };
    const job = await create({ schedule: every, window: "PT5M" });
    // The create's claim queued the first occurrence, planned inside its 5 minutes.
    const [run] = (await api.fixture.runs()).filter((r) => r.jobId === job.id);
    expect(run?.plannedFor).toBe(
      plannedTime(job.id, new Date(startAt), 5 * MINUTE, every).toISOString(),
    );

    const widened = await api.call("PATCH", `/jobs/${job.id}`, {
      body: { window: "PT50M" },
      headers: { "If-Match": `"${job.version}"` },
    });
    expect(widened.status, widened.text).toBe(200);
    const shown = PreviewSchema.parse(
      (await api.call("GET", `/jobs/${job.id}/preview?count=2`)).body,
    ).occurrences;
    const second = new Date(Date.parse(startAt) + 60 * MINUTE);
    expect(shown.map((o) => [o.utc, o.plannedFor])).toEqual([
      [startAt, run?.plannedFor],
      [second.toISOString(), plannedTime(job.id, second, 50 * MINUTE, every).toISOString()],
    ]);

    // With the window removed, the queued occurrence still runs at its planned time.
    const removed = await api.call("PATCH", `/jobs/${job.id}`, {
      body: { window: null },
      headers: { "If-Match": `"${job.version + 1}"` },
    });
    expect(removed.status, removed.text).toBe(200);
    const bare = PreviewSchema.parse(
      (await api.call("GET", `/jobs/${job.id}/preview?count=2`)).body,
    ).occurrences;
    expect(bare.map((o) => [o.utc, o.plannedFor])).toEqual([
      [startAt, run?.plannedFor],
      [second.toISOString(), undefined],
    ]);
  });

  it("a run shows plannedFor: its occurrence when the job has no window", async () => {
    const reply = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: { runAt: new Date(Date.now() - 1000).toISOString() } },
    });
    const job = JobSchema.parse(reply.body);
    await runOnce(api, job.id);
    const runs = RunPageSchema.parse((await api.call("GET", `/jobs/${job.id}/runs`)).body);
    expect(runs.items).toHaveLength(1);
    expect(runs.items[0]?.plannedFor).toBe(runs.items[0]?.scheduledFor);
  });
});
