import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { previewOfJob } from "../../shared/api/preview.js";
import { claimReachEnd } from "../../shared/dispatch/fast-path-window.js";
import { type ClaimPlan, planClaim } from "../../shared/dispatch/plan-claim.js";
import type { DueEntry } from "../../shared/model.js";
import { DEFAULT_POLICIES, type MisfirePolicy, misfireCutoff } from "../../shared/policies.js";
import {
  firstOccurrence,
  nextOccurrence,
  normalizeSchedule,
  occurrences,
  plannedTime,
  type ScheduleSpec,
  windowMsOf,
} from "../../shared/schedule/index.js";
import { intFromEnv } from "../support/env-knobs.js";
import { transitionsOf } from "./schedule/support.js";

/**
 * A job's whole life of claims, as the dispatcher makes them, on the pure plan alone: passes
 * every minute (some minutes apart after an outage, some on a clock that went back), each claiming
 * the job's entry once its planned time is inside the pass's horizon and following the chain of
 * next entries as claimChain does. Whatever the clock did, each occurrence is queued or recorded
 * skipped at most once and in order, none is passed over without a record, the end conditions
 * hold, and a job whose passes all came on time queues exactly what its preview showed at create.
 * Schedules are aimed at the nights zones change offset: 30-minute DST (Lord Howe), DST at
 * midnight (Havana, Santiago, Beirut), offsets changed without DST (Pyongyang, Caracas, Volgograd).
 */
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const GRACE = MINUTE;
const LOOKAHEAD = 5 * MINUTE;
const MAX_RUNS_PER_CLAIM = 50;
/** Cases per property; CLAIM_SEQUENCE_RUNS=5000 searches further. */
const RUNS = intFromEnv("CLAIM_SEQUENCE_RUNS", 150);

const ZONE_YEARS: readonly (readonly [string, readonly number[]])[] = [
  ["Australia/Lord_Howe", [2026, 2027]],
  ["America/Havana", [2026, 2027]],
  ["America/Santiago", [2026, 2027]],
  ["Asia/Beirut", [2026, 2027]],
  ["America/New_York", [2026, 2027]],
  ["Pacific/Chatham", [2026]],
  ["Asia/Pyongyang", [2015, 2018]],
  ["America/Caracas", [2007, 2016]],
  ["Europe/Volgograd", [2018, 2020]],
];

const CRONS = [
  "*/15 * * * *",
  "0 * * * *",
  "30 0 * * *",
  "0 0 * * *",
  "45 23 * * *",
  "*/20 0-2 * * *",
  "0,30 1,2 * * *",
  "*/30 * * * * *",
  "0 0 * * SUN",
];

interface Job {
  readonly schedule: ScheduleSpec;
  readonly window: string | null;
  readonly misfire: MisfirePolicy;
  readonly endAt?: string;
  readonly maxRuns?: number;
}

const jobId = "job-claims";

/** The pass clock: a minute a tick, with outages (a jump ahead) and steps back. */
const stepArb = fc.oneof(
  { arbitrary: fc.constant(MINUTE), weight: 12 },
  { arbitrary: fc.integer({ min: 2, max: 180 }).map((m) => m * MINUTE + 7_000), weight: 2 },
  { arbitrary: fc.integer({ min: -20, max: -1 }).map((m) => m * MINUTE - 3_000), weight: 2 },
  // Past the catch-up's cap of 1,000 missed occurrences for the per-30-second schedule.
  { arbitrary: fc.integer({ min: 6, max: 48 }).map((h) => h * HOUR + 11_000), weight: 1 },
);

