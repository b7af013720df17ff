import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { scanTable, withoutUsageChanges } from "../support/namespace.js";
import {
  type ApiHarness,
  createdVia,
  expectError,
  jobVia,
  KEY_B,
  startApi,
  TENANT_A,
} from "./support.js";

const MINUTE = 60_000;
/** What the skip policy records for an occurrence missed past the grace (60 s by default). */
const SKIP_REASON = "misfire: missed by more than the 60 s grace; policy skip";

/**
 * An edit of a job whose end came during a dispatcher outage (a one-off's `runAt`, a recurring
 * job's `maxRuns` or `endAt` passed with no pass run): the edit decides what the old schedule had
 * due under its misfire policy, which ends the job, so the edit itself is refused. The refusal
 * says so, and what it leaves is what a dispatcher's pass would have left.
 */
let api: ApiHarness;
/** The API's clock: each test moves it past the outage it stages. */
let now = Date.now();

beforeAll(async () => {
  api = await startApi({ clock: () => new Date(now) });
  // Quotas that apply, so an edit reserves its share of them before its claim.
  const quotas = { activeJobs: 1000, runsPerMinute: 100_000 };
  const set = await api.call("PUT", `/tenants/${TENANT_A}/quotas`, { body: quotas });
  expect(set.status, set.text).toBe(200);
});
afterAll(() => api.close());

/** Every item of every table. */
const stored = async () => {
  const { engine } = api.fixture;
  const [jobs, runs, secrets] = await Promise.all([
    scanTable(engine.doc, engine.tables.jobs),
    scanTable(engine.doc, engine.tables.runs),
    scanTable(engine.doc, engine.tables.webhookSecrets),
  ]);
  return { jobs: withoutUsageChanges(jobs), runs, secrets };
};

const created = (body: Record<string, unknown>) => createdVia(api, body);

async function runsOf(jobId: string) {
  const reply = await api.call("GET", `/jobs/${jobId}/runs`);
  expect(reply.status, reply.text).toBe(200);
  return RunPageSchema.parse(reply.body)
    .items.map((r) => ({ scheduledFor: r.scheduledFor, status: r.status, reason: r.reason }))
    .sort((a, b) => (a.scheduledFor < b.scheduledFor ? -1 : 1));
}

const jobOf = (jobId: string) => jobVia(api, jobId);

const edit = (jobId: string, body: Record<string, unknown>) =>
  api.call("PATCH", `/jobs/${jobId}`, { body, headers: { "If-Match": '"1"' } });

/** The tenant's quota usage item (`QUOTA#<tenant>`/`USAGE`, shared/storage/tenant-quotas.ts). */
const usage = async () =>
  (await stored()).jobs.find((i) => i.pk === `QUOTA#${TENANT_A}` && i.sk === "USAGE");

/**
 * Asserts the refusal of `body` as an edit at version 1 and its repeat: one 409, the same body
 * twice, the repeat writing nothing at all.
 */
async function refusedTwice(jobId: string, body: Record<string, unknown>, message: string) {
  const reply = await edit(jobId, body);
  const error = expectError(reply, 409, { code: "illegal_transition" });
  expect(error.message).toBe(message);
  expect(reply.body).toMatchObject({ error: { currentStatus: "completed" } });
  const after = await stored();
  const repeat = await edit(jobId, body);
  expect(repeat.status).toBe(409);
  expect(repeat.body).toEqual(reply.body);
  expect(await stored()).toEqual(after);
}

