import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { PreviewSchema } from "../../shared/api/schemas/previews.js";
import { type ApiHarness, startApi } from "./support.js";

/**
 * A preview with `maxRuns` asked `from` an instant before the job's first occurrence (adversarial
 * review h87). docs/api.md: a job's preview stops at its `maxRuns`, and `POST /schedules/preview`
 * "stops where a job created now with them would". An hourly job created at 12:00 with maxRuns 2
 * runs 12:00 and 13:00 only; the preview counts maxRuns from that first occurrence but still lists
 * every earlier hour from `from`, none of which ever runs: seven occurrences for a job of two.
 */
const NOW = "2027-03-13T12:00:00Z";
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi({ clock: () => new Date(NOW) });
});
afterAll(() => api.close());

const hourly = { cron: "0 * * * *", timezone: "UTC" };
const utcOf = (body: unknown) => PreviewSchema.parse(body).occurrences.map((o) => o.utc);
const runs = ["2027-03-13T12:00:00.000Z", "2027-03-13T13:00:00.000Z"];

describe("a preview from before the first occurrence, with maxRuns", () => {
  it("POST /schedules/preview shows only the occurrences a job created now would run", async () => {
    const reply = await api.call("POST", "/schedules/preview", {
      body: { schedule: hourly, maxRuns: 2, count: 10, from: "2027-03-13T07:00:00Z" },
    });
    expect(reply.status, reply.text).toBe(200);
    expect(utcOf(reply.body)).toEqual(runs);
  });

  it("GET /jobs/{id}/preview of a job created now shows only the occurrences it runs", async () => {
    const created = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: hourly, maxRuns: 2 },
    });
    expect(created.status, created.text).toBe(201);
    const job = JobSchema.parse(created.body);
    const reply = await api.call(
      "GET",
      `/jobs/${job.id}/preview?count=10&from=${encodeURIComponent("2027-03-13T07:00:00Z")}`,
    );
    expect(reply.status, reply.text).toBe(200);
    expect(utcOf(reply.body)).toEqual(runs);
  });
});
