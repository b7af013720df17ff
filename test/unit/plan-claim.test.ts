import { describe, expect, it } from "vitest";
import { latestOccurrences, planClaim } from "../../shared/dispatch/plan-claim.js";
import type { DueEntry } from "../../shared/model.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import { plannedTime, type ScheduleSpec } from "../../shared/schedule/index.js";

const MINUTE = 60_000;
const T0 = new Date("2026-03-01T12:00:00.000Z");
const perMinute: ScheduleSpec = { cron: "* * * * *", timezone: "UTC" };
const perSecond: ScheduleSpec = { every: "PT1S", startAt: "2026-03-01T00:00:00.000Z" };

function entry(overrides: Partial<DueEntry> & { schedule?: ScheduleSpec } = {}): DueEntry {
  const at = overrides.scheduledFor ?? T0.toISOString();
  return {
    key: { pk: "DUE#x#0", sk: "x" },
    kind: "occurrence",
    jobId: "job1",
    tenantId: "t",
    dueAt: at,
    scheduledFor: at,
    attempt: 1,
    jobVersion: 1,
    priority: "normal",
    schedule: perMinute,
    misfire: "fire_once",
    ...overrides,
  };
}

const iso = (d: Date) => d.toISOString();
const at = (ms: number) => new Date(T0.getTime() + ms);

function plan(e: DueEntry, now: Date, horizonMs = 6 * MINUTE, maxRunsPerClaim = 50) {
  return planClaim({
    entry: e,
    now,
    horizonEnd: new Date(now.getTime() + horizonMs),
    misfireGraceMs: MINUTE,
    maxRunsPerClaim,
  });
}

describe("planClaim, on time", () => {
  it("claims every occurrence before the horizon and points the job at the first one after it", () => {
    const p = plan(entry(), at(-10_000), 5 * MINUTE + 10_000);
    expect(p.runs.map((r) => iso(r.scheduledFor))).toEqual(
      [0, 1, 2, 3, 4].map((m) => iso(at(m * MINUTE))),
    );
    expect(
      p.runs.every((r) => r.attempt === 1 && r.dueAt.getTime() === r.scheduledFor.getTime()),
    ).toBe(true);
    expect(p.skipped).toEqual([]);
    expect(p.advancesJob).toBe(true);
    expect(p.next).toEqual({
      scheduledFor: at(5 * MINUTE),
      dueAt: at(5 * MINUTE),
      catchUpCount: 0,
    });
  });

  it("stops at the transaction bound and continues from the first unclaimed occurrence", () => {
    const e = entry({ schedule: perSecond });
    const p = plan(e, at(-1000), 6 * MINUTE, 50);
    expect(p.runs).toHaveLength(50);
    expect(iso(p.runs.at(-1)?.scheduledFor ?? new Date(0))).toBe(iso(at(49_000)));
    expect(p.next?.scheduledFor).toEqual(at(50_000));
  });

  it("runs a one-off once and leaves nothing after it", () => {
    const p = plan(entry({ schedule: { runAt: iso(T0) } }), at(-2000));
    expect(p.runs.map((r) => iso(r.scheduledFor))).toEqual([iso(T0)]);
    expect(p.next).toBeNull();
  });

  it("claims a retry entry as exactly one run at its own due time without moving the job", () => {
    const p = plan(entry({ kind: "retry", attempt: 3, dueAt: iso(at(90_000)) }), at(0));
    expect(p.runs).toEqual([{ scheduledFor: T0, dueAt: at(90_000), attempt: 3 }]);
    expect(p.advancesJob).toBe(false);
    expect(p.next).toBeNull();
  });

  it("leaves out occurrences that already have a run", () => {
    const p = planClaim({
      entry: entry(),
      now: at(-1000),
      horizonEnd: at(3 * MINUTE),
      misfireGraceMs: MINUTE,
      maxRunsPerClaim: 50,
      alreadyRun: new Set([iso(at(MINUTE))]),
    });
    expect(p.runs.map((r) => iso(r.scheduledFor))).toEqual([iso(T0), iso(at(2 * MINUTE))]);
    expect(p.next?.scheduledFor).toEqual(at(3 * MINUTE));
  });
});

