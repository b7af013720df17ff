import { beforeAll, describe, expect, it } from "vitest";
import { offsetClock } from "../../shared/clock.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import { plannedTime } from "../../shared/schedule/index.js";
import { type EngineFixture, testJob } from "../support/engine-fixture.js";
import { useLateStarts } from "../support/late-starts.js";

const MINUTE = 60_000;

/**
 * fire_once runs only the most recent of the occurrences its workers missed. A queued run keeps
 * the planned time it was claimed with, which an edit of the job's window does not move: a late
 * run asks whether the next occurrence is late too by that occurrence's run where it is queued,
 * not by the planned time the job's window gives it now.
 */
describe("fire_once, two occurrences queued, the window edited, the workers down past both", () => {
  const { fixture, ran, forget, deliverAt } = useLateStarts();
  let f: EngineFixture;
  beforeAll(() => {
    f = fixture();
  });

  it("a window added: only the later one runs", async () => {
    forget();
    const grace = f.engine.settings.misfireGraceMs;
    const first = Math.ceil((Date.now() + MINUTE) / 1000) * 1000;
    const schedule = { every: "PT5M", startAt: new Date(first).toISOString() };
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "recorded",
        schedule,
        policies: { ...testJob().policies, misfire: "fire_once" },
      }),
    );
    // The create queues what its fast path reaches, 14 minutes: three occurrences, each on
    // its instant (no window yet: no planned time of its own).
    const queued = (await f.runs()).filter((r) => r.jobId === job.jobId);
    const second = first + 5 * MINUTE;
    expect(queued.map((r) => [r.scheduledFor, r.plannedFor ?? null, r.status])).toEqual(
      [first, second, second + 5 * MINUTE].map((t) => [new Date(t).toISOString(), null, "QUEUED"]),
    );
    const [earlier, later] = queued;
    if (earlier === undefined || later === undefined) throw new Error("two runs expected");
    const edited = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
      window: "PT4M",
    });
    // The planned time the window gives the second occurrence now is later than its run's.
    const offset =
      plannedTime(job.jobId, new Date(second), 4 * MINUTE, edited.schedule).getTime() - second;
    expect(offset).toBeGreaterThan(2);
    // The workers come back when the second run is past the grace, and its planned time under
    // the window now is not: both queued runs are late, the second the most recent.
    const back = second + grace + 1 + Math.floor(offset / 2);
    for (const [run, clockAt] of [
      [earlier, back],
      [later, back + 1],
    ] as const) {
      await deliverAt(run, clockAt);
    }
    const ended = (await f.runs()).filter((r) => r.jobId === job.jobId).slice(0, 2);
    expect(ended.map((r) => [r.scheduledFor, r.status, r.reason])).toEqual([
      [
        earlier.scheduledFor,
        "SKIPPED",
        expect.stringMatching(/policy fire_once runs only the most recent missed occurrence/),
      ],
      [later.scheduledFor, "SUCCEEDED", null],
    ]);
    expect(ran()).toEqual([later.runId]);
  });

  it("the window removed: the earlier one, the most recent late, runs", async () => {
    forget();
    const grace = f.engine.settings.misfireGraceMs;
    const first = Math.ceil((Date.now() + MINUTE) / 1000) * 1000;
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "recorded",
        schedule: { every: "PT5M", startAt: new Date(first).toISOString() },
        window: "PT4M",
        policies: { ...testJob().policies, misfire: "fire_once" },
      }),
    );
    const [earlier, later] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    if (earlier === undefined || later === undefined) throw new Error("two runs expected");
    const second = first + 5 * MINUTE;
    expect(later.scheduledFor).toBe(new Date(second).toISOString());
    // The second run keeps the planned time the window gave it; without the window the job
    // would plan that occurrence on its instant.
    const offset = Date.parse(later.plannedFor ?? later.scheduledFor) - second;
    expect(offset).toBeGreaterThan(4);
    await editJob(f.engine, job.tenantId, job.jobId, job.version, { window: null });
    // The workers come back past the grace after the second occurrence's instant, before the
    // grace after its run's planned time: the earlier run is the most recent late one. The later
    // one starts once due, on time.
    const back = second + grace + 1 + Math.floor(offset / 2);
    for (const [run, clockAt] of [
      [earlier, back],
      [later, Math.max(back + 1, second + offset)],
    ] as const) {
      await deliverAt(run, clockAt);
    }
    const ended = (await f.runs()).filter((r) => r.jobId === job.jobId).slice(0, 2);
    expect(ended.map((r) => [r.scheduledFor, r.status, r.reason])).toEqual([
      [earlier.scheduledFor, "SUCCEEDED", null],
      [later.scheduledFor, "SUCCEEDED", null],
    ]);
    expect(ran()).toEqual([earlier.runId, later.runId]);
  });
});

/**
 * fire_once skips a late run when the schedule's next occurrence is late too, since that one
 * runs in its place. An edit that gives the job a schedule whose occurrences this run's instant
 * is one of starts it at the edit: its occurrences before the edit never run, and none stands in.
 */
describe("fire_once, a queued occurrence the new schedule also has, the next one before the edit", () => {
  const { fixture, ran, forget, deliverAt } = useLateStarts();
  let f: EngineFixture;
  beforeAll(() => {
    f = fixture();
  });

  it("every PT10M made every PT5M on the same anchor seven minutes on: the late run runs", async () => {
    forget();
    const first = Math.ceil((Date.now() + MINUTE) / 1000) * 1000;
    const startAt = new Date(first).toISOString();
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "recorded",
        schedule: { every: "PT10M", startAt },
        policies: { ...testJob().policies, misfire: "fire_once" },
      }),
    );
    const [late] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    if (late === undefined) throw new Error("the create queued no run");
    expect(late.scheduledFor).toBe(startAt);
    // The workers are down; the edit comes 7 minutes after the first occurrence. The new
    // schedule starts then: its occurrence 5 minutes after the first was before it.
    const edited = await editJob(
      { ...f.engine, clock: offsetClock(first + 7 * MINUTE - Date.now()) },
      job.tenantId,
      job.jobId,
      job.version,
      { schedule: { every: "PT5M", startAt } },
    );
    // Its occurrences from the edit on are claimed (the fast path's reach): not the one before.
    expect(Date.parse(edited.nextRunAt ?? "")).toBeGreaterThan(first + 7 * MINUTE);
    const fiveOn = new Date(first + 5 * MINUTE).toISOString();
    expect((await f.runs()).filter((r) => r.scheduledFor === fiveOn)).toEqual([]);
    await deliverAt(late, first + 8 * MINUTE);
    const ended = (await f.runs()).find((r) => r.runId === late.runId);
    expect([ended?.status, ended?.reason]).toEqual(["SUCCEEDED", null]);
    expect(ran()).toEqual([late.runId]);
  });
});
