import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import { receiveRuns } from "../../shared/queue/work-queue.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

/**
 * docs/api.md "Quotas": an edit that keeps a job's measure (a per-second job given a new
 * `startAt`, its phase moved by a fraction of a second) reserves nothing, and its fast path queues
 * the new schedule's next minutes at once. Under `inFlight: "complete"` the runs the old schedule
 * had queued run too (docs/api.md, Edit), so each such edit adds up to the job's measure to each of
 * the minutes the old schedule had queued (a claim's reach, 14 minutes): k edits, up to k + 1
 * times the measure in a minute. The case pins that bound, reached (adversarial review h77, whose
 * case expected the measure itself: 'expected 300 to be less than or equal to 60').
 */
const SECOND = 1000;
const MINUTE = 60 * SECOND;

describe("runsPerMinute against schedule edits under inFlight: complete", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    // The shortest lookahead: each phase queues its runs to its horizon (three minutes: a run a
    // second), past the minute counted.
    f = await createEngineFixture({
      settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0, lookaheadMs: 60_000 },
    });
  });
  afterAll(() => f.destroy());

  it("a per-second job at runsPerMinute: 60, its phase edited four times, has up to 5 × 60 runs queued in one minute, and an old phase's run runs", async () => {
    const tenant = "h77-inflight-complete";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 60 }, new Date());
    const start = Math.ceil((Date.now() + 5 * SECOND) / SECOND) * SECOND;
    const created = await createJob(
      f.engine,
      testJob({
        tenantId: tenant,
        schedule: { every: "PT1S", startAt: new Date(start).toISOString() },
        policies: {
          ...testJob().policies,
          overlap: "allow",
          maxConcurrent: 10,
          inFlight: "complete",
        },
      }),
    );
    let version = created.job.version;
    // Four edits of the phase: each keeps the measure (60), so each is accepted at the limit.
    const shifts = [200, 400, 600, 800];
    for (const shiftMs of shifts) {
      const edited = await editJob(f.engine, tenant, created.job.jobId, version, {
        schedule: { every: "PT1S", startAt: new Date(start + shiftMs).toISOString() },
      });
      version = edited.version;
    }
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ runsPerMinute: 60 });
    const from = start + MINUTE;
    const queued = (await f.runs()).filter((r) => {
      const at = Date.parse(r.scheduledFor);
      return (
        r.jobId === created.job.jobId && r.status === "QUEUED" && at >= from && at < from + MINUTE
      );
    });

    // A run of the first phase (the create's schedule, replaced four times: its occurrences fall
    // on whole seconds) is delivered and runs. The other phases' messages are left hidden.
    let ranFirstPhase: string | undefined;
    const deadline = Date.now() + 60 * SECOND;
    while (ranFirstPhase === undefined && Date.now() < deadline) {
      const batch = await receiveRuns(f.engine.sqs, f.engine.queues.normal, {
        max: 10,
        waitSeconds: 1,
        visibilitySeconds: 600,
      });
      const mine = batch.find((r) => r.message.scheduledFor.endsWith(".000Z"));
      if (mine) {
        await f.process(f.workerDeps("w"), mine);
        const run = (await f.runs()).find(
          (r) => r.jobId === mine.message.jobId && r.scheduledFor === mine.message.scheduledFor,
        );
        ranFirstPhase = `${run?.scheduledFor} ${run?.status}`;
      }
    }
    expect(ranFirstPhase).toMatch(/\.000Z SUCCEEDED$/);
    // Past the quota, as docs/api.md states, and within its bound: (k + 1) × the measure (each
    // phase's 60 runs of that minute; 300 measured).
    expect(queued.length).toBeGreaterThan(60);
    expect(queued.length).toBeLessThanOrEqual((shifts.length + 1) * 60);
  }, 120_000);
});
