import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { describe, expect, it, type TestContext } from "vitest";
import { tickOnce } from "../../shared/dispatch/tick.js";
import { HeldMessages } from "../../shared/execution/held-messages.js";
import { recoverLostMessages } from "../../shared/execution/restart-recovery.js";
import { createJob, type NewJob, replayDeadLetter } from "../../shared/jobs/index.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { getJob, runKeyOf } from "../../shared/storage/run-reads.js";
import { writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import {
  holdTenantSlotAnHour,
  reaperPassesThroughOutage,
  storedJobExpiresAt,
} from "../support/outwaiting.js";
import { waitFor } from "../support/wait.js";

const DAY_MS = 24 * 3_600_000;
/**
 * An operator who keeps one day of history and of dead letters (`-c retentionDays=1`,
 * `-c deadLetterRetentionDays=1`, the lowest allowed).
 */
const RETENTION_DAYS = 1;

/**
 * A test's own fixture, whose engine clock runs `state.offsetMs` ahead of the machine's (the test
 * moves it on), with the helpers over them; the fixture is destroyed when the test ends. With
 * tables, queues and a clock of their own, the cases run side by side (`describe.concurrent`).
 */
async function outage(onTestFinished: TestContext["onTestFinished"]) {
  const state = { offsetMs: 0 };
  const clock = () => new Date(Date.now() + state.offsetMs);
  const f: EngineFixture = await createEngineFixture({
    // One shard: each of the reaper's passes through a day and a half read the default's 8, its
    // cursor and index for each, where the runs here lie on one; which shard a run's entry is on
    // changes nothing its re-sends and its TTL do.
    settings: {
      retentionDays: RETENTION_DAYS,
      deadLetterRetentionDays: RETENTION_DAYS,
      shardCount: 1,
      maxShardCount: 1,
    },
    clock,
  });
  onTestFinished(() => f.destroy());

  /** A one-off of the tenant's due at the engine clock's next second. */
  async function oneOffDueNextSecond(tenantId?: string) {
    const runAt = new Date(Math.ceil((clock().getTime() + 1000) / 1000) * 1000);
    const spec = testJob({ schedule: { runAt: runAt.toISOString() } });
    const { job } = await createJob(
      f.engine,
      tenantId === undefined ? spec : { ...spec, tenantId },
    );
    return { job, runAt };
  }

  /**
   * The workers are down for `ms`: the tick's reaper re-sends what waits every few minutes (each
   * pass a tick that found the run due again), and DynamoDB's TTL deletes what has expired, at any
   * time (on AWS within days of it); the passes that bear on the retention are made
   * (`reaperPassesThroughOutage`). Returns when the last re-send was.
   */
  const workersDownFor = (ms: number): Promise<number> =>
    reaperPassesThroughOutage(
      f.engine,
      {
        now: clock,
        advance: (by) => {
          state.offsetMs += by;
        },
      },
      ms,
      RETENTION_DAYS * DAY_MS,
    );

  /** The tenant's one concurrent-runs slot, held by its other runs for an hour from now. */
  const holdTheSlot = (tenantId: string) => holdTenantSlotAnHour(f.engine, tenantId, clock());

  /** The reaper deadline of a run (its `inflight` entry's sort key). */
  const reaperDeadlineOf = async (received: { message: Parameters<typeof runKeyOf>[0] }) =>
    (
      await f.engine.doc.send(
        new GetCommand({ TableName: f.engine.tables.runs, Key: runKeyOf(received.message) }),
      )
    ).Item?.inflightSk;

  /**
   * A job of one run a minute from the engine clock's minute after next, `maxRuns` 1, whose first
   * occurrence a tick (`tickName`) claims: the claim completes the job and queues its one run.
   */
  async function completedByItsClaim(tickName: string, overrides: Partial<NewJob> = {}) {
    const startAt = new Date(Math.ceil((clock().getTime() + 120_000) / 60_000) * 60_000);
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { every: "PT1M", startAt: startAt.toISOString() },
        maxRuns: 1,
        ...overrides,
      }),
    );
    state.offsetMs = startAt.getTime() - Date.now() + 1000;
    await tickOnce(f.engine, tickName);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
    return job;
  }

  /** A worker runs the job's next message: its one run succeeds and the one-off completes. */
  async function expectRunOnceAndComplete(jobId: string) {
    const delivery = await f.nextDelivery(f.engine.queues.normal, jobId);
    await f.process(f.workerDeps("w"), delivery);
    const runs = (await f.runs()).filter((r) => r.jobId === jobId);
    expect(runs.map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect((await getJob(f.engine, jobId))?.status).toBe("COMPLETED");
  }

  return {
    f,
    clock,
    state,
    oneOffDueNextSecond,
    workersDownFor,
    holdTheSlot,
    reaperDeadlineOf,
    completedByItsClaim,
    expectRunOnceAndComplete,
  };
}

