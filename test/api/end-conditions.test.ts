import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ApiHarness, expectError, inMinutes, startApi } from "./support.js";

/** A recurring job far enough ahead that no run of it is claimed during the test. */
const recurring = (overrides: Record<string, unknown> = {}) => ({
  type: "noop",
  schedule: { every: "PT1H", startAt: inMinutes(24 * 60) },
  ...overrides,
});

describe("endAt and maxRuns", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  it("a created job shows them, with the occurrences queued so far", async () => {
    const endAt = inMinutes(30 * 24 * 60);
    const created = await api.call("POST", "/jobs", {
      body: recurring({ endAt, maxRuns: 10 }),
    });
    expect(created.status, created.text).toBe(201);
    expect(created.body).toMatchObject({
      status: "active",
      endAt: new Date(endAt).toISOString(),
      maxRuns: 10,
      occurrencesQueued: 0,
    });
    const plain = await api.call("POST", "/jobs", { body: recurring() });
    expect(plain.body).toMatchObject({ endAt: null, maxRuns: null, occurrencesQueued: 0 });
  });

  it("400 naming endAt: in the past, before startAt, not an instant, or on a one-off", async () => {
    expectError(
      await api.call("POST", "/jobs", { body: recurring({ endAt: inMinutes(-1) }) }),
      400,
      { code: "validation_failed", field: "endAt" },
    );
    expectError(
      await api.call("POST", "/jobs", {
        body: recurring({
          schedule: { every: "PT1H", startAt: inMinutes(120) },
          endAt: inMinutes(60),
        }),
      }),
      400,
      { field: "endAt" },
    );
    expectError(
      await api.call("POST", "/jobs", { body: recurring({ endAt: "next tuesday" }) }),
      400,
      { field: "endAt" },
    );
    expectError(
      await api.call("POST", "/jobs", {
        body: { type: "noop", schedule: { runAt: inMinutes(60) }, endAt: inMinutes(120) },
      }),
      400,
      { field: "endAt" },
    );
  });

  it("400 naming endAt before the schedule's first occurrence: the job would never run (create, batch and preview)", async () => {
    // 29 February: the next is 2028's, long after the hour this endAt leaves.
    const body = {
      type: "noop",
      schedule: { cron: "0 0 29 2 *", timezone: "America/New_York" },
      endAt: inMinutes(60),
    };
    const before = (await api.fixture.jobs()).length;
    const refused = expectError(await api.call("POST", "/jobs", { body }), 400, {
      code: "validation_failed",
      field: "endAt",
    });
    expect(refused.message).toMatch(/first occurrence \(2028-02-29T05:00:00\.000Z\)/);
    const batch = await api.call("POST", "/jobs:batch", { body: { jobs: [body] } });
    expect(batch.body).toMatchObject({
      results: [{ status: 400, error: { code: "validation_failed", field: "endAt" } }],
    });
    expect((await api.fixture.jobs()).length).toBe(before);
    expectError(
      await api.call("POST", "/schedules/preview", {
        body: { schedule: body.schedule, endAt: body.endAt },
      }),
      400,
      { field: "endAt" },
    );
    // Its first occurrence exactly at endAt runs: accepted.
    const atFirst = await api.call("POST", "/jobs", {
      body: { ...body, endAt: "2028-02-29T00:00:00-05:00" },
    });
    expect(atFirst.status, atFirst.text).toBe(201);
    expect(atFirst.body).toMatchObject({ status: "active", nextRunAt: "2028-02-29T05:00:00.000Z" });
  });

  it("400 naming maxRuns: below 1, not an integer, or on a one-off", async () => {
    for (const maxRuns of [0, -3, 1.5, "3"]) {
      expectError(await api.call("POST", "/jobs", { body: recurring({ maxRuns }) }), 400, {
        field: "maxRuns",
      });
    }
    expectError(
      await api.call("POST", "/jobs", {
        body: { type: "noop", schedule: { runAt: inMinutes(60) }, maxRuns: 1 },
      }),
      400,
      { field: "maxRuns" },
    );
    const jobs = await api.call("GET", "/jobs?limit=100");
    const bodies = (jobs.body as { items: { maxRuns: number | null }[] }).items;
    expect(bodies.some((j) => j.maxRuns === 0 || j.maxRuns === -3)).toBe(false);
  });

  it("400 naming the field for either on a job that runs after others (schedule.after)", async () => {
    const upstream = await api.call("POST", "/jobs", { body: recurring() });
    const after = { after: { jobs: [(upstream.body as { id: string }).id], on: "success" } };
    expectError(
      await api.call("POST", "/jobs", { body: { type: "noop", schedule: after, maxRuns: 2 } }),
      400,
      { field: "maxRuns" },
    );
    expectError(
      await api.call("POST", "/jobs", {
        body: { type: "noop", schedule: after, endAt: inMinutes(60) },
      }),
      400,
      { field: "endAt" },
    );
    const plain = await api.call("POST", "/jobs", { body: { type: "noop", schedule: after } });
    expect(plain.status, plain.text).toBe(201);
  });

  it("PATCH sets, changes and removes them, with the same checks", async () => {
    const created = await api.call("POST", "/jobs", { body: recurring() });
    const id = (created.body as { id: string }).id;
    const endAt = inMinutes(10 * 24 * 60);
    const edited = await api.call("PATCH", `/jobs/${id}`, {
      body: { endAt, maxRuns: 5 },
      headers: { "If-Match": '"1"' },
    });
    expect(edited.status, edited.text).toBe(200);
    expect(edited.body).toMatchObject({ endAt: new Date(endAt).toISOString(), maxRuns: 5 });
    expectError(
      await api.call("PATCH", `/jobs/${id}`, {
        body: { endAt: inMinutes(-5) },
        headers: { "If-Match": '"2"' },
      }),
      400,
      { field: "endAt" },
    );
    expectError(
      await api.call("PATCH", `/jobs/${id}`, {
        body: { maxRuns: 0 },
        headers: { "If-Match": '"2"' },
      }),
      400,
      { field: "maxRuns" },
    );
    // A schedule turned into a one-off cannot keep them.
    expectError(
      await api.call("PATCH", `/jobs/${id}`, {
        body: { schedule: { runAt: inMinutes(60) } },
        headers: { "If-Match": '"2"' },
      }),
      400,
      { field: "endAt" },
    );
    const cleared = await api.call("PATCH", `/jobs/${id}`, {
      body: { endAt: null, maxRuns: null },
      headers: { "If-Match": '"2"' },
    });
    expect(cleared.status, cleared.text).toBe(200);
    expect(cleared.body).toMatchObject({ endAt: null, maxRuns: null, version: 3 });
  });

  it("the job's preview stops at endAt and at maxRuns", async () => {
    const startAt = new Date(Date.parse(inMinutes(24 * 60)));
    const byEnd = await api.call("POST", "/jobs", {
      body: recurring({
        schedule: { every: "PT1H", startAt: startAt.toISOString() },
        endAt: new Date(startAt.getTime() + 2 * 3_600_000).toISOString(),
      }),
    });
    const endPreview = await api.call(
      "GET",
      `/jobs/${(byEnd.body as { id: string }).id}/preview?count=10`,
    );
    expect(
      (endPreview.body as { occurrences: { utc: string }[] }).occurrences.map((o) => o.utc),
    ).toEqual([0, 1, 2].map((h) => new Date(startAt.getTime() + h * 3_600_000).toISOString()));

    const byCount = await api.call("POST", "/jobs", {
      body: recurring({ schedule: { every: "PT1H", startAt: startAt.toISOString() }, maxRuns: 4 }),
    });
    const countPreview = await api.call(
      "GET",
      `/jobs/${(byCount.body as { id: string }).id}/preview?count=10`,
    );
    expect((countPreview.body as { occurrences: unknown[] }).occurrences).toHaveLength(4);
    // From a later instant, only what is left of the four.
    const from = new Date(startAt.getTime() + 2 * 3_600_000).toISOString();
    const laterPreview = await api.call(
      "GET",
      `/jobs/${(byCount.body as { id: string }).id}/preview?count=10&from=${from}`,
    );
    expect((laterPreview.body as { occurrences: unknown[] }).occurrences).toHaveLength(2);
  });

  it("a cancelled job's preview shows nothing: none of its schedule's times will run", async () => {
    const created = await api.call("POST", "/jobs", { body: recurring() });
    const id = (created.body as { id: string }).id;
    const before = await api.call("GET", `/jobs/${id}/preview?count=3`);
    expect((before.body as { occurrences: unknown[] }).occurrences).toHaveLength(3);

    expect((await api.call("POST", `/jobs/${id}/cancel`)).status).toBe(200);
    const after = await api.call("GET", `/jobs/${id}/preview?count=3`);
    expect(after.status, after.text).toBe(200);
    expect((after.body as { occurrences: unknown[] }).occurrences).toEqual([]);
  });

  it("POST /schedules/preview stops at endAt and maxRuns as a job created now would", async () => {
    const startAt = new Date(Date.parse(inMinutes(24 * 60)));
    const schedule = { every: "PT1H", startAt: startAt.toISOString() };
    const utcOf = (reply: { body: unknown }) =>
      (reply.body as { occurrences: { utc: string }[] }).occurrences.map((o) => o.utc);
    const hours = (n: number) =>
      Array.from({ length: n }, (_, h) =>
        new Date(startAt.getTime() + h * 3_600_000).toISOString(),
      );
    expect(
      utcOf(
        await api.call("POST", "/schedules/preview", { body: { schedule, count: 10, maxRuns: 3 } }),
      ),
    ).toEqual(hours(3));
    const endAt = new Date(startAt.getTime() + 4 * 3_600_000).toISOString();
    expect(
      utcOf(await api.call("POST", "/schedules/preview", { body: { schedule, count: 10, endAt } })),
    ).toEqual(hours(5));
    expectError(
      await api.call("POST", "/schedules/preview", {
        body: { schedule: { runAt: inMinutes(60) }, maxRuns: 2 },
      }),
      400,
      { field: "maxRuns" },
    );
  });

  it("a preview counts at most 20,000 occurrences to find where maxRuns ends: further on, 400 naming from", async () => {
    // Counting a per-second schedule's million occurrences one by one took the API a second of CPU
    // for one request, which any tenant could ask for again and again.
    const perSecond = { cron: "* * * * * *", timezone: "UTC" };
    const yearAhead = inMinutes(365 * 24 * 60);
    const occurrencesOf = (reply: { body: unknown }) =>
      (reply.body as { occurrences: unknown[] }).occurrences;
    const tooFar = { schedule: perSecond, maxRuns: 1_000_000, from: yearAhead, count: 100 };
    expectError(await api.call("POST", "/schedules/preview", { body: tooFar }), 400, {
      code: "validation_failed",
      field: "from",
    });
    const created = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: perSecond, maxRuns: 1_000_000 },
    });
    expect(created.status, created.text).toBe(201);
    const id = (created.body as { id: string }).id;
    expectError(
      await api.call("GET", `/jobs/${id}/preview?from=${encodeURIComponent(yearAhead)}`),
      400,
      { field: "from" },
    );
    // A maxRuns within the count is told exactly: it ends long before a year on.
    const ended = await api.call("POST", "/schedules/preview", {
      body: { ...tooFar, maxRuns: 20_000 },
    });
    expect(ended.status, ended.text).toBe(200);
    expect(occurrencesOf(ended)).toEqual([]);
    // So is a from within the count of the next run, under the larger maxRuns.
    const soon = await api.call("POST", "/schedules/preview", {
      body: { ...tooFar, from: inMinutes(60) },
    });
    expect(soon.status, soon.text).toBe(200);
    expect(occurrencesOf(soon)).toHaveLength(100);
  });

  it("a preview counts at most 50 years to find where maxRuns ends: a sparse cron further on, 400 naming from", async () => {
    // 20,000 occurrences of a cron on the 31st reach the year 4884: counting them took the API
    // 0.8 s of CPU for one request (a per-second schedule's 20,000, 45 ms), which any tenant could
    // ask for again and again.
    const yearsAhead = (years: number) => inMinutes(years * 365.25 * 24 * 60);
    const sparse = { cron: "0 0 0 31 * *", timezone: "Europe/Berlin" };
    const occurrencesOf = (reply: { body: unknown }) =>
      (reply.body as { occurrences: unknown[] }).occurrences;
    const tooFar = { schedule: sparse, maxRuns: 1_000_000, from: yearsAhead(60), count: 5 };
    expectError(await api.call("POST", "/schedules/preview", { body: tooFar }), 400, {
      code: "validation_failed",
      field: "from",
    });
    const created = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: sparse, maxRuns: 1_000_000 },
    });
    expect(created.status, created.text).toBe(201);
    const id = (created.body as { id: string }).id;
    expectError(
      await api.call("GET", `/jobs/${id}/preview?from=${encodeURIComponent(tooFar.from)}`),
      400,
      { field: "from" },
    );
    // A maxRuns reached within the span is told exactly, however far on from is.
    const ended = await api.call("POST", "/schedules/preview", {
      body: { ...tooFar, maxRuns: 100 },
    });
    expect(ended.status, ended.text).toBe(200);
    expect(occurrencesOf(ended)).toEqual([]);
    // So is a from within the span, under the larger maxRuns.
    const within = await api.call("POST", "/schedules/preview", {
      body: { ...tooFar, from: yearsAhead(40) },
    });
    expect(within.status, within.text).toBe(200);
    expect(occurrencesOf(within)).toHaveLength(5);
  });

  it("a job whose maxRuns is reached shows completed, and the edit that would extend it is refused", async () => {
    const created = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: { every: "PT1M" }, maxRuns: 2 },
    });
    expect(created.status, created.text).toBe(201);
    expect(created.body).toMatchObject({
      status: "completed",
      occurrencesQueued: 2,
      nextRunAt: null,
    });
    const id = (created.body as { id: string }).id;
    expect(
      (await api.call("GET", `/jobs/${id}/preview?count=5`)).body as { occurrences: unknown[] },
    ).toMatchObject({ occurrences: [] });
    expectError(
      await api.call("PATCH", `/jobs/${id}`, {
        body: { maxRuns: 5 },
        headers: { "If-Match": '"1"' },
      }),
      409,
    );
  });
});

