import { describe, expect, it, type TestContext } from "vitest";
import { tickOnce } from "../../shared/dispatch/tick.js";
import type { Engine } from "../../shared/engine.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import { HeldMessages } from "../../shared/execution/held-messages.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, type NewJob, replayDeadLetter } from "../../shared/jobs/index.js";
import { sweepExpired } from "../../shared/storage/expiry-sweep.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { startRun } from "../../shared/storage/run-start.js";
import { writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import {
  holdTenantSlotAnHour,
  reaperPassesThroughOutage,
  storedJobExpiresAt,
} from "../support/outwaiting.js";
import { waitFor } from "../support/wait.js";

/**
 * docs/deploy.md ("Settings"): `retentionDays` and `deadLetterRetentionDays` apply to what is
 * written after them, and a run still waiting to run loses nothing to a retention it outwaits. A
 * job completed by its end expires a retention after its runs could have run, the retention of the
 * claim that completed it; a deploy that raises the setting (1 day to 30) leaves that expiry in
 * place. Its last run, waiting (the workers down, its tenant at its quota, held at the worker
 * loop's gate), keeps the job from its stored expiry (`keepCompletedJobForWaitingRun`), not from
 * the raised setting of the process that looks, and still runs.
 */
const DAY_MS = 24 * 3_600_000;

/** The same stage after a deploy that raised both retentions to 30 days. */
const raised = (engine: Engine): Engine => ({
  ...engine,
  settings: { ...engine.settings, retentionDays: 30, deadLetterRetentionDays: 30 },
});

/**
 * A stage kept at a 1-day retention, its engine clock `state.offsetMs` ahead (the case moves it),
 * and a job of the tenant of one run (`maxRuns` 1) completed by the tick's claim that queues it.
 */
async function completedUnderOneDay(
  onTestFinished: TestContext["onTestFinished"],
  overrides: Partial<NewJob> = {},
) {
  const state = { offsetMs: 0 };
  const clock = () => new Date(Date.now() + state.offsetMs);
  const f: EngineFixture = await createEngineFixture({
    settings: { retentionDays: 1, deadLetterRetentionDays: 1, shardCount: 1, maxShardCount: 1 },
    clock,
  });
  onTestFinished(() => f.destroy());
  const startAt = new Date(Math.ceil((clock().getTime() + 1000) / 1000) * 1000);
  const { job } = await createJob(f.engine, {
    ...testJob({ schedule: { every: "PT1M", startAt: startAt.toISOString() }, maxRuns: 1 }),
    ...overrides,
  });
  state.offsetMs += 1000;
  await tickOnce(f.engine, "claim-under-1-day");
  expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  const statuses = async () =>
    (await f.runs()).filter((r) => r.jobId === job.jobId).map((r) => [r.status, r.reason]);
  return { f, state, clock, job, statuses };
}

/**
 * A job completed under a 1-day retention, its last run re-sent through a day and a half of
 * worker outage and then run, all after the deploy `later` makes of the same tables: the run's status.
 */
async function lastRunAfterOutage(
  later: (engine: Engine) => Engine,
  onTestFinished: TestContext["onTestFinished"],
): Promise<unknown> {
  const { f, state, clock, job, statuses } = await completedUnderOneDay(onTestFinished);
  const next = later(f.engine);

  // The workers are down for a day and a half; the next deploy's tick re-sends the run.
  const advance = (by: number) => {
    state.offsetMs += by;
  };
  await reaperPassesThroughOutage(next, { now: clock, advance }, 1.5 * DAY_MS, DAY_MS);

  // The workers are back (the next deploy's): the first copy runs the job's last run.
  const deps = { ...f.workerDeps("w"), engine: next };
  await f.process(deps, await f.nextDelivery(f.engine.queues.normal, job.jobId));
  return statuses();
}

describe.concurrent("a completed job's last run waiting out a worker outage past its 1-day retention", () => {
  it("runs once the workers are back, the retention unchanged (control)", async ({
    onTestFinished,
  }) => {
    expect(await lastRunAfterOutage((engine) => engine, onTestFinished)).toEqual([
      ["SUCCEEDED", null],
    ]);
  }, 180_000);

  it("runs once the workers are back, after a deploy that raised retentionDays to 30", async ({
    onTestFinished,
  }) => {
    expect(await lastRunAfterOutage(raised, onTestFinished)).toEqual([["SUCCEEDED", null]]);
  }, 180_000);

  it("runs once its tenant's concurrent-runs slot frees, after a deploy that raised retentionDays to 30", async ({
    onTestFinished,
  }) => {
    const tenantId = "busy-tenant-raised";
    const { f, state, clock, job, statuses } = await completedUnderOneDay(onTestFinished, {
      tenantId,
    });
    const next = raised(f.engine);
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 1 }, clock());
    // The tenant's one slot, held by its other runs for an hour from each hold.
    const holdTheSlot = () => holdTenantSlotAnHour(f.engine, tenantId, clock());
    const deps = { ...f.workerDeps("w"), engine: next };
    const deliverOnce = async () =>
      f.process(deps, await f.nextDelivery(f.engine.queues.normal, job.jobId));

    // Requeued at the quota again and again (one of those deliveries at each step here), past
    // the day its claim kept the job for.
    for (const waitDays of [0, 0.8, 0.5]) {
      state.offsetMs += waitDays * DAY_MS;
      expect(await holdTheSlot()).toBe(true);
      await deliverOnce();
    }
    await sweepExpired(next, clock());
    expect(await statuses()).toEqual([
      ["QUEUED", "waiting: tenant at its concurrentRuns quota (1)"],
    ]);

    // The tenant's other runs end: the slot frees, and the run that waited runs.
    state.offsetMs += 3_600_000 + 1000;
    await deliverOnce();
    expect(await statuses()).toEqual([["SUCCEEDED", null]]);
  }, 120_000);

  it("keeps its job while the worker loop holds it at its gate, after a deploy that raised retentionDays to 30", async ({
    onTestFinished,
  }) => {
    const { f, state, clock, job } = await completedUnderOneDay(onTestFinished);
    const next = raised(f.engine);
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // The loop's own monotonic clock, moved with the engine's; a visibility of 6 s looks after
    // the held messages every second.
    let elapsedMs = 0;
    const held = new HeldMessages(next, 6, () => elapsedMs);
    try {
      held.track(received);
      const jobExpiry = () => storedJobExpiresAt(f.engine, job.jobId);
      // Most of a day at the gate, then the next look; the claim kept the job about a day.
      const before = await jobExpiry();
      state.offsetMs += 0.8 * DAY_MS;
      elapsedMs += 0.8 * DAY_MS;
      await waitFor("the held run's job kept", async () => (await jobExpiry()) !== before);
      state.offsetMs += 0.5 * DAY_MS;
      await sweepExpired(next, clock());
      expect((await getJob(next, job.jobId))?.status).toBe("COMPLETED");
    } finally {
      held.untrack(received);
      await held.stop();
    }
  }, 60_000);
});

