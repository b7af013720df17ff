import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import type { Clock } from "../../shared/clock.js";
import { type ApiHarness, laterJob, startApi } from "./support.js";

/**
 * An `every` schedule without `startAt` starts at once. The API reads the clock when it checks
 * the request and the create or edit reads it again to plan the first occurrence; a second
 * boundary between the two readings must not put the first run a whole interval later. The
 * clock here is real time plus one more second at each reading, so every two readings lie in
 * different seconds.
 */
const aSecondLaterEachReading = (): Clock => {
  let readings = 0;
  return () => new Date(Date.now() + 1000 * readings++);
};

const perMinute = { type: "noop", schedule: { every: "PT1M" } };

describe("an every schedule without startAt, with a second passing between readings of the clock", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi({ clock: aSecondLaterEachReading() });
  });
  afterAll(() => api.close());

  /** The job's first run starts its schedule, is due by the time the job was written, and is delivered now. */
  const expectStartedAtOnce = async (body: unknown) => {
    const job = JobSchema.parse(body);
    const schedule = job.schedule as { every: string; startAt?: string };
    expect(schedule.startAt).toBeDefined();
    const runs = RunPageSchema.parse((await api.call("GET", `/jobs/${job.id}/runs`)).body).items;
    const first = runs.toSorted((a, b) => a.scheduledFor.localeCompare(b.scheduledFor))[0];
    expect(first).toMatchObject({ status: "queued", scheduledFor: schedule.startAt });
    expect(Date.parse(first?.dueAt ?? "")).toBeLessThanOrEqual(Date.parse(job.updatedAt));
    const delivered = await api.fixture.nextDelivery(
      api.fixture.engine.queues.normal,
      job.id,
      5000,
    );
    expect(delivered.message.scheduledFor).toBe(schedule.startAt);
  };

  it("POST /jobs runs the first occurrence at once", async () => {
    const reply = await api.call("POST", "/jobs", { body: perMinute });
    expect(reply.status, reply.text).toBe(201);
    await expectStartedAtOnce(reply.body);
  });

  it("POST /jobs:batch runs the first occurrence at once", async () => {
    const reply = await api.call("POST", "/jobs:batch", { body: { jobs: [perMinute] } });
    expect(reply.status, reply.text).toBe(200);
    const [result] = (reply.body as { results: { status: number; job?: unknown }[] }).results;
    expect(result?.status).toBe(201);
    await expectStartedAtOnce(result?.job);
  });

  it("PATCH /jobs/{id} to it runs the new schedule's first occurrence at once", async () => {
    const created = await api.call("POST", "/jobs", { body: laterJob() });
    expect(created.status, created.text).toBe(201);
    const { id } = JobSchema.parse(created.body);
    const edited = await api.call("PATCH", `/jobs/${id}`, {
      body: { schedule: perMinute.schedule },
      headers: { "If-Match": '"1"' },
    });
    expect(edited.status, edited.text).toBe(200);
    await expectStartedAtOnce(edited.body);
  });
});