describe("planClaim after a 20-minute outage of a per-minute job", () => {
  // Dispatch resumes 20.5 minutes after T0: T0..T0+19m are older than the 60 s grace, T0+20m is not.
  const now = at(20 * MINUTE + 30_000);
  const outage = (misfire: MisfirePolicy) => plan(entry({ misfire }), now, 90_000);
  const lateButInGrace = iso(at(20 * MINUTE));

  it("skip records all 20 missed occurrences and runs from the next one", () => {
    const p = outage("skip");
    expect(p.skipped).toHaveLength(20);
    expect(p.skipped.map((s) => iso(s.scheduledFor))).toEqual(
      Array.from({ length: 20 }, (_, m) => iso(at(m * MINUTE))),
    );
    expect(p.runs.map((r) => iso(r.scheduledFor))).toEqual([lateButInGrace, iso(at(21 * MINUTE))]);
  });

  it("fire_once runs the most recent missed occurrence and records 19 skipped", () => {
    const p = outage("fire_once");
    expect(p.skipped).toHaveLength(19);
    expect(p.runs.map((r) => iso(r.scheduledFor))[0]).toBe(iso(at(19 * MINUTE)));
    expect(p.runs.filter((r) => r.scheduledFor < at(20 * MINUTE))).toHaveLength(1);
  });

  it("fire_once with an endAt inside the outage runs the most recent missed occurrence not after it", () => {
    const endAt = at(10 * MINUTE);
    const p = plan(entry({ end: { endAt: iso(endAt), maxRuns: null } }), now, 90_000);
    expect(p.runs.map((r) => iso(r.scheduledFor))).toEqual([iso(endAt)]);
    expect(p.skipped.map((s) => iso(s.scheduledFor))).toEqual(
      Array.from({ length: 10 }, (_, m) => iso(at(m * MINUTE))),
    );
    expect(p.ended).toBe(true);
    expect(p.next).toBeNull();
  });

  it("fire_all runs all 20", () => {
    const p = outage("fire_all");
    expect(p.skipped).toEqual([]);
    expect(p.runs.filter((r) => r.scheduledFor < at(20 * MINUTE))).toHaveLength(20);
    expect(p.next?.catchUpCount).toBe(0);
  });
});

describe("fire_all catch-up is bounded", () => {
  it("chains claims of at most maxRunsPerClaim and stops running missed occurrences at 1,000", () => {
    const now = at(2 * 3_600_000);
    let e = entry({
      schedule: perSecond,
      misfire: "fire_all",
      scheduledFor: iso(T0),
      dueAt: iso(T0),
    });
    let ran = 0;
    let skipNote: string | null = null;
    for (let claims = 0; claims < 100; claims++) {
      const p = plan(e, now, MINUTE, 50);
      ran += p.runs.filter((r) => r.scheduledFor.getTime() <= now.getTime() - MINUTE).length;
      if (p.note) {
        skipNote = p.note;
        break;
      }
      const next = p.next;
      if (!next) break;
      e = {
        ...e,
        scheduledFor: iso(next.scheduledFor),
        dueAt: iso(next.scheduledFor),
        catchUpCount: next.catchUpCount,
      };
    }
    expect(ran).toBe(1000);
    expect(skipNote).toMatch(/cap of 1000/);
  });
});

describe("planClaim, more than 1,000 occurrences missed", () => {
  // An hour of a per-second job missed: 3,541 occurrences past the grace.
  const now = at(3_600_000);
  const cutoff = now.getTime() - MINUTE - 1;
  const missedEntry = (misfire: MisfirePolicy) =>
    entry({ schedule: perSecond, misfire, scheduledFor: iso(T0), dueAt: iso(T0) });

  it.each([
    ["skip", 1000, 0],
    ["fire_once", 999, 1],
  ] as const)(
    "%s decides the latest 1,000 (skipped %i, run %i); the earlier are neither run nor recorded",
    (policy, skippedCount, runCount) => {
      const p = plan(missedEntry(policy), now, MINUTE, 50);
      const decided = [
        ...p.skipped.map((s) => s.scheduledFor),
        ...p.runs.map((r) => r.scheduledFor),
      ]
        .filter((d) => d.getTime() <= cutoff)
        .sort((a, b) => a.getTime() - b.getTime());
      expect(p.skipped).toHaveLength(skippedCount);
      expect(p.runs.filter((r) => r.scheduledFor.getTime() <= cutoff)).toHaveLength(runCount);
      expect(decided).toHaveLength(1000);
      expect(decided[0]).toEqual(new Date(Math.floor(cutoff / 1000) * 1000 - 999_000));
      expect(p.note).toMatch(/only the latest 1000 are planned/);
    },
  );
});

describe("latestOccurrences", () => {
  it("lists the latest occurrences when more were missed than the limit", () => {
    const from = T0;
    const to = at(3 * 3_600_000);
    const { missed, truncated } = latestOccurrences(perSecond, from, to, 1000);
    expect(truncated).toBe(true);
    expect(missed).toHaveLength(1000);
    expect(missed.at(-1)).toEqual(to);
    expect(missed[0]).toEqual(new Date(to.getTime() - 999_000));
  });

  it("lists all of them when they fit", () => {
    const { missed, truncated } = latestOccurrences(perMinute, T0, at(20 * MINUTE), 1000);
    expect(truncated).toBe(false);
    expect(missed).toHaveLength(21);
  });
});

