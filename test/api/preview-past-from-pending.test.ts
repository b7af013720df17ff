import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { PreviewSchema } from "../../shared/api/schemas/previews.js";
import { type ApiHarness, startApi } from "./support.js";

/**
 * A preview's `from` before now shows what still runs (adversarial review h94 of a change that
 * started every such preview at now). A one-off whose `runAt` is a little in the past runs at
 * once: docs/api.md says "A `runAt` in the past runs at once under the misfire policy", and one
 * within the misfire grace (60 s) runs under any policy. A preview asked `from` before it shows
 * that occurrence, on both routes, though it lies before now.
 */
const NOW = "2027-03-13T12:00:00Z";
const RUN_AT = "2027-03-13T11:59:30.000Z"; // 30 s ago: within the misfire grace
const FROM = "2027-03-13T11:59:00Z";
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi({ clock: () => new Date(NOW) });
});
afterAll(() => api.close());

const utcOf = (body: unknown) => PreviewSchema.parse(body).occurrences.map((o) => o.utc);

describe("a preview from before a one-off's runAt that is a little in the past", () => {
  it("POST /schedules/preview shows the runAt a job created now runs", async () => {
    const reply = await api.call("POST", "/schedules/preview", {
      body: { schedule: { runAt: RUN_AT }, from: FROM },
    });
    expect(reply.status, reply.text).toBe(200);
    expect(utcOf(reply.body)).toEqual([RUN_AT]);
  });

  it("GET /jobs/{id}/preview of that job, created now and pending, shows its occurrence", async () => {
    const created = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: { runAt: RUN_AT } },
    });
    expect(created.status, created.text).toBe(201);
    const job = JobSchema.parse(created.body);
    expect(job.status).toBe("active");
    const reply = await api.call("GET", `/jobs/${job.id}/preview?from=${encodeURIComponent(FROM)}`);
    expect(reply.status, reply.text).toBe(200);
    expect(utcOf(reply.body)).toEqual([RUN_AT]);
  });
});

/**
 * The same, for a job with a jitter window: an occurrence a claim has queued, due at its planned
 * time minutes after the occurrence itself, has not run once the occurrence passes; a preview from
 * the occurrence shows it with its plannedFor (docs/api.md, Jitter), not the next hour's.
 */
describe("a preview from a queued occurrence of a jittered job, passed but planned later", () => {
  let nowMs = Math.ceil(Date.now() / 1000) * 1000;
  let jittered: ApiHarness;
  beforeAll(async () => {
    jittered = await startApi({ clock: () => new Date(nowMs) });
  });
  afterAll(() => jittered.close());

  it("GET /jobs/{id}/preview from the occurrence shows it, with its planned time", async () => {
    const startAt = new Date(nowMs + 60_000).toISOString();
    const created = await jittered.call("POST", "/jobs", {
      body: { type: "noop", schedule: { every: "PT1H", startAt }, window: "PT5M" },
    });
    expect(created.status, created.text).toBe(201);
    const job = JobSchema.parse(created.body);
    const [run] = (await jittered.fixture.runs()).filter((r) => r.jobId === job.id);
    expect([run?.scheduledFor, run?.status]).toEqual([startAt, "QUEUED"]);
    const plannedFor = run?.plannedFor ?? startAt;
    // The clock a second past the occurrence, before its planned time: the run waits still.
    nowMs = Date.parse(startAt) + 1000;
    expect(Date.parse(plannedFor)).toBeGreaterThan(nowMs);

    const reply = await jittered.call(
      "GET",
      `/jobs/${job.id}/preview?count=1&from=${encodeURIComponent(startAt)}`,
    );
    expect(reply.status, reply.text).toBe(200);
    const shown = PreviewSchema.parse(reply.body).occurrences;
    expect(shown.map((o) => [o.utc, o.plannedFor])).toEqual([[startAt, plannedFor]]);
  });
});