const scenarioArb = fc
  .record({
    zoneYears: fc.constantFrom(...ZONE_YEARS),
    pick: fc.nat(),
    startMinutes: fc.integer({ min: -6 * 60, max: 60 }),
    kind: fc.constantFrom("cron", "cron", "every"),
    cron: fc.constantFrom(...CRONS),
    every: fc.constantFrom("PT7M", "PT1H", "PT45S", "PT25M"),
    windowFraction: fc.option(fc.constantFrom(0.25, 0.5, 1), { nil: undefined }),
    misfire: fc.constantFrom<MisfirePolicy>("skip", "fire_once", "fire_all"),
    end: fc.oneof(
      fc.constant({}),
      fc.integer({ min: 1, max: 40 }).map((maxRuns) => ({ maxRuns })),
      // An endAt on an occurrence (the k-th) or between two.
      fc.record({ k: fc.integer({ min: 0, max: 30 }), between: fc.boolean() }),
    ),
    steps: fc.array(stepArb, { minLength: 30, maxLength: 120 }),
  })
  .map((s) => {
    const [zone, years] = s.zoneYears;
    const transitions = years.flatMap((y) => transitionsOf(zone, y));
    const createdAt =
      (transitions[s.pick % Math.max(1, transitions.length)] ?? Date.UTC(2026, 5, 1)) +
      s.startMinutes * MINUTE;
    const schedule: ScheduleSpec =
      s.kind === "cron"
        ? { cron: s.cron, timezone: zone }
        : normalizeSchedule({ every: s.every }, new Date(createdAt));
    return { ...s, zone, createdAt, schedule };
  });

function windowOf(schedule: ScheduleSpec, fraction: number | undefined): string | null {
  if (fraction === undefined) return null;
  // The smallest period of the fixtures: 30 s (a per-30-second cron).
  const periods: Record<string, number> = {
    "*/30 * * * * *": 30,
    "*/15 * * * *": 900,
    "*/20 0-2 * * *": 1200,
    "0,30 1,2 * * *": 1800,
    PT45S: 45,
    PT7M: 420,
    PT25M: 1500,
  };
  const key = "cron" in schedule ? schedule.cron : "every" in schedule ? schedule.every : "";
  const period = periods[key] ?? 3600;
  return `PT${Math.max(1, Math.floor(period * fraction))}S`;
}

function entryFor(job: Job, scheduledFor: Date): DueEntry {
  const windowMs = windowMsOf(job.window);
  const dueAt = plannedTime(jobId, scheduledFor, windowMs, job.schedule);
  return {
    key: { pk: "DUE", sk: "x" },
    kind: "occurrence",
    jobId,
    tenantId: "t",
    dueAt: dueAt.toISOString(),
    scheduledFor: scheduledFor.toISOString(),
    attempt: 1,
    jobVersion: 1,
    priority: "normal",
    schedule: job.schedule,
    misfire: job.misfire,
    window: job.window,
    ...(job.endAt || job.maxRuns
      ? {
          end: {
            ...(job.endAt ? { endAt: job.endAt } : {}),
            ...(job.maxRuns ? { maxRuns: job.maxRuns } : {}),
          },
        }
      : {}),
    queuedBefore: 0,
  };
}

/** A pass's horizon: the end of the minute of now + lookahead (its last bucket). */
const horizonOf = (now: number) => Math.floor((now + LOOKAHEAD) / MINUTE) * MINUTE + MINUTE;

interface Claimed {
  readonly now: number;
  readonly plan: ClaimPlan;
}

/** Every claim of the job's entries the passes make, in order. */
function claimsOver(job: Job, first: Date | DueEntry, createdAt: number, steps: readonly number[]) {
  const claims: Claimed[] = [];
  let entry: DueEntry | null = first instanceof Date ? entryFor(job, first) : first;
  let now = createdAt;
  for (const step of [0, ...steps]) {
    now += step;
    const horizon = horizonOf(now);
    while (entry !== null && Date.parse(entry.dueAt) < horizon) {
      const plan = planClaim({
        entry,
        now: new Date(now),
        horizonEnd: claimReachEnd(new Date(now), new Date(horizon)),
        misfireGraceMs: GRACE,
        maxRunsPerClaim: MAX_RUNS_PER_CLAIM,
      });
      claims.push({ now, plan });
      entry =
        plan.next === null || plan.ended === true
          ? null
          : {
              ...entry,
              dueAt: plan.next.dueAt.toISOString(),
              scheduledFor: plan.next.scheduledFor.toISOString(),
              catchUpCount: plan.next.catchUpCount,
              queuedBefore: (entry.queuedBefore ?? 0) + (plan.occurrencesQueued ?? 0),
            };
    }
  }
  return { claims, pending: entry, lastNow: now };
}

