import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { tickOnce } from "../../shared/dispatch/tick.js";
import { scanTable, withoutUsageChanges } from "../support/namespace.js";
import { type ApiHarness, createdVia, expectError, jobVia, runOnce, startApi } from "./support.js";

const MINUTE = 60_000;

/**
 * A schedule edit that sends no `endAt` keeps the job's: once that `endAt` has passed, the kept
 * end leaves the new schedule nothing to run. An active job's edit decides the old schedule's
 * occurrences up to it (test/api/edit-after-outage); a paused job's, which no claim decides, is
 * refused and writes nothing, its pending occurrence left for the resume to decide. What the
 * active job's edit decides is what a dispatcher's pass racing it would (one decision per
 * occurrence), and nothing it records or names lies after the `endAt`.
 */
let api: ApiHarness;
let now = Date.now();

beforeAll(async () => {
  api = await startApi({ clock: () => new Date(now) });
  // Quotas that apply, so the edit reserves its share before it is refused (and gives it back).
  const quotas = { activeJobs: 1000, runsPerMinute: 100_000 };
  const set = await api.call("PUT", "/tenants/tenant-a/quotas", { body: quotas });
  expect(set.status, set.text).toBe(200);
});
afterAll(() => api.close());

const stored = async () => {
  const { engine } = api.fixture;
  const [jobs, runs] = await Promise.all([
    scanTable(engine.doc, engine.tables.jobs),
    scanTable(engine.doc, engine.tables.runs),
  ]);
  return { jobs: withoutUsageChanges(jobs), runs };
};

async function runsOf(jobId: string) {
  const reply = await api.call("GET", `/jobs/${jobId}/runs`);
  expect(reply.status, reply.text).toBe(200);
  return RunPageSchema.parse(reply.body)
    .items.map((r) => ({ scheduledFor: r.scheduledFor, status: r.status }))
    .sort((a, b) => (a.scheduledFor < b.scheduledFor ? -1 : 1));
}

/** A whole minute `ahead` minutes from now, each test's own, and the instant `m` minutes after it. */
function minutesFrom(ahead: number) {
  const createdAt = Math.ceil((Date.now() + ahead * MINUTE) / MINUTE) * MINUTE;
  return { createdAt, minute: (m: number) => new Date(createdAt + m * MINUTE).toISOString() };
}

const edit = (jobId: string, body: Record<string, unknown>, version = 1) =>
  api.call("PATCH", `/jobs/${jobId}`, { body, headers: { "If-Match": `"${version}"` } });

describe("a schedule edit of a paused job whose kept endAt has passed", () => {
  it.each([
    ["every", { every: "PT1S" }],
    ["runAt", { runAt: "later" }],
  ] as const)(
    "given a new %s schedule alone: a 409 naming the endAt, nothing written; the resume then runs the last occurrence up to endAt (fire_once) and completes the job",
    async (kind, shape) => {
      const { createdAt, minute } = minutesFrom(kind === "every" ? 10 : 40);
      now = createdAt;
      const job = await createdVia(api, {
        type: "noop",
        schedule: { every: "PT1M", startAt: minute(10) },
        endAt: minute(15),
        misfirePolicy: "fire_once",
      });
      const paused = await api.call("POST", `/jobs/${job.id}/pause`);
      expect(paused.status, paused.text).toBe(200);
      now = createdAt + 20 * MINUTE;
      const schedule = "runAt" in shape ? { runAt: minute(60) } : shape;
      const before = await stored();
      const reply = await edit(job.id, { schedule });
      const error = expectError(reply, 409, { code: "illegal_transition" });
      expect(error.message).toBe(
        `cannot edit the job: its endAt, ${minute(15)}, has passed: send a new endAt, or null, with the new schedule`,
      );
      expect(reply.body).toMatchObject({ error: { currentStatus: "paused" } });
      expect(await stored()).toEqual(before);
      const repeat = await edit(job.id, { schedule });
      expect(repeat.body).toEqual(reply.body);
      expect(await stored()).toEqual(before);
      const resumed = await api.call("POST", `/jobs/${job.id}/resume`);
      expect(resumed.status, resumed.text).toBe(200);
      // fire_once: the latest occurrence up to endAt runs, those before it are recorded skipped.
      const runs = await runsOf(job.id);
      expect(runs.map((r) => r.scheduledFor)).toEqual(
        Array.from({ length: 6 }, (_, k) => minute(10 + k)),
      );
      expect(runs.filter((r) => r.status !== "skipped")).toEqual([
        { scheduledFor: minute(15), status: "queued" },
      ]);
      expect(await jobVia(api, job.id)).toMatchObject({ status: "completed", nextRunAt: null });
    },
  );

  it("given a new schedule with endAt null: taken as before, the job paused for it", async () => {
    const { createdAt, minute } = minutesFrom(70);
    now = createdAt;
    const job = await createdVia(api, {
      type: "noop",
      schedule: { every: "PT1M", startAt: minute(10) },
      endAt: minute(15),
    });
    expect((await api.call("POST", `/jobs/${job.id}/pause`)).status).toBe(200);
    now = createdAt + 20 * MINUTE;
    const reply = await edit(job.id, { schedule: { every: "PT2M" }, endAt: null });
    expect(reply.status, reply.text).toBe(200);
    expect(await jobVia(api, job.id)).toMatchObject({
      status: "paused",
      version: 2,
      endAt: null,
      nextRunAt: minute(20),
    });
  });
});

