import { describe, expect, it } from "vitest";
import { lateStartSkipReason } from "../../shared/execution/late-start.js";

const perMinute = { cron: "* * * * *", timezone: "UTC" };
const at = (iso: string) => new Date(iso);
const base = {
  schedule: perMinute,
  attempt: 1,
  startedBefore: false,
  misfireFrom: null,
  graceMs: 60_000,
  now: at("2026-03-01T12:10:30.000Z"),
};

describe("lateStartSkipReason", () => {
  it("runs anything inside the grace", () => {
    for (const policy of ["skip", "fire_once", "fire_all"] as const) {
      expect(
        lateStartSkipReason({ ...base, policy, scheduledFor: at("2026-03-01T12:10:00.000Z") }),
      ).toBeNull();
    }
  });

  it("skip skips a first attempt past the grace", () => {
    expect(
      lateStartSkipReason({
        ...base,
        policy: "skip",
        scheduledFor: at("2026-03-01T12:05:00.000Z"),
      }),
    ).toBe("misfire: started 330 s late, past the 60 s grace; policy skip");
  });

  it("fire_once runs only the most recent late occurrence", () => {
    const policy = "fire_once" as const;
    // 12:09 is the most recent occurrence past the grace (12:10 is inside it): it runs; 12:08 does not.
    expect(
      lateStartSkipReason({ ...base, policy, scheduledFor: at("2026-03-01T12:09:00.000Z") }),
    ).toBeNull();
    expect(
      lateStartSkipReason({ ...base, policy, scheduledFor: at("2026-03-01T12:08:00.000Z") }),
    ).toMatch(/policy fire_once runs only the most recent/);
  });

  it("fire_once runs a late occurrence whose next one an edit passed over: that one never runs", () => {
    const policy = "fire_once" as const;
    const scheduledFor = at("2026-03-01T12:08:00.000Z");
    const nine = at("2026-03-01T12:09:00.000Z");
    const passedOver = (occurrence: Date) => occurrence.getTime() === nine.getTime();
    expect(lateStartSkipReason({ ...base, policy, scheduledFor, passedOver })).toBeNull();
    // 12:07's next, 12:08, was not passed over: it runs in 12:07's place.
    expect(
      lateStartSkipReason({
        ...base,
        policy,
        scheduledFor: at("2026-03-01T12:07:00.000Z"),
        passedOver,
      }),
    ).toMatch(/policy fire_once runs only the most recent/);
  });

  it("fire_once runs the last late occurrence before the job's endAt: none after it runs instead", () => {
    const policy = "fire_once" as const;
    const scheduledFor = at("2026-03-01T12:08:00.000Z");
    expect(lateStartSkipReason({ ...base, policy, scheduledFor, endAt: scheduledFor })).toBeNull();
    expect(
      lateStartSkipReason({ ...base, policy, scheduledFor, endAt: at("2026-03-01T12:09:00.000Z") }),
    ).toMatch(/policy fire_once runs only the most recent/);
  });

  it("fire_all and retries always run", () => {
    const late = at("2026-03-01T12:00:00.000Z");
    expect(lateStartSkipReason({ ...base, policy: "fire_all", scheduledFor: late })).toBeNull();
    expect(
      lateStartSkipReason({ ...base, policy: "skip", attempt: 2, scheduledFor: late }),
    ).toBeNull();
  });

  it("an occurrence of a schedule an edit replaced (inFlight complete) is skipped under skip, and runs under fire_once", () => {
    // Not an occurrence of the per-minute schedule the job has now.
    const oldOccurrence = at("2026-03-01T12:00:17.250Z");
    expect(lateStartSkipReason({ ...base, policy: "skip", scheduledFor: oldOccurrence })).toBe(
      "misfire: started 613 s late, past the 60 s grace; policy skip",
    );
    expect(
      lateStartSkipReason({ ...base, policy: "fire_once", scheduledFor: oldOccurrence }),
    ).toBeNull();
  });

  it("a run a trigger or an upstream queued always runs, even on an instant the schedule has (edited since)", () => {
    const onAnOccurrence = at("2026-03-01T12:00:00.000Z");
    for (const policy of ["skip", "fire_once"] as const) {
      const late = { ...base, policy, scheduledFor: onAnOccurrence };
      expect(lateStartSkipReason(late)).toMatch(/^misfire: /);
      expect(lateStartSkipReason({ ...late, queuedOffSchedule: true })).toBeNull();
    }
  });

  it("a one-off job starting late is skipped only under skip", () => {
    const runAt = "2026-03-01T12:00:00.000Z";
    const oneOff = { ...base, schedule: { runAt }, scheduledFor: at(runAt) };
    expect(lateStartSkipReason({ ...oneOff, policy: "skip" })).toMatch(/^misfire: /);
    expect(lateStartSkipReason({ ...oneOff, policy: "fire_once" })).toBeNull();
  });

  it("an interrupted run, or one that waited on its overlap policy, is not a misfire: it runs", () => {
    // Claimed and started on time, then its worker died; the redelivery comes a lease (= grace) later.
    for (const policy of ["skip", "fire_once"] as const) {
      expect(
        lateStartSkipReason({
          ...base,
          policy,
          startedBefore: true,
          scheduledFor: at("2026-03-01T12:08:00.000Z"),
        }),
      ).toBeNull();
    }
  });

  it("a run whose message was lost is late only if it starts past the grace after the reaper's re-send", () => {
    const scheduledFor = at("2026-03-01T12:09:00.000Z");
    // Re-sent a lease and a tick after it was due, started at once: on time for a recovery.
    const misfireFrom = at("2026-03-01T12:10:25.000Z");
    for (const policy of ["skip", "fire_once"] as const) {
      expect(lateStartSkipReason({ ...base, policy, scheduledFor, misfireFrom })).toBeNull();
    }
    // Re-sent, but the workers were down for longer than the grace after it: an outage, the policy applies.
    const outage = {
      ...base,
      scheduledFor: at("2026-03-01T12:07:00.000Z"),
      misfireFrom: at("2026-03-01T12:08:05.000Z"),
    };
    expect(lateStartSkipReason({ ...outage, policy: "skip" })).toMatch(/policy skip/);
    expect(lateStartSkipReason({ ...outage, policy: "fire_once" })).toMatch(/policy fire_once/);
  });
});