/**
 * The workers are down (their event sources disabled, a broken deploy) for longer than the run
 * history's retention while the tick runs on: the runs they would have run wait QUEUED, and the
 * reaper re-sends each every 15 minutes. DynamoDB's TTL (the expiry sweep here) must not delete a
 * run that has not ended: its job would never run it and its history would say nothing.
 */
describe.concurrent("a worker outage longer than the retention", () => {
  it("a one-off queued before it still runs once the workers are back, and its job completes", async ({
    onTestFinished,
  }) => {
    const o = await outage(onTestFinished);
    const { clock } = o;
    const { job, runAt } = await o.oneOffDueNextSecond();
    // A day and a half from its due time.
    await o.workersDownFor(runAt.getTime() + 1.5 * RETENTION_DAYS * DAY_MS - clock().getTime());

    // The workers are back: the first copy in the queue runs the one-off (fire_once: late, it is
    // the most recent occurrence).
    await o.expectRunOnceAndComplete(job.jobId);
  }, 120_000);
});

/**
 * A recurring job whose last occurrence is claimed completes with the claim (maxRuns, endAt), and
 * expires a retention after its runs can have run: its run, waiting QUEUED through a worker outage
 * longer than that, needs the job when it starts, and a job taken as gone ends it unrun.
 */
describe.concurrent("a job completed by its end, its last run waiting out a worker outage past the job's retention", () => {
  it("keeps the job until the run has run", async ({ onTestFinished }) => {
    const o = await outage(onTestFinished);
    const { f } = o;
    const job = await o.completedByItsClaim("outage-after-end");
    expect((await f.runs()).filter((r) => r.jobId === job.jobId).map((r) => r.status)).toEqual([
      "QUEUED",
    ]);
    // A day and a half (the job's retention ends after about 1 day 4.5 hours).
    await o.workersDownFor(1.5 * RETENTION_DAYS * DAY_MS);

    await o.expectRunOnceAndComplete(job.jobId);
  }, 120_000);
});

/**
 * The last run of a job completed by its end, kept through an outage past the job's retention by
 * the reaper's re-sends, starts only when a worker takes a copy: up to a re-send interval after
 * the last re-send, and its attempts then take up to the job's attempts span. Should it die, its
 * dead letter is listed a retention from its death: a COMPLETED job's dead letters are replayable
 * as long as they are listed (docs/api.md, retention), so the job must be kept as long.
 */
describe.concurrent("a job completed by its end, its last run dying after an outage past the job's retention", () => {
  it("keeps the job as long as the dead letter is listed", async ({ onTestFinished }) => {
    const o = await outage(onTestFinished);
    const { f, clock } = o;
    const job = await o.completedByItsClaim("outage-then-dead", {
      type: "fail",
      payload: { times: 1, retryable: false },
    });
    const lastResend = await o.workersDownFor(1.5 * RETENTION_DAYS * DAY_MS);
    // A worker takes a copy ten minutes after the last re-send: the run fails, not retryable.
    o.state.offsetMs += 10 * 60_000;
    await f.process(f.workerDeps("w"), await f.nextDelivery(f.engine.queues.normal, job.jobId));
    const [dead] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(dead?.status).toBe("DEAD");

    // A retention and five minutes after the last re-send: the dead letter, a retention from its
    // death, is still listed, and so its job is kept.
    o.state.offsetMs = lastResend - Date.now() + RETENTION_DAYS * DAY_MS + 5 * 60_000;
    await sweepExpired(f.engine, clock());
    const replay = await replayDeadLetter(f.engine, job.tenantId, dead?.runId ?? "");
    expect(replay.run.status).toBe("QUEUED");
  }, 120_000);
});