describe("planClaim, with a jitter window", () => {
  const hourly: ScheduleSpec = { cron: "0 * * * *", timezone: "UTC" };
  const HOUR = 60 * MINUTE;
  const planned = (occurrence: Date) => plannedTime("job1", occurrence, 30 * MINUTE, hourly);
  const jittered = (overrides: Partial<DueEntry> = {}) =>
    entry({ schedule: hourly, window: "PT30M", dueAt: iso(planned(T0)), ...overrides });

  it("makes each run due at its planned time, and claims by planned time against the horizon", () => {
    // A horizon two hours ahead of the first occurrence: the third is claimed only if planned before it.
    const horizon = at(2 * HOUR + 15 * MINUTE);
    const p = plan(jittered(), at(-1000), horizon.getTime() - at(-1000).getTime());
    const occurrences = [0, 1, 2].map((h) => at(h * HOUR)).filter((o) => planned(o) < horizon);
    expect(p.runs.map((r) => r.scheduledFor)).toEqual(occurrences);
    for (const r of p.runs) {
      expect(r.dueAt).toEqual(planned(r.scheduledFor));
      expect(r.plannedFor).toEqual(planned(r.scheduledFor));
      expect(r.dueAt.getTime() - r.scheduledFor.getTime()).toBeLessThan(30 * MINUTE);
    }
    const next = at(occurrences.length * HOUR);
    expect(p.next).toEqual({ scheduledFor: next, dueAt: planned(next), catchUpCount: 0 });
  });

  it("counts lateness from the planned time: an occurrence past its grace but planned inside it runs", () => {
    // Now is 30 s after the planned time, so more than the 60 s grace after the occurrence when
    // the offset is above 30 s; pick an hour whose offset is above 2 minutes.
    const late = [0, 1, 2, 3, 4, 5, 6, 7]
      .map((h) => at(h * HOUR))
      .find((o) => planned(o).getTime() - o.getTime() > 2 * MINUTE);
    expect(late).toBeDefined();
    if (late === undefined) return;
    const p = plan(
      jittered({ scheduledFor: iso(late), dueAt: iso(planned(late)), misfire: "skip" }),
      new Date(planned(late).getTime() + 30_000),
    );
    expect(p.skipped).toEqual([]);
    expect(p.runs[0]?.scheduledFor).toEqual(late);
  });

  it("skips under skip only the occurrences planned before the cutoff, and resumes at the first planned after it", () => {
    const now = at(5 * HOUR + 20 * MINUTE);
    const cutoff = new Date(now.getTime() - MINUTE);
    const p = plan(jittered({ misfire: "skip" }), now);
    const all = [0, 1, 2, 3, 4, 5, 6].map((h) => at(h * HOUR));
    const missed = all.filter((o) => planned(o) <= cutoff);
    expect(p.skipped.map((s) => s.scheduledFor)).toEqual(missed);
    const firstNotMissed = all.find((o) => planned(o) > cutoff);
    expect(p.runs[0]?.scheduledFor ?? p.next?.scheduledFor).toEqual(firstNotMissed);
  });

  it("a retry entry keeps the occurrence's planned time", () => {
    const p = plan(
      jittered({
        kind: "retry",
        attempt: 2,
        dueAt: iso(at(10 * MINUTE)),
        plannedFor: iso(planned(T0)),
      }),
      at(9 * MINUTE),
    );
    expect(p.runs).toEqual([
      { scheduledFor: T0, dueAt: at(10 * MINUTE), plannedFor: planned(T0), attempt: 2 },
    ]);
  });
});

describe("planClaim, with a jitter window on the night a DST shift narrows the period", () => {
  // 01:30 and 03:30 in New York are two hours apart on the wall clock (the window's bound), one
  // hour apart in real time on the night the clocks go forward (2027-03-14, 06:30Z and 07:30Z).
  const acrossSpringForward: ScheduleSpec = { cron: "30 1,3 * * *", timezone: "America/New_York" };
  const LOOKAHEAD = 5 * MINUTE;
  const jobIds = Array.from({ length: 40 }, (_, i) => `job-${i}`);

  it("claims every occurrence before its planned time, each after the one before it", () => {
    const claimedLate: string[] = [];
    for (const jobId of jobIds) {
      // A dispatcher takes an entry once its due minute is within the lookahead.
      let e = entry({
        jobId,
        schedule: acrossSpringForward,
        window: "PT2H",
        misfire: "skip",
        scheduledFor: "2027-03-13T06:30:00.000Z",
        dueAt: "2027-03-13T06:30:00.000Z",
      });
      let lastDue = 0;
      for (let claim = 0; claim < 6; claim++) {
        const now = new Date(Date.parse(e.dueAt) - LOOKAHEAD);
        const horizonEnd = new Date(Math.floor(Date.parse(e.dueAt) / MINUTE) * MINUTE + MINUTE);
        const p = planClaim({
          entry: e,
          now,
          horizonEnd,
          misfireGraceMs: MINUTE,
          maxRunsPerClaim: 50,
        });
        expect(p.skipped).toEqual([]);
        for (const r of p.runs) {
          if (r.dueAt < now || r.dueAt.getTime() <= lastDue)
            claimedLate.push(
              `${jobId} ${iso(r.scheduledFor)} due ${iso(r.dueAt)}, claimed ${iso(now)}`,
            );
          lastDue = r.dueAt.getTime();
        }
        if (p.next === null) break;
        e = { ...e, scheduledFor: iso(p.next.scheduledFor), dueAt: iso(p.next.dueAt) };
      }
    }
    expect(claimedLate).toEqual([]);
  });
});