describe("an edit of a job whose end passed during a dispatcher outage", () => {
  it("a one-off under skip moved to a new runAt: its occurrence is recorded skipped and the job completed, as a pass would have; the 409 says so, and a repeat answers the same", async () => {
    const createdAt = Math.ceil((Date.now() + 10 * MINUTE) / MINUTE) * MINUTE;
    now = createdAt;
    const runAt = new Date(createdAt + 10 * MINUTE).toISOString();
    const job = await created({ type: "noop", schedule: { runAt }, misfirePolicy: "skip" });
    const usageBefore = await usage();
    // No dispatcher pass runs past runAt; five minutes later the tenant moves the job.
    now = createdAt + 15 * MINUTE;
    const moveTo = { schedule: { runAt: new Date(now + 60 * MINUTE).toISOString() } };
    await refusedTwice(
      job.id,
      moveTo,
      `cannot edit the job: it is completed: its last occurrence, due at ${runAt}, was skipped (${SKIP_REASON})`,
    );
    expect(await usage()).toBeDefined();
    expect(await runsOf(job.id)).toEqual([
      { scheduledFor: runAt, status: "skipped", reason: SKIP_REASON },
    ]);
    expect(await jobOf(job.id)).toMatchObject({
      status: "completed",
      version: 1,
      schedule: { runAt },
      nextRunAt: null,
    });
    expect(await usage()).toEqual(usageBefore);
  });

  it("a completed one-off triggered since: the 409 still names the occurrence the job completed with, not the triggered run", async () => {
    const createdAt = Math.ceil((Date.now() + 120 * MINUTE) / MINUTE) * MINUTE;
    now = createdAt;
    const runAt = new Date(createdAt + 10 * MINUTE).toISOString();
    const job = await created({ type: "noop", schedule: { runAt }, misfirePolicy: "skip" });
    now = createdAt + 15 * MINUTE;
    const moveTo = { schedule: { runAt: new Date(now + 60 * MINUTE).toISOString() } };
    const message = `cannot edit the job: it is completed: its last occurrence, due at ${runAt}, was skipped (${SKIP_REASON})`;
    const first = expectError(await edit(job.id, moveTo), 409, { code: "illegal_transition" });
    expect(first.message).toBe(message);
    // A completed job may still be triggered: its run is no occurrence, and did not complete it.
    now += MINUTE;
    const triggered = await api.call("POST", `/jobs/${job.id}/trigger`);
    expect(triggered.status, triggered.text).toBe(202);
    const runs = await runsOf(job.id);
    expect(runs.map((r) => r.status)).toEqual(["skipped", "queued"]);
    await refusedTwice(job.id, moveTo, message);
    // Another tenant's edit of it finds no job: nothing of its runs is named.
    const stranger = await api.call("PATCH", `/jobs/${job.id}`, {
      key: KEY_B,
      body: moveTo,
      headers: { "If-Match": '"1"' },
    });
    const hidden = expectError(stranger, 404, { code: "not_found" });
    expect(hidden.message).not.toContain(runAt);
  });

  it.each(["fire_once", "fire_all"] as const)(
    "a one-off under %s moved to a new runAt: its occurrence gets its run, and the job stays active for the new time",
    async (misfirePolicy) => {
      const createdAt = Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE;
      now = createdAt;
      const runAt = new Date(createdAt + 10 * MINUTE).toISOString();
      const job = await created({ type: "noop", schedule: { runAt }, misfirePolicy });
      now = createdAt + 15 * MINUTE;
      const movedTo = new Date(now + 60 * MINUTE).toISOString();
      const reply = await edit(job.id, { schedule: { runAt: movedTo } });
      expect(reply.status, reply.text).toBe(200);
      expect(await runsOf(job.id)).toEqual([
        { scheduledFor: runAt, status: "queued", reason: null },
      ]);
      expect(await jobOf(job.id)).toMatchObject({
        status: "active",
        version: 2,
        nextRunAt: movedTo,
      });
    },
  );

  it.each(["skip", "fire_once"] as const)(
    "a recurring job under %s whose maxRuns was reached, given a new schedule: the old schedule's occurrences are decided and the job completed; the 409 says so, and a repeat answers the same",
    async (misfirePolicy) => {
      const createdAt = Math.ceil((Date.now() + 60 * MINUTE) / MINUTE) * MINUTE;
      const minute = (m: number) => new Date(createdAt + m * MINUTE).toISOString();
      now = createdAt;
      const job = await created({
        type: "noop",
        schedule: { every: "PT1M", startAt: minute(10) },
        maxRuns: 1,
        misfirePolicy,
      });
      const usageBefore = await usage();
      // No dispatcher pass runs from minute 10 to 20, when the schedule is edited.
      now = createdAt + 20 * MINUTE;
      await refusedTwice(
        job.id,
        // Every second: more than the job counted towards runsPerMinute, so the edit reserves.
        { schedule: { every: "PT1S" } },
        `cannot edit the job: it is completed: its last occurrence, due at ${minute(misfirePolicy === "skip" ? 19 : 18)}, was queued`,
      );
      const runs = await runsOf(job.id);
      expect(runs.map((r) => r.scheduledFor)).toEqual(
        Array.from({ length: misfirePolicy === "skip" ? 10 : 9 }, (_, k) => minute(10 + k)),
      );
      // skip: each missed past the grace is skipped, the one a minute late (within it) runs;
      // fire_once: the latest missed runs instead of the others. maxRuns 1 ends the job there.
      const queued = misfirePolicy === "skip" ? minute(19) : minute(18);
      expect(runs.filter((r) => r.status === "queued").map((r) => r.scheduledFor)).toEqual([
        queued,
      ]);
      expect(runs.filter((r) => r.status === "skipped")).toHaveLength(
        misfirePolicy === "skip" ? 9 : 8,
      );
      expect(await jobOf(job.id)).toMatchObject({
        status: "completed",
        version: 1,
        nextRunAt: null,
        occurrencesQueued: 1,
      });
      expect(await usage()).toEqual(usageBefore);
    },
  );

  it.each(["skip", "fire_once"] as const)(
    "a recurring job under %s whose endAt passed, given a new schedule alone: the old schedule's occurrences up to endAt are decided and the job completed; the 409 says so, and a repeat answers the same",
    async (misfirePolicy) => {
      const createdAt = Math.ceil((Date.now() + 150 * MINUTE) / MINUTE) * MINUTE;
      const minute = (m: number) => new Date(createdAt + m * MINUTE).toISOString();
      now = createdAt;
      const job = await created({
        type: "noop",
        schedule: { every: "PT1M", startAt: minute(10) },
        endAt: minute(15),
        misfirePolicy,
      });
      const usageBefore = await usage();
      // No dispatcher pass runs from minute 10 to 20; the edit sends no endAt.
      now = createdAt + 20 * MINUTE;
      const last = misfirePolicy === "skip" ? `skipped (${SKIP_REASON})` : "queued";
      await refusedTwice(
        job.id,
        { schedule: { every: "PT1S" } },
        `cannot edit the job: it is completed: its last occurrence, due at ${minute(15)}, was ${last}`,
      );
      const runs = await runsOf(job.id);
      // Nothing after endAt is decided: skip records each occurrence missed past the grace,
      // fire_once runs the latest of them.
      expect(runs.map((r) => r.scheduledFor)).toEqual(
        Array.from({ length: 6 }, (_, k) => minute(10 + k)),
      );
      expect(runs.filter((r) => r.status === "queued").map((r) => r.scheduledFor)).toEqual(
        misfirePolicy === "skip" ? [] : [minute(15)],
      );
      expect(await jobOf(job.id)).toMatchObject({
        status: "completed",
        version: 1,
        endAt: minute(15),
        schedule: { every: "PT1M" },
        nextRunAt: null,
      });
      expect(await usage()).toEqual(usageBefore);
    },
  );

  it("a recurring job whose endAt passed while its pending occurrence's planned time (jitter) has not come: the edit is a 409 naming the endAt, writing nothing, until that time decides it", async () => {
    const createdAt = Math.ceil((Date.now() + 180 * MINUTE) / MINUTE) * MINUTE;
    const minute = (m: number) => new Date(createdAt + m * MINUTE).toISOString();
    now = createdAt;
    const body = {
      type: "noop",
      schedule: { every: "PT1H", startAt: minute(60) },
      window: "PT50M",
      endAt: minute(60),
      misfirePolicy: "skip",
    };
    // The job id hashes the offset of the occurrence's planned time: one at least a minute late.
    let found: { id: string; dueAt: number } | undefined;
    for (let tries = 0; found === undefined && tries < 20; tries++) {
      const job = await created(body);
      const entry = (await stored()).jobs.find(
        (i) => String(i.pk).startsWith("DUE#") && i.jobId === job.id,
      );
      const dueAt = Date.parse(String(entry?.dueAt));
      if (dueAt - Date.parse(minute(60)) >= MINUTE) found = { id: job.id, dueAt };
    }
    if (found === undefined)
      throw new Error("no job planned a minute or more after its occurrence");
    const { id, dueAt } = found;
    const moveTo = { schedule: { every: "PT2H" } };
    now = dueAt - 30_000;
    const before = await stored();
    const reply = await edit(id, moveTo);
    const error = expectError(reply, 409, { code: "illegal_transition" });
    expect(error.message).toBe(
      `cannot edit the job: its endAt, ${minute(60)}, has passed: its pending occurrence, due at ${minute(60)}, is decided at its planned time, and the job ends with it`,
    );
    expect(reply.body).toMatchObject({ error: { currentStatus: "active" } });
    expect(await stored()).toEqual(before);
    const repeat = await edit(id, moveTo);
    expect(repeat.body).toEqual(reply.body);
    expect(await stored()).toEqual(before);
    // Its planned time come, the edit decides it (within the grace: it runs) and ends the job.
    now = dueAt + 30_000;
    await refusedTwice(
      id,
      moveTo,
      `cannot edit the job: it is completed: its last occurrence, due at ${minute(60)}, was queued`,
    );
    expect(await runsOf(id)).toEqual([
      { scheduledFor: minute(60), status: "queued", reason: null },
    ]);
  });

  it("an edit refused over runsPerMinute (403) after the outage decides nothing: the old schedule's occurrences wait for the dispatcher", async () => {
    const createdAt = Math.ceil((Date.now() + 90 * MINUTE) / MINUTE) * MINUTE;
    const minute = (m: number) => new Date(createdAt + m * MINUTE).toISOString();
    now = createdAt;
    const job = await created({
      type: "noop",
      schedule: { every: "PT1M", startAt: minute(10) },
      misfirePolicy: "skip",
    });
    const lowered = { activeJobs: 1000, runsPerMinute: 1 };
    const set = await api.call("PUT", `/tenants/${TENANT_A}/quotas`, { body: lowered });
    expect(set.status, set.text).toBe(200);
    try {
      now = createdAt + 20 * MINUTE;
      const before = await stored();
      const reply = await edit(job.id, { schedule: { every: "PT1S" } });
      expectError(reply, 403, { code: "quota_exceeded" });
      expect(await runsOf(job.id)).toEqual([]);
      const after = await stored();
      // Documented bookkeeping: the quota change dropped the tenant's usage, and a refusal over
      // the quota recounts it first (shared/quotas/usage.ts): every other item is as it was.
      const notUsage = (items: Record<string, unknown>[]) =>
        items.filter((i) => !(String(i.pk).startsWith("QUOTA#") && i.sk === "USAGE"));
      expect(notUsage(after.jobs)).toEqual(notUsage(before.jobs));
      expect(after.runs).toEqual(before.runs);
    } finally {
      const back = { activeJobs: 1000, runsPerMinute: 100_000 };
      await api.call("PUT", `/tenants/${TENANT_A}/quotas`, { body: back });
    }
  });
});