/**
 * A tenant at its `concurrentRuns` quota for longer than the retention (its runs follow one
 * another without a gap): a run over the quota waits, QUEUED, "however late" (docs/api.md), and
 * is delivered again every few seconds with a requeue write each time. Its TTL must follow.
 */
describe.concurrent("a run waiting on its tenant's concurrent-runs quota longer than the retention", () => {
  it("runs once a slot frees, its job completes", async ({ onTestFinished }) => {
    const o = await outage(onTestFinished);
    const { f, clock } = o;
    const tenantId = "busy-tenant";
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 1 }, clock());
    const { job } = await o.oneOffDueNextSecond(tenantId);
    const deps = f.workerDeps("w");
    const deliverOnce = async () =>
      f.process(deps, await f.nextDelivery(f.engine.queues.normal, job.jobId));
    const status = async () =>
      (await f.runs()).filter((r) => r.jobId === job.jobId).map((r) => [r.status, r.reason]);

    expect(await o.holdTheSlot(tenantId)).toBe(true);
    o.state.offsetMs += 1000;
    await deliverOnce();
    expect(await status()).toEqual([["QUEUED", "waiting: tenant at its concurrentRuns quota (1)"]]);
    // It waits on, delivered again and again (every 60 s at most: one of those deliveries here).
    o.state.offsetMs += 0.8 * RETENTION_DAYS * DAY_MS;
    expect(await o.holdTheSlot(tenantId)).toBe(true);
    await deliverOnce();
    expect((await status()).map(([s]) => s)).toEqual(["QUEUED"]);
    o.state.offsetMs += 0.5 * RETENTION_DAYS * DAY_MS;
    expect(await o.holdTheSlot(tenantId)).toBe(true);
    await deliverOnce();
    await sweepExpired(f.engine, clock());

    // The tenant's other runs end: the slot frees, and the run that waited runs.
    o.state.offsetMs += 3_600_000 + 1000;
    await deliverOnce();
    expect((await status()).map(([s]) => s)).toEqual(["SUCCEEDED"]);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  }, 120_000);

  it("the last run of a job completed by its maxRuns runs once a slot frees, its job kept", async ({
    onTestFinished,
  }) => {
    const o = await outage(onTestFinished);
    const { f, clock } = o;
    const tenantId = "busy-tenant-ended";
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 1 }, clock());
    const startAt = new Date(Math.ceil((clock().getTime() + 1000) / 1000) * 1000);
    const { job } = await createJob(f.engine, {
      ...testJob({ schedule: { every: "PT1M", startAt: startAt.toISOString() }, maxRuns: 1 }),
      tenantId,
    });
    const deps = f.workerDeps("w");
    const deliverOnce = async () =>
      f.process(deps, await f.nextDelivery(f.engine.queues.normal, job.jobId));
    const status = async () =>
      (await f.runs()).filter((r) => r.jobId === job.jobId).map((r) => [r.status, r.reason]);

    expect(await o.holdTheSlot(tenantId)).toBe(true);
    o.state.offsetMs += 1000;
    await tickOnce(f.engine, "quota-after-end");
    await deliverOnce();
    expect(await status()).toEqual([["QUEUED", "waiting: tenant at its concurrentRuns quota (1)"]]);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
    // Its job's retention ends about 1 day 4.5 hours after its claim; the run waits longer.
    o.state.offsetMs += 0.8 * RETENTION_DAYS * DAY_MS;
    expect(await o.holdTheSlot(tenantId)).toBe(true);
    await deliverOnce();
    o.state.offsetMs += 0.5 * RETENTION_DAYS * DAY_MS;
    expect(await o.holdTheSlot(tenantId)).toBe(true);
    await deliverOnce();
    await sweepExpired(f.engine, clock());
    // Past the retention its claim gave the job, the run still waits for it.
    expect((await status()).map(([s]) => s)).toEqual(["QUEUED"]);

    o.state.offsetMs += 3_600_000 + 1000;
    await deliverOnce();
    expect(await status()).toEqual([["SUCCEEDED", null]]);
  }, 120_000);
});