const iso = (d: Date) => d.toISOString();

type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

/** The job's end: none, a maxRuns, or an endAt on its k-th occurrence (or a millisecond after). */
function endOf(s: Scenario, first: Date): { endAt?: string; maxRuns?: number } {
  if ("maxRuns" in s.end) return { maxRuns: s.end.maxRuns };
  if (!("k" in s.end)) return {};
  const upTo = occurrences(s.schedule, first, new Date(first.getTime() + 400 * HOUR), 40);
  const at = upTo[Math.min(s.end.k, upTo.length - 1)] ?? first;
  return { endAt: new Date(at.getTime() + (s.end.between ? 1 : 0)).toISOString() };
}

describe("a job's claims over its life, the clock jumping ahead and back", () => {
  it("handle each occurrence once, in order, none passed over, within the job's end; on time they are its preview", () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const window = windowOf(s.schedule, s.windowFraction);
        const first = firstOccurrence(s.schedule, new Date(s.createdAt));
        if (first === null) return;
        const job: Job = { schedule: s.schedule, window, misfire: s.misfire, ...endOf(s, first) };
        const { claims, pending } = claimsOver(job, first, s.createdAt, s.steps);

        const handled: string[] = [];
        const ran: string[] = [];
        let truncated = false;
        for (const { now, plan } of claims) {
          for (const r of plan.runs) {
            ran.push(iso(r.scheduledFor));
            // Each run is due at its occurrence's planned time.
            expect(iso(r.dueAt)).toBe(
              iso(plannedTime(jobId, r.scheduledFor, windowMsOf(window), s.schedule)),
            );
          }
          for (const skipped of plan.skipped) {
            // Only an occurrence planned before the misfire cutoff is recorded skipped as late
            // (a fire_all cap's note names the first one it leaves, planned before the cutoff too).
            const planned = plannedTime(
              jobId,
              skipped.scheduledFor,
              windowMsOf(window),
              s.schedule,
            );
            expect(planned.getTime()).toBeLessThanOrEqual(
              misfireCutoff(new Date(now), GRACE).getTime(),
            );
          }
          if (s.misfire === "skip") {
            for (const r of plan.runs) {
              const planned = r.plannedFor ?? r.scheduledFor;
              expect(now - planned.getTime()).toBeLessThanOrEqual(GRACE);
            }
          }
          if (plan.note !== null) truncated = true;
          const these = [
            ...plan.runs.map((r) => r.scheduledFor),
            ...plan.skipped.map((k) => k.scheduledFor),
          ]
            .map(iso)
            .sort();
          handled.push(...these);
        }
        // Once each, and in order across claims.
        expect(new Set(handled).size).toBe(handled.length);
        expect([...handled].sort()).toEqual(handled);
        // Every one is an occurrence of the schedule, none after endAt, at most maxRuns run.
        for (const at of handled) {
          expect(occurrences(s.schedule, new Date(at), new Date(at), 1).map(iso)).toEqual([at]);
          if (job.endAt !== undefined) expect(at <= job.endAt).toBe(true);
        }
        if (job.maxRuns !== undefined) expect(ran.length).toBeLessThanOrEqual(job.maxRuns);
        const lastHandled = handled.at(-1);
        if (!truncated && lastHandled !== undefined) {
          // None passed over: from the first occurrence to the last one handled, each has a record.
          const all = occurrences(s.schedule, first, new Date(lastHandled), 100_000).map(iso);
          expect(handled).toEqual(all);
          // The pending entry is the occurrence right after the last one handled.
          if (pending !== null) {
            expect(pending.scheduledFor).toBe(
              iso(nextOccurrence(s.schedule, new Date(lastHandled)) ?? new Date(0)),
            );
          }
        }
        // Ended: the count reached, or nothing left before endAt.
        const ended = claims.some((c) => c.plan.ended === true);
        if (job.maxRuns !== undefined && ran.length === job.maxRuns) expect(ended).toBe(true);
        if (ended && job.maxRuns !== undefined && job.endAt === undefined && !truncated) {
          expect(ran.length).toBe(job.maxRuns);
        }

        // On time all along: what ran is what the preview at create showed.
        const onTime = s.steps.every((step) => step === MINUTE);
        if (onTime && claims.length > 0) {
          expect(claims.every((c) => c.plan.skipped.length === 0)).toBe(true);
          const preview = previewOfJob(
            {
              schedule: s.schedule,
              ...(job.endAt ? { endAt: job.endAt } : {}),
              ...(job.maxRuns ? { maxRuns: job.maxRuns } : {}),
              occurrencesQueued: 0,
              nextRunAt: iso(first),
            },
            new Date(s.createdAt),
            100,
          ).occurrences.map((o) => o.utc);
          expect(preview.slice(0, ran.length)).toEqual(ran);
          if (ended) expect(preview).toEqual(ran);
        }
      }),
      { numRuns: RUNS },
    );
  }, 600_000);

  it("a preview read mid-life (the passes behind after an outage) shows what the passes then queue", () => {
    fc.assert(
      fc.property(scenarioArb, fc.nat(), (s, splitPick) => {
        const window = windowOf(s.schedule, s.windowFraction);
        const first = firstOccurrence(s.schedule, new Date(s.createdAt));
        if (first === null) return;
        const job: Job = { schedule: s.schedule, window, misfire: s.misfire, ...endOf(s, first) };
        // The passes up to the split as generated; then one step (an outage, a step back or a
        // minute) before the preview is read; then a pass a minute for three hours.
        const split = splitPick % s.steps.length;
        const before = s.steps.slice(0, split);
        const gap = s.steps[split] ?? MINUTE;
        const upTo = claimsOver(job, first, s.createdAt, before);
        if (upTo.pending === null) return;
        const pending = upTo.pending;
        const previewAt = upTo.lastNow + gap;
        // A preview on a clock behind the create or a claim already made is not what this asks about.
        if (previewAt < s.createdAt || upTo.claims.some((c) => c.now > previewAt)) return;
        const queuedSoFar = pending.queuedBefore ?? 0;
        const preview = previewOfJob(
          {
            schedule: s.schedule,
            ...(job.maxRuns ? { maxRuns: job.maxRuns } : {}),
            ...(job.endAt ? { endAt: job.endAt } : {}),
            occurrencesQueued: queuedSoFar,
            nextRunAt: pending.scheduledFor,
            status: "ACTIVE",
          },
          new Date(previewAt),
          100,
          {
            pending: {
              job: {
                jobId,
                schedule: s.schedule,
                window,
                policies: { ...DEFAULT_POLICIES, misfire: s.misfire, inFlight: "skip" },
                nextRunAt: pending.scheduledFor,
                catchUpCount: pending.catchUpCount ?? 0,
                catchUpOf: pending.scheduledFor,
              },
              now: new Date(previewAt),
              misfireGraceMs: GRACE,
            },
          },
        ).occurrences.map((o) => o.utc);
        const after = claimsOver(
          job,
          pending,
          previewAt,
          Array.from({ length: 180 }, () => MINUTE),
        );
        // Runs queued before the preview was read (claims reach 14 minutes ahead) run too.
        const shownFrom = new Date(Math.floor(previewAt / 1000) * 1000).toISOString();
        const ranAfter = [...upTo.claims, ...after.claims]
          .flatMap((c) => c.plan.runs.map((r) => iso(r.scheduledFor)))
          .filter((at) => at >= shownFrom);
        const endedAfter = after.claims.some((c) => c.plan.ended === true);
        const compared = Math.min(preview.length, ranAfter.length);
        expect(preview.slice(0, compared)).toEqual(ranAfter.slice(0, compared));
        if (endedAfter && preview.length < 100) expect(preview).toEqual(ranAfter);
      }),
      { numRuns: RUNS },
    );
  }, 600_000);
});