describe("a paused job's preview under maxRuns", () => {
  // The API's clock: the tests move it past the pause, as hours of real time would.
  const T0 = Date.parse("2031-05-01T00:00:00.000Z");
  let now = new Date(T0 - 10_000);
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi({ clock: () => now });
  });
  afterAll(() => api.close());

  /** A job created at T0 - 10 s and paused then: its next run stays where the pause found it. */
  async function pausedJob(body: Record<string, unknown>) {
    now = new Date(T0 - 10_000);
    const created = await api.call("POST", "/jobs", { body: { type: "noop", ...body } });
    expect(created.status, created.text).toBe(201);
    const { id, occurrencesQueued } = created.body as { id: string; occurrencesQueued: number };
    expect((await api.call("POST", `/jobs/${id}/pause`)).status).toBe(200);
    return { id, queued: occurrencesQueued };
  }
  const previewAt = async (id: string, at: number, query = "count=10") => {
    now = new Date(at);
    const reply = await api.call("GET", `/jobs/${id}/preview?${query}`);
    expect(reply.status, reply.text).toBe(200);
    return (reply.body as { occurrences: { utc: string }[] }).occurrences.map((o) => o.utc);
  };
  /** The preview at `at` of a paused job, and the same preview once the job has resumed then. */
  const beforeAndAfterResume = async (id: string, at: number) => {
    const paused = await previewAt(id, at, "count=100");
    const resumed = await api.call("POST", `/jobs/${id}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    return { paused, resumed: await previewAt(id, at, "count=100") };
  };
  const minutesFrom = (start: number, n: number) =>
    Array.from({ length: n }, (_, m) => new Date(start + m * 60_000).toISOString());
  const perMinute = { every: "PT1M", startAt: new Date(T0).toISOString() };
  const TWO_HOURS = 2 * 3_600_000;

  it("counts what is left from where a resume now would go on: the occurrences the pause missed run as its misfire policy says", async () => {
    // The occurrence a minute before the resume (01:59) is exactly the misfire grace old: it is
    // on time, not missed, so under every policy it runs and counts.
    // skip: the missed occurrences are skipped, not counted; all that is left runs from then on.
    // The resume's own claims then agree: the job's preview once it is active is the same.
    const skip = await pausedJob({ schedule: perMinute, maxRuns: 40, misfirePolicy: "skip" });
    expect(skip.queued).toBeGreaterThan(0);
    expect(await beforeAndAfterResume(skip.id, T0 + TWO_HOURS)).toEqual({
      paused: minutesFrom(T0 + TWO_HOURS, 40 - skip.queued - 1),
      resumed: minutesFrom(T0 + TWO_HOURS, 40 - skip.queued - 1),
    });
    // fire_once: one missed occurrence (01:58) runs at resume and counts, beside 01:59; the rest
    // of what is left follows.
    const once = await pausedJob({ schedule: perMinute, maxRuns: 40, misfirePolicy: "fire_once" });
    expect(await beforeAndAfterResume(once.id, T0 + TWO_HOURS)).toEqual({
      paused: minutesFrom(T0 + TWO_HOURS, 40 - once.queued - 2),
      resumed: minutesFrom(T0 + TWO_HOURS, 40 - once.queued - 2),
    });
    // fire_all: every missed occurrence runs and counts: nothing is left for later ones.
    const all = await pausedJob({ schedule: perMinute, maxRuns: 40, misfirePolicy: "fire_all" });
    expect(await beforeAndAfterResume(all.id, T0 + TWO_HOURS)).toEqual({
      paused: [],
      resumed: [],
    });
  });

  it("a per-second job paused for hours previews without a from, under a maxRuns far ahead", async () => {
    const perSecond = await pausedJob({
      schedule: { cron: "* * * * * *", timezone: "UTC" },
      maxRuns: 1_000_000,
      misfirePolicy: "skip",
    });
    const later = T0 + 6 * 3_600_000;
    expect(await previewAt(perSecond.id, later, "count=3")).toEqual(
      [0, 1, 2].map((s) => new Date(later + s * 1000).toISOString()),
    );
  });
});

describe("a create repeated under its idempotency key once its end checks no longer hold", () => {
  // 09:59, a minute before the daily 10:00 the job runs at once, ending at 10:30.
  const T0 = Date.parse("2031-06-02T09:59:00.000Z");
  let now = new Date(T0);
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi({ clock: () => now });
  });
  afterAll(() => api.close());

  const body = {
    type: "noop",
    schedule: { cron: "0 10 * * *", timezone: "UTC" },
    endAt: "2031-06-02T10:30:00.000Z",
  };

  it("answers the job the create made (200), as any repeat does, when the schedule's next occurrence or the clock has passed endAt since", async () => {
    const headers = { "Idempotency-Key": "daily-until-half-past" };
    const created = await api.call("POST", "/jobs", { body, headers });
    expect(created.status, created.text).toBe(201);
    const { id } = created.body as { id: string };
    // 10:01: the next occurrence is tomorrow's, after endAt; 10:31: endAt has passed.
    for (const at of ["2031-06-02T10:01:00.000Z", "2031-06-02T10:31:00.000Z"]) {
      now = new Date(at);
      const repeat = await api.call("POST", "/jobs", { body, headers });
      expect({ at, status: repeat.status, id: (repeat.body as { id?: string }).id }).toEqual({
        at,
        status: 200,
        id,
      });
      const batch = await api.call("POST", "/jobs:batch", {
        body: { jobs: [{ ...body, idempotencyKey: "daily-until-half-past" }] },
      });
      expect(batch.body).toMatchObject({ results: [{ status: 200, job: { id } }] });
      // Another body under the key is the conflict it always is.
      expectError(
        await api.call("POST", "/jobs", { body: { ...body, payload: { other: true } }, headers }),
        409,
        { code: "idempotency_conflict" },
      );
    }
    // A key that made no job: the body is judged now, and refused.
    expectError(
      await api.call("POST", "/jobs", { body, headers: { "Idempotency-Key": "never-used" } }),
      400,
      { field: "endAt" },
    );
    expect((await api.fixture.jobs()).length).toBe(1);
  });
});