/**
 * The long-lived worker holds a capped tenant's messages at its gate, unstarted and QUEUED, until
 * the tenant's runs ahead end, moving each run's reaper deadline on every half lease
 * (held-messages.ts). Held longer than the retention, the run's TTL must follow too.
 */
describe.concurrent("a run the worker loop holds at its tenant's gate longer than the retention", () => {
  it("is still there to run when the gate lets it on", async ({ onTestFinished }) => {
    const o = await outage(onTestFinished);
    const { f, clock } = o;
    const { job } = await o.oneOffDueNextSecond();
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // The loop's own monotonic clock, moved with the engine's.
    let elapsedMs = 0;
    // A visibility of 6 s looks after the held messages every second.
    const held = new HeldMessages(f.engine, 6, () => elapsedMs);
    try {
      held.track(received);
      const runOf = async () => (await f.runs()).find((r) => r.jobId === job.jobId);
      // Most of a day at the gate: the next look after it keeps the run from the reaper.
      const waitMs = 0.8 * RETENTION_DAYS * DAY_MS;
      o.state.offsetMs += waitMs;
      elapsedMs += waitMs;
      const deadline = () => o.reaperDeadlineOf(received);
      const before = await deadline();
      await waitFor("the held run's deadline moved on", async () => (await deadline()) !== before);
      // Half a day more: the retention after the run was queued has passed, and TTL deletes.
      o.state.offsetMs += 0.5 * RETENTION_DAYS * DAY_MS;
      await sweepExpired(f.engine, clock());
      expect((await runOf())?.status).toBe("QUEUED");
    } finally {
      held.untrack(received);
      await held.stop();
    }
  }, 60_000);

  it("keeps the job of a run it holds, completed by its maxRuns, past the job's retention", async ({
    onTestFinished,
  }) => {
    const o = await outage(onTestFinished);
    const { f, clock } = o;
    const startAt = new Date(Math.ceil((clock().getTime() + 1000) / 1000) * 1000);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1M", startAt: startAt.toISOString() }, maxRuns: 1 }),
    );
    o.state.offsetMs += 1000;
    await tickOnce(f.engine, "held-after-end");
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    let elapsedMs = 0;
    const held = new HeldMessages(f.engine, 6, () => elapsedMs);
    try {
      held.track(received);
      const jobExpiry = () => storedJobExpiresAt(f.engine, job.jobId);
      // Most of a day at the gate, then the next look; the job's retention from its claim ends
      // about 1 day 4.5 hours after it.
      const waitMs = 0.8 * RETENTION_DAYS * DAY_MS;
      o.state.offsetMs += waitMs;
      elapsedMs += waitMs;
      const before = await jobExpiry();
      // The look keeps the job after it moves the run's deadline on: waited for itself, not the
      // deadline (a loaded machine swept between the two, and the job was gone).
      await waitFor("the held run's job kept", async () => (await jobExpiry()) !== before);
      o.state.offsetMs += 0.5 * RETENTION_DAYS * DAY_MS;
      await sweepExpired(f.engine, clock());
      expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
    } finally {
      held.untrack(received);
      await held.stop();
    }
  }, 60_000);
});

/**
 * The sandbox stopped for longer than the retention (its tables kept on disk, its queues in
 * memory): at start it re-sends every run in flight, then sweeps what has expired.
 */
describe.concurrent("a sandbox restarted after a stop longer than the retention", () => {
  it("runs the one-off that was queued when it stopped", async ({ onTestFinished }) => {
    const o = await outage(onTestFinished);
    const { f, clock } = o;
    const { job } = await o.oneOffDueNextSecond();
    await f.purge();
    o.state.offsetMs += 1.5 * RETENTION_DAYS * DAY_MS;
    // The start's order: the recovery's re-sends, then the expiry sweep.
    await recoverLostMessages(f.engine);
    await sweepExpired(f.engine, clock());

    await o.expectRunOnceAndComplete(job.jobId);
  }, 60_000);
});