/**
 * The same seam without an outage: docs/deploy.md ("Settings", `deadLetterRetentionDays`) keeps a
 * completed job as long as its dead letters are listed, "so its dead letters stay replayable while
 * listed". A job completed under 1 day whose last run dies after a deploy raised
 * `deadLetterRetentionDays` to 30 has a dead letter listed for 30 days: the death pushes the job's
 * expiry out to the dead letter's.
 */
/** The stage after a deploy that raised `deadLetterRetentionDays` alone to 30 days. */
const deadLettersRaised = (engine: Engine): Engine => ({
  ...engine,
  settings: { ...engine.settings, deadLetterRetentionDays: 30 },
});

/**
 * Three days after the job's one run died under `next`, well inside its dead letter's 30: the run
 * is listed, and the replay's run, queued.
 */
async function replayedThreeDaysOn(
  o: Awaited<ReturnType<typeof completedUnderOneDay>>,
  next: Engine,
) {
  const [dead] = (await o.f.runs()).filter((r) => r.jobId === o.job.jobId);
  expect(dead?.status).toBe("DEAD");
  o.state.offsetMs += 3 * DAY_MS;
  await sweepExpired(next, o.clock());
  expect(await o.statuses()).toEqual([["DEAD", expect.any(String)]]);
  return (await replayDeadLetter(next, o.job.tenantId, dead?.runId ?? "")).run.status;
}

describe.concurrent("a deploy that raises deadLetterRetentionDays between a job's completion and its last run's death", () => {
  it("keeps the dead letter of a run its worker ends replayable while it is listed", async ({
    onTestFinished,
  }) => {
    const o = await completedUnderOneDay(onTestFinished, {
      type: "fail",
      payload: { times: 1, retryable: false },
    });
    const next = deadLettersRaised(o.f.engine);

    // The raised deploy's worker runs it: it dies, a dead letter listed for 30 days.
    const [queued] = (await o.f.runs()).filter((r) => r.jobId === o.job.jobId);
    if (queued === undefined) throw new Error("no run queued");
    await processRun({ ...o.f.workerDeps("w"), engine: next }, deliveryOfRun(next, queued));
    expect(await replayedThreeDaysOn(o, next)).toBe("QUEUED");
  }, 120_000);

  it("keeps the dead letter of a run the redrive DLQ ends replayable while it is listed", async ({
    onTestFinished,
  }) => {
    const o = await completedUnderOneDay(onTestFinished);
    const next = deadLettersRaised(o.f.engine);

    // Every delivery of its message started it and crashed its worker, the last lease lapsed: the
    // raised deploy's DLQ consumer ends it DEAD.
    const received = await o.f.nextDelivery(o.f.engine.queues.normal, o.job.jobId);
    const { maxReceiveCount, leaseMs } = next.settings;
    for (let start = 1; start < maxReceiveCount; start++) {
      const at = new Date(o.clock().getTime() - (maxReceiveCount - start) * (leaseMs + 1000));
      expect((await startRun(next, received.message, `crash-${start}`, at)).kind).toBe("started");
    }
    await handleCrashedRun(next, received.message, maxReceiveCount);
    expect(await replayedThreeDaysOn(o, next)).toBe("QUEUED");
  }, 120_000);
});