describe("an active job's kept endAt passed during an outage, its edit racing the dispatcher's pass", () => {
  it("one decision per occurrence up to endAt, the job completed, the edit the completed job's 409, and the dependent run once when the last occurrence's run succeeds", async () => {
    const { createdAt, minute } = minutesFrom(100);
    now = createdAt;
    const upstream = await createdVia(api, {
      type: "noop",
      schedule: { every: "PT1M", startAt: minute(10) },
      endAt: minute(15),
      misfirePolicy: "fire_once",
    });
    const dependent = await createdVia(api, {
      type: "noop",
      schedule: { after: { jobs: [upstream.id] } },
    });
    now = createdAt + 20 * MINUTE;
    const moveTo = { schedule: { every: "PT1S" } };
    const [, reply] = await Promise.all([
      tickOnce(api.fixture.engine, "racing-pass"),
      edit(upstream.id, moveTo),
    ]);
    const message = `cannot edit the job: it is completed: its last occurrence, due at ${minute(15)}, was queued`;
    expect(expectError(reply, 409, { code: "illegal_transition" }).message).toBe(message);
    const repeat = await edit(upstream.id, moveTo);
    expect(repeat.body).toEqual(reply.body);
    const runs = await runsOf(upstream.id);
    expect(runs.map((r) => r.scheduledFor)).toEqual(
      Array.from({ length: 6 }, (_, k) => minute(10 + k)),
    );
    expect(runs.filter((r) => r.status !== "skipped")).toEqual([
      { scheduledFor: minute(15), status: "queued" },
    ]);
    expect(await jobVia(api, upstream.id)).toMatchObject({
      status: "completed",
      version: 1,
      nextRunAt: null,
    });
    // Its run succeeds: the dependent is run once, a later pass adding none.
    await runOnce(api, upstream.id);
    await tickOnce(api.fixture.engine, "later-pass");
    expect((await runsOf(dependent.id)).map((r) => r.status)).toHaveLength(1);
  });
});

describe("an active job under fire_all whose endAt passed during an outage longer than its catch-up cap", () => {
  it.each([
    ["past the cap", 20 * 60],
    ["exactly at the cap", 999],
  ] as const)(
    "its endAt %s: the edit's 409 names the occurrence recorded at the cap, no occurrence after endAt recorded or named",
    async (kind, endAfterSeconds) => {
      const { createdAt, minute } = minutesFrom(kind === "past the cap" ? 200 : 260);
      const endAt = new Date(createdAt + 10 * MINUTE + endAfterSeconds * 1000).toISOString();
      now = createdAt;
      const job = await createdVia(api, {
        type: "noop",
        schedule: { every: "PT1S", startAt: minute(10) },
        endAt,
        misfirePolicy: "fire_all",
      });
      now = createdAt + 40 * MINUTE;
      const reply = await edit(job.id, { schedule: { every: "PT1M" } });
      const error = expectError(reply, 409, { code: "illegal_transition" });
      const runs = (await stored()).runs.filter((r) => r.jobId === job.id);
      const latest = runs
        .map((r) => String(r.scheduledFor))
        .sort()
        .at(-1);
      expect(latest !== undefined && latest <= endAt, `latest ${latest}, endAt ${endAt}`).toBe(
        true,
      );
      const named = [...error.message.matchAll(/\d{4}-\d\d-\d\dT[\d:.]+Z/g)].map((m) => m[0]);
      expect(named.length).toBeGreaterThan(0);
      for (const instant of named)
        expect(instant <= endAt, `${instant} in ${error.message}`).toBe(true);
      expect(await jobVia(api, job.id)).toMatchObject({ status: "completed", version: 1 });
    },
    60_000,
  );
});
