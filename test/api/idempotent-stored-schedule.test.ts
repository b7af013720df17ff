import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newJobFrom } from "../../shared/api/requests.js";
import type { CreateJobBody } from "../../shared/api/schemas/jobs.js";
import { createJob, idempotentCreate } from "../../shared/jobs/index.js";
import { type ApiHarness, expectError, JOB_TYPES, startApi, TENANT_A } from "./support.js";

/**
 * A create made before a check that refuses new input only (a cron list's empty item, a System V
 * zone): the job stands and keeps running, so a repeat of that create with its key and the very
 * body that made it is the repeat it is (200, that job), not a 400 that tells the client the job
 * was never made. Another body under the key is still refused as new input. Edits of its other
 * fields keep the schedule as stored, read without the stray comma.
 */
type CronSchedule = { readonly cron: string; readonly timezone: string };

describe("a job stored before a check that refuses new input only", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  /** The job and idempotency record a create of `body` wrote before the check (as it did then). */
  async function storedBefore(key: string, body: CreateJobBody, accepted: CronSchedule) {
    const { engine } = api.fixture;
    const asked = newJobFrom(
      { ...body, schedule: accepted },
      TENANT_A,
      engine.clock(),
      engine.settings,
      JOB_TYPES,
    );
    const made = { ...asked, schedule: body.schedule as CronSchedule };
    const { job } = await createJob(engine, made, {
      idempotency: idempotentCreate(key, made, body),
    });
    return job;
  }

  const cases = [
    {
      name: "a cron list's stray comma",
      schedule: { cron: "0 9 * * 1-5,", timezone: "UTC" },
      accepted: { cron: "0 9 * * 1-5", timezone: "UTC" },
      field: "schedule.cron",
    },
    {
      name: "a System V zone",
      schedule: { cron: "0 9 * * *", timezone: "SystemV/EST5EDT" },
      accepted: { cron: "0 9 * * *", timezone: "America/New_York" },
      field: "schedule.timezone",
    },
  ];

  it("a job stored with a stray comma keeps its schedule through edits of other fields, and previews without the comma", async () => {
    const schedule = { cron: "0 9 * * 1-5,", timezone: "UTC" };
    const body = { type: "noop", name: "weekdays", schedule } as CreateJobBody;
    const job = await storedBefore("stored-before-edits", body, {
      ...schedule,
      cron: "0 9 * * 1-5",
    });
    for (const change of [
      { name: "renamed" },
      { window: "PT5M" },
      { maxRuns: 30 },
      { endAt: null },
    ]) {
      const current = await api.call("GET", `/jobs/${job.jobId}`);
      const edited = await api.call("PATCH", `/jobs/${job.jobId}`, {
        body: change,
        headers: { "If-Match": current.headers.get("ETag") ?? "" },
      });
      expect(edited.status, `${JSON.stringify(change)}: ${edited.text}`).toBe(200);
      expect(edited.body).toMatchObject({ schedule });
    }
    const preview = await api.call("GET", `/jobs/${job.jobId}/preview?count=10`);
    expect(preview.status, preview.text).toBe(200);
    const days = (preview.body as { occurrences: { utc: string }[] }).occurrences.map((o) =>
      new Date(o.utc).getUTCDay(),
    );
    expect(days).toHaveLength(10);
    expect(days.filter((day) => day === 0 || day === 6)).toEqual([]);
    // Sent again whole, the schedule is new input, and refused as such, naming it.
    const current = await api.call("GET", `/jobs/${job.jobId}`);
    const resent = await api.call("PATCH", `/jobs/${job.jobId}`, {
      body: { schedule },
      headers: { "If-Match": current.headers.get("ETag") ?? "" },
    });
    expectError(resent, 400, { field: "schedule.cron" });
  });

  for (const { name, schedule, accepted, field } of cases) {
    it(`${name}: the same body with its key answers the job (200); another body is still the 400`, async () => {
      const key = `stored-before-${name.replace(/\W+/g, "-")}`;
      const body = { type: "noop", name: `stored ${name}`, schedule } as CreateJobBody;
      const job = await storedBefore(key, body, accepted);
      const before = (await api.fixture.jobs()).length;

      const repeat = await api.call("POST", "/jobs", {
        body,
        headers: { "Idempotency-Key": key },
      });
      expect(repeat.status, repeat.text).toBe(200);
      expect(repeat.body).toMatchObject({ id: job.jobId, schedule });
      const inBatch = await api.call("POST", "/jobs:batch", {
        body: { jobs: [{ ...body, idempotencyKey: key }] },
      });
      expect(inBatch.body).toMatchObject({
        results: [{ index: 0, status: 200, job: { id: job.jobId } }],
      });

      const other = await api.call("POST", "/jobs", {
        body: { ...body, name: "another body" },
        headers: { "Idempotency-Key": key },
      });
      expectError(other, 400, { field });
      expect((await api.fixture.jobs()).length).toBe(before);
    });
  }
});
