import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { ErrorSchema } from "../../shared/api/schemas/errors.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { JOB_TYPES } from "./support.js";

/**
 * Keys write instants as four-digit-year ISO strings, so nothing a tenant schedules may fall
 * after 9999-12-31T23:59:59.999Z. An `every` longer than the storable range is refused naming
 * `schedule.every`; any other schedule ends at its last storable occurrence. Neither is a 500,
 * at create or edit, however close to the end of the range the clock is.
 */
const KEY = "bounds-key";
let fixture: EngineFixture;
let app: ReturnType<typeof createApiApp>;
let now = new Date();

beforeAll(async () => {
  fixture = await createEngineFixture({ clock: () => now });
  app = createApiApp({
    engine: fixture.engine,
    jobTypes: JOB_TYPES,
    authenticate: bearerAuthenticator(new Map([[KEY, "tenant-bounds"]])),
  });
});
afterAll(() => fixture.destroy());

interface Answer {
  readonly status: number;
  readonly body: unknown;
}

async function send(method: string, path: string, body: unknown, ifMatch?: string) {
  const response = await app.request(path, {
    method,
    headers: {
      Authorization: `Bearer ${KEY}`,
      "Content-Type": "application/json",
      ...(ifMatch === undefined ? {} : { "If-Match": ifMatch }),
    },
    body: JSON.stringify(body),
  });
  const answer: Answer = { status: response.status, body: await response.json() };
  return answer;
}

const create = (schedule: unknown) => send("POST", "/jobs", { type: "noop", schedule });

function fieldOf(answer: Answer): string | undefined {
  return ErrorSchema.parse(answer.body).error.field;
}

/** An active job to edit: its one occurrence is the last storable instant, later than any clock here. */
async function seededJob(): Promise<{ id: string; version: number }> {
  const created = await create({ runAt: "9999-12-31T23:59:59.999Z" });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const job = JobSchema.parse(created.body);
  return { id: job.id, version: job.version };
}

describe("schedules past year 9999", () => {
  it("refuses an every longer than the storable range with 400 schedule.every, at create and edit", async () => {
    now = new Date();
    for (const every of ["P600000W", "P3000000D", "PT72000000H"]) {
      const created = await create({ every });
      expect(created.status, JSON.stringify(created.body)).toBe(400);
      expect(fieldOf(created)).toBe("schedule.every");
      const withStart = await create({ every, startAt: "2400-01-01T00:00:00Z" });
      expect(withStart.status, JSON.stringify(withStart.body)).toBe(400);
      expect(fieldOf(withStart)).toBe("schedule.every");
    }
    const { id, version } = await seededJob();
    const edited = await send(
      "PATCH",
      `/jobs/${id}`,
      { schedule: { every: "P600000W" } },
      `"${version}"`,
    );
    expect(edited.status, JSON.stringify(edited.body)).toBe(400);
    expect(fieldOf(edited)).toBe("schedule.every");
    const after = await send("GET", `/jobs/${id}`, undefined);
    expect(JobSchema.parse(after.body).version).toBe(version);
  });

  it("an every whose next occurrence falls past 9999 ends at its last storable one (create)", async () => {
    now = new Date("9999-12-31T23:30:00.000Z");
    const created = await create({ every: "PT1H" });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const job = JobSchema.parse(created.body);
    expect(job.nextRunAt).toBeNull();
    const runs = (await fixture.runs()).filter((r) => r.jobId === job.id);
    expect(runs.map((r) => r.scheduledFor)).toEqual(["9999-12-31T23:30:00.000Z"]);
  });

  it("a long every with a late startAt is accepted and ends after its storable occurrences", async () => {
    now = new Date("9999-12-31T23:50:00.000Z");
    const created = await create({ every: "P400000W", startAt: "9999-12-31T23:51:00Z" });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const job = JobSchema.parse(created.body);
    expect(job.nextRunAt).toBeNull();
    const runs = (await fixture.runs()).filter((r) => r.jobId === job.id);
    expect(runs.map((r) => r.scheduledFor)).toEqual(["9999-12-31T23:51:00.000Z"]);
  });

  it("a cron west of UTC stops at the last local time that lands in year 9999 (create and edit)", async () => {
    now = new Date("9999-12-31T23:44:00.000Z");
    // 18:45 in New York is 23:45Z; 19:00 would be 10000-01-01T00:00Z.
    const schedule = { cron: "*/15 * * * *", timezone: "America/New_York" };
    const created = await create(schedule);
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const job = JobSchema.parse(created.body);
    expect(job.nextRunAt).toBeNull();
    const runs = (await fixture.runs()).filter((r) => r.jobId === job.id);
    expect(runs.map((r) => r.scheduledFor)).toEqual(["9999-12-31T23:45:00.000Z"]);

    const { id, version } = await seededJob();
    const edited = await send("PATCH", `/jobs/${id}`, { schedule }, `"${version}"`);
    expect(edited.status, JSON.stringify(edited.body)).toBe(200);
    expect(JobSchema.parse(edited.body).nextRunAt).toBeNull();
  });

  it("an edit to an every due now at the end of the range is a 200, not a half-applied 500", async () => {
    now = new Date("9999-12-31T23:59:00.000Z");
    const { id, version } = await seededJob();
    const edited = await send(
      "PATCH",
      `/jobs/${id}`,
      { schedule: { every: "PT1M" } },
      `"${version}"`,
    );
    expect(edited.status, JSON.stringify(edited.body)).toBe(200);
    const job = JobSchema.parse(edited.body);
    expect(job.version).toBe(version + 1);
    expect(job.nextRunAt).toBeNull();
    // The seed's own one-off was claimed at create; the edit adds the new schedule's only run.
    const runs = (await fixture.runs()).filter((r) => r.jobId === id);
    expect(runs.map((r) => r.scheduledFor).sort()).toEqual([
      "9999-12-31T23:59:00.000Z",
      "9999-12-31T23:59:59.999Z",
    ]);
  });

  it("the last storable instant itself is a valid runAt and startAt; one millisecond later is not", async () => {
    now = new Date("9999-12-31T23:58:00.000Z");
    const last = "9999-12-31T23:59:59.999Z";
    const runAt = await create({ runAt: last });
    expect(runAt.status, JSON.stringify(runAt.body)).toBe(201);
    const every = await create({ every: "PT1S", startAt: last });
    expect(every.status, JSON.stringify(every.body)).toBe(201);
    const later = await create({ runAt: "9999-12-31T23:59:59.999-00:01" });
    expect(later.status).toBe(400);
    expect(fieldOf(later)).toBe("schedule.runAt");
    const laterStart = await create({ every: "PT1S", startAt: "9999-12-31T23:59:59.999-00:01" });
    expect(laterStart.status).toBe(400);
    expect(fieldOf(laterStart)).toBe("schedule.startAt");
  });
});
