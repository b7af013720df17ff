import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunSchema } from "../../shared/api/schemas/runs.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { JOB_TYPES } from "./support.js";

/**
 * A triggered run's occurrence is the instant of the trigger, and (job, occurrence, attempt) is a
 * run's key. Two triggers in one millisecond, or a trigger at the very instant of an occurrence
 * the dispatcher already claimed, used to collide on that key and answer 500.
 */
const KEY = "trigger-key";
let fixture: EngineFixture;
let app: ReturnType<typeof createApiApp>;
let now = new Date("2030-01-01T00:00:00.000Z");

beforeAll(async () => {
  fixture = await createEngineFixture({ clock: () => now });
  app = createApiApp({
    engine: fixture.engine,
    jobTypes: JOB_TYPES,
    authenticate: bearerAuthenticator(new Map([[KEY, "tenant-trigger"]])),
  });
});
afterAll(() => fixture.destroy());

async function send(
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
) {
  const response = await app.request(path, {
    method,
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json", ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, text: await response.text() };
}

async function createJob(schedule: unknown): Promise<string> {
  const created = await send("POST", "/jobs", { type: "noop", schedule });
  expect(created.status, created.text).toBe(201);
  return JobSchema.parse(JSON.parse(created.text)).id;
}

describe("POST /jobs/{id}/trigger", () => {
  it("two triggers in the same millisecond are two runs, one millisecond apart", async () => {
    now = new Date("2030-01-01T00:00:00.500Z");
    const id = await createJob({ runAt: "2031-01-01T00:00:00Z" });
    const answers = await Promise.all([
      send("POST", `/jobs/${id}/trigger`),
      send("POST", `/jobs/${id}/trigger`),
      send("POST", `/jobs/${id}/trigger`),
    ]);
    for (const answer of answers) expect(answer.status, answer.text).toBe(202);
    const instants = answers.map((a) => RunSchema.parse(JSON.parse(a.text)).scheduledFor).sort();
    expect(instants).toEqual([
      "2030-01-01T00:00:00.500Z",
      "2030-01-01T00:00:00.501Z",
      "2030-01-01T00:00:00.502Z",
    ]);
  });

  it("a trigger moved a millisecond on for a same-millisecond twin is due at its occurrence, not before: its worker starts it no earlier", async () => {
    now = new Date("2030-01-01T00:00:01.500Z");
    const id = await createJob({ runAt: "2031-01-01T00:00:00Z" });
    const first = await send("POST", `/jobs/${id}/trigger`);
    const twin = await send("POST", `/jobs/${id}/trigger`);
    expect(twin.status, twin.text).toBe(202);
    const run = RunSchema.parse(JSON.parse(twin.text));
    expect([RunSchema.parse(JSON.parse(first.text)).scheduledFor, run.scheduledFor]).toEqual([
      "2030-01-01T00:00:01.500Z",
      "2030-01-01T00:00:01.501Z",
    ]);
    // The worker waits for its message's dueAt (never past it) before it starts the run.
    expect(run.dueAt).toBe(run.scheduledFor);
    const delivered = await fixture.nextDeliveryOfRun({
      jobId: id,
      scheduledFor: run.scheduledFor,
      attempt: 1,
    });
    expect(delivered.message.dueAt).toBe(run.scheduledFor);
  });

  it("a trigger at the instant of an occurrence already claimed is a run of its own", async () => {
    now = new Date("2030-01-02T00:00:00.000Z");
    // Created on the second, a per-second job's occurrences from now on are claimed at once.
    const id = await createJob({ cron: "* * * * * *", timezone: "UTC" });
    const triggered = await send("POST", `/jobs/${id}/trigger`);
    expect(triggered.status, triggered.text).toBe(202);
    expect(RunSchema.parse(JSON.parse(triggered.text)).scheduledFor).toBe(
      "2030-01-02T00:00:00.001Z",
    );
    const runs = (await fixture.runs()).filter((r) => r.jobId === id);
    expect(runs.filter((r) => r.scheduledFor === "2030-01-02T00:00:00.000Z")).toHaveLength(1);
  });

  it("a trigger at the last storable instant, taken by a claimed occurrence, takes the millisecond before", async () => {
    now = new Date("2030-01-03T00:00:00.000Z");
    const id = await createJob({ runAt: "9999-12-31T23:59:59.999Z" });
    now = new Date("9999-12-31T23:59:59.999Z");
    // The edit claims the old schedule's occurrence, due now, before it changes the schedule.
    const edited = await app.request(`/jobs/${id}`, {
      method: "PATCH",
      headers: {
        Authorization: `Bearer ${KEY}`,
        "Content-Type": "application/json",
        "If-Match": '"1"',
      },
      body: JSON.stringify({ schedule: { cron: "0 * * * *", timezone: "UTC" } }),
    });
    expect(edited.status, await edited.text()).toBe(200);
    const triggered = await send("POST", `/jobs/${id}/trigger`);
    expect(triggered.status, triggered.text).toBe(202);
    expect(RunSchema.parse(JSON.parse(triggered.text)).scheduledFor).toBe(
      "9999-12-31T23:59:59.998Z",
    );
    const occurrences = (await fixture.runs())
      .filter((r) => r.jobId === id)
      .map((r) => r.scheduledFor)
      .sort();
    expect(occurrences).toEqual(["9999-12-31T23:59:59.998Z", "9999-12-31T23:59:59.999Z"]);
  });

  describe("with an Idempotency-Key", () => {
    const trigger = (id: string, key: string) =>
      send("POST", `/jobs/${id}/trigger`, undefined, { "Idempotency-Key": key });
    const runOf = (answer: { text: string }) => RunSchema.parse(JSON.parse(answer.text));
    const runsOfJob = async (id: string) =>
      (await fixture.runs()).filter((r) => r.jobId === id).map((r) => r.scheduledFor);

    it("a repeat answers the first trigger's run (200) and queues none; another key or job queues its own", async () => {
      now = new Date("2030-01-04T00:00:00.000Z");
      const id = await createJob({ runAt: "2031-01-01T00:00:00Z" });
      const other = await createJob({ runAt: "2031-01-01T00:00:00Z" });
      const first = await trigger(id, "retry-me");
      expect(first.status, first.text).toBe(202);
      now = new Date("2030-01-04T00:00:05.000Z");
      const repeat = await trigger(id, "retry-me");
      expect(repeat.status, repeat.text).toBe(200);
      expect(runOf(repeat).runId).toBe(runOf(first).runId);
      expect(await runsOfJob(id)).toEqual(["2030-01-04T00:00:00.000Z"]);

      expect((await trigger(id, "another")).status).toBe(202);
      expect((await trigger(other, "retry-me")).status).toBe(202);
      expect(await runsOfJob(id)).toEqual(["2030-01-04T00:00:00.000Z", "2030-01-04T00:00:05.000Z"]);
      expect(await runsOfJob(other)).toEqual(["2030-01-04T00:00:05.000Z"]);
    });

    it("concurrent triggers with one key queue one run, and each answers it", async () => {
      now = new Date("2030-01-05T00:00:00.000Z");
      const id = await createJob({ runAt: "2031-01-01T00:00:00Z" });
      const answers = await Promise.all([1, 2, 3].map(() => trigger(id, "at-once")));
      expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 202]);
      expect(new Set(answers.map((a) => runOf(a).runId)).size).toBe(1);
      expect(await runsOfJob(id)).toHaveLength(1);
    });

    it("answers for 24 hours, whatever the job's status became, then the key queues a new run", async () => {
      now = new Date("2030-01-06T00:00:00.000Z");
      const id = await createJob({ every: "PT1H" });
      const first = await trigger(id, "daily");
      expect(first.status, first.text).toBe(202);
      expect((await send("POST", `/jobs/${id}/pause`, {})).status).toBe(200);
      now = new Date("2030-01-06T23:59:59.000Z");
      const paused = await trigger(id, "daily");
      expect(paused.status, paused.text).toBe(200);
      expect(runOf(paused).runId).toBe(runOf(first).runId);
      expect((await send("POST", `/jobs/${id}/resume`, {})).status).toBe(200);
      now = new Date("2030-01-07T00:00:01.000Z");
      const later = await trigger(id, "daily");
      expect(later.status, later.text).toBe(202);
      expect(runOf(later).runId).not.toBe(runOf(first).runId);
    });

    it("a key that is not 1 to 200 visible ASCII characters is a 400 naming Idempotency-Key, and queues nothing", async () => {
      now = new Date("2030-01-08T00:00:00.000Z");
      const id = await createJob({ runAt: "2031-01-01T00:00:00Z" });
      const bad = await trigger(id, "with space");
      expect(bad.status, bad.text).toBe(400);
      expect(bad.text).toContain("Idempotency-Key");
      expect(await runsOfJob(id)).toEqual([]);
    });
  });
});
