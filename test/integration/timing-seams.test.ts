import { afterAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { createJob } from "../../shared/jobs/index.js";
import type { Job } from "../../shared/model.js";
import { decodeRunMessage } from "../../shared/queue/work-queue.js";
import {
  firstOccurrence,
  occurrences,
  plannedTime,
  type ScheduleSpec,
  windowMsOf,
} from "../../shared/schedule/index.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const LOOKAHEAD_MS = 300 * SECOND;
/** The fast path's window at the default lookahead: now + lookahead + 2 min. */
const WINDOW_MS = LOOKAHEAD_MS + 2 * MINUTE;
const TICKS = 16;

/** One message as the claimer sent it: when (the engine's clock), with what delay, for which run. */
interface Sent {
  readonly at: number;
  readonly delaySeconds: number;
  readonly jobId: string;
  readonly scheduledFor: string;
  readonly dueAt: string;
}

/**
 * How late each run becomes visible against its planned time, at the seams of the fast path and
 * the dispatcher: a create due just inside, at and just past the fast-path window's end, on a
 * bucket's last and first millisecond, at its lookahead, now, past the claim's reach, a time-zone
 * cron's and a past-started `every`'s first occurrences, and jittered per-minute runs; with the
 * tick on the minute and on its last millisecond. The clock is the test's: a pass runs every
 * minute of it, and a run's visibility is the clock at its send plus its SQS delay (the worker
 * waits out the second a delay rounded down leaves, worker.ts).
 */
describe("runs become visible on their time at the fast path's and the buckets' edges", () => {
  const fixtures: EngineFixture[] = [];
  afterAll(async () => {
    for (const f of fixtures) await f.destroy();
  });

  for (const phaseMs of [0, MINUTE - 1]) {
    it(`every occurrence is sent once, visible in the second before it is due (tick at +${phaseMs} ms)`, async () => {
      const time = { ms: Math.floor(Date.now() / MINUTE) * MINUTE + MINUTE + phaseMs };
      const f = await createEngineFixture({
        settings: { shardCount: 1, maxShardCount: 1, lookaheadMs: LOOKAHEAD_MS },
        clock: () => new Date(time.ms),
      });
      fixtures.push(f);
      // Observes the sends (nothing is changed): each message with the clock it was sent at.
      const sent: Sent[] = [];
      f.engine.sqs.middlewareStack.add(
        (next) => async (args) => {
          const { Entries = [] } = args.input as {
            Entries?: { DelaySeconds?: number; MessageBody?: string }[];
          };
          for (const entry of Entries) {
            const message = decodeRunMessage(entry.MessageBody);
            if (message === null) continue;
            sent.push({ at: time.ms, delaySeconds: entry.DelaySeconds ?? 0, ...message });
          }
          return next(args);
        },
        { step: "initialize", name: "observeSends" },
      );
      // A pass has run: the buckets up to its horizon are swept before any create.
      await dispatchShard(f.engine, 0, "before");
      const createdAt = time.ms;
      const nextMinute = Math.ceil((createdAt + WINDOW_MS) / MINUTE) * MINUTE + MINUTE;
      const at = (ms: number): ScheduleSpec => ({ runAt: new Date(ms).toISOString() });
      const cases: [string, ScheduleSpec, string | undefined][] = [
        ["inside the window by 1 ms", at(createdAt + WINDOW_MS - 1), undefined],
        ["at the window's end", at(createdAt + WINDOW_MS), undefined],
        ["1 ms past the window", at(createdAt + WINDOW_MS + 1), undefined],
        ["a bucket's last millisecond", at(nextMinute - 1), undefined],
        ["a bucket's first millisecond", at(nextMinute), undefined],
        ["at the lookahead", at(createdAt + LOOKAHEAD_MS), undefined],
        ["now", at(createdAt), undefined],
        ["past the claim's reach", at(createdAt + 14 * MINUTE + 1), undefined],
        ["Kolkata cron", { cron: "*/7 * * * *", timezone: "Asia/Kolkata" }, undefined],
        [
          "every, started in the past",
          { every: "PT4M", startAt: new Date(createdAt - 3 * MINUTE - 500).toISOString() },
          undefined,
        ],
        ["per minute, jittered", { cron: "* * * * *", timezone: "UTC" }, "PT59S"],
      ];
      const jobs: [string, Job][] = [];
      for (const [name, schedule, window] of cases) {
        const { job } = await createJob(
          f.engine,
          testJob({ schedule, ...(window ? { window } : {}) }),
        );
        jobs.push([name, job]);
      }
      for (let tick = 1; tick <= TICKS; tick++) {
        time.ms = createdAt + tick * MINUTE;
        await dispatchShard(f.engine, 0, `tick-${tick}`);
      }
      // Every occurrence planned before the last pass's lookahead is claimed by now.
      const claimedBefore = new Date(time.ms + LOOKAHEAD_MS);

      const seen = jobs.map(([name, job]) => {
        const first = firstOccurrence(job.schedule, new Date(createdAt));
        const planned = (first === null ? [] : occurrences(job.schedule, first, claimedBefore, 100))
          .map((at) => plannedTime(job.jobId, at, windowMsOf(job.window), job.schedule))
          .filter((at) => at < claimedBefore);
        const visible = planned.map((at) => {
          const sends = sent.filter((s) => s.jobId === job.jobId && s.dueAt === at.toISOString());
          // Visible this many ms after its planned time (negative: early, the worker waits).
          const late = sends.map((s) => s.at + s.delaySeconds * SECOND - at.getTime());
          return { sends: sends.length, late: late[0] ?? null };
        });
        return { name, occurrences: planned.length, visible };
      });
      for (const { name, occurrences: count, visible } of seen) {
        expect(count, name).toBeGreaterThan(0);
        for (const { sends, late } of visible) {
          expect({ name, sends }).toEqual({ name, sends: 1 });
          expect(late, name).toBeLessThanOrEqual(0);
          expect(late, name).toBeGreaterThan(-SECOND);
        }
      }
    }, 120_000);
  }
});
