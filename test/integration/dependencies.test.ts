import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { fanOutTrigger } from "../../shared/dispatch/trigger-fan-out.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import {
  cancelJob,
  createJob,
  deleteJob,
  editJob,
  pauseJob,
  replayDeadLetter,
  resumeJob,
} from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job, Run, RunTrigger } from "../../shared/model.js";
import { METRICS } from "../../shared/observability.js";
import { type AfterOn, isAfterSchedule } from "../../shared/schedule/index.js";
import { startRun } from "../../shared/storage/run-start.js";
import { listSetAsideEntries } from "../../shared/storage/set-aside.js";
import { ValidationError } from "../../shared/validation.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";

type Input = Record<string, unknown>;
type TransactItem = Record<string, { Item?: Record<string, unknown> } | undefined>;
const transactItems = (input: Input) => (input.TransactItems as TransactItem[] | undefined) ?? [];

/** A fan-out's write for `dependentId` (or any dependent): it puts the TRIGGERED# record. */
const isFanOutTo = (dependentId?: string) => (input: Input) =>
  transactItems(input).some((item) => {
    const put = item.Put?.Item;
    return (
      String(put?.sk).startsWith("TRIGGERED#") &&
      (dependentId === undefined || put?.pk === `JOB#${dependentId}`)
    );
  });

describe("dependencies: a job runs after other jobs", () => {
  let f: EngineFixture;
  const seen: JobContext[] = [];
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  const deps = (engine = f.engine) => ({
    ...f.workerDeps("worker", {
      record: async (ctx: JobContext) => {
        seen.push(ctx);
      },
    }),
    engine,
  });

  const upstreamJob = (overrides: Partial<Parameters<typeof testJob>[0]> = {}) =>
    createJob(
      f.engine,
      testJob({
        type: "record",
        schedule: { runAt: new Date().toISOString() },
        ...overrides,
      }),
    ).then((created) => created.job);

  const dependentOf = (upstreams: readonly Job[], on: AfterOn = "success", type = "record") =>
    createJob(
      f.engine,
      testJob({
        type,
        schedule: { after: { jobs: upstreams.map((u) => u.jobId), on } },
      }),
    ).then((created) => created.job);

  const runsOf = async (jobId: string): Promise<Run[]> =>
    (await f.runs()).filter((r) => r.jobId === jobId && r.status !== undefined);

  /** Delivers the job's next message to a worker on `engine` and processes it. */
  async function runNext(jobId: string, engine = f.engine): Promise<void> {
    const received = await f.nextDelivery(f.engine.queues.normal, jobId);
    expect(await f.process(deps(engine), received)).toBe("ack");
  }

  /**
   * Runs each upstream's next run with every fan-out to `dependentId` (to any dependent when
   * none is named) refused as a crash would leave it: its trigger entry is left to a pass. How
   * many fan-outs were refused.
   */
  async function runWithFanOutsRefused(upstreamIds: string[], dependentId?: string) {
    const crashing = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: 1_000,
      match: isFanOutTo(dependentId),
      reason: "ValidationError",
    });
    try {
      for (const jobId of upstreamIds) await runNext(jobId, crashing.engine);
      return crashing.injected.count;
    } finally {
      crashing.destroy();
    }
  }

  const triggerEntries = async (jobId: string) =>
    (await f.dueEntries()).filter((d) => d.kind === "trigger" && d.jobId === jobId);

  it("a chain A → B → C: each success queues exactly one run of the next, which records and sees its upstream", async () => {
    const a = await upstreamJob();
    const b = await dependentOf([a]);
    const c = await dependentOf([b]);
    expect(b.status).toBe("ACTIVE");
    expect(b.nextRunAt).toBeNull();
    expect((await getTenantJob(f.engine, a.tenantId, a.jobId)).dependents).toEqual([b.jobId]);
    expect((await getTenantJob(f.engine, a.tenantId, b.jobId)).dependents).toEqual([c.jobId]);

    await runNext(a.jobId);
    const [aRun] = await runsOf(a.jobId);
    expect(aRun?.status).toBe("SUCCEEDED");
    await runNext(b.jobId);
    const [bRun, ...moreB] = await runsOf(b.jobId);
    expect(moreB).toEqual([]);
    expect(bRun?.status).toBe("SUCCEEDED");
    expect(bRun?.trigger).toEqual({
      jobId: a.jobId,
      runId: aRun?.runId,
      scheduledFor: aRun?.scheduledFor,
    } satisfies Partial<RunTrigger>);
    await runNext(c.jobId);
    const [cRun, ...moreC] = await runsOf(c.jobId);
    expect(moreC).toEqual([]);
    expect(cRun?.trigger?.runId).toBe(bRun?.runId);
    expect(seen.find((ctx) => ctx.jobId === c.jobId)?.trigger).toEqual(cRun?.trigger);
    // The worker fanned out right away: no trigger entry is left for a pass.
    expect(await triggerEntries(a.jobId)).toEqual([]);
    await dispatchShard(f.engine, 0, "chain-pass");
    expect(await runsOf(b.jobId)).toHaveLength(1);
    expect(await runsOf(c.jobId)).toHaveLength(1);
  });

  it("a crash between the upstream's ending and its fan-out: the next pass queues the dependent exactly once", async () => {
    const a = await upstreamJob();
    const b = await dependentOf([a]);
    expect(await runWithFanOutsRefused([a.jobId])).toBeGreaterThan(0);
    expect((await runsOf(a.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect(await runsOf(b.jobId)).toEqual([]);
    const [entry, ...more] = await triggerEntries(a.jobId);
    expect(more).toEqual([]);
    expect(entry?.fanOut).toMatchObject({ status: "SUCCEEDED", dependents: [b.jobId] });

    await dispatchShard(f.engine, 0, "recovery-pass");
    await dispatchShard(f.engine, 0, "second-pass");
    expect((await runsOf(b.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);
    expect(await triggerEntries(a.jobId)).toEqual([]);
    await runNext(b.jobId);
    expect((await runsOf(b.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
  });

  it("a fan-out DynamoDB refuses in a dispatcher pass is tried again by a later pass, not set aside for good", async () => {
    const a = await upstreamJob();
    const b = await dependentOf([a]);
    await runWithFanOutsRefused([a.jobId], b.jobId);
    const refiled = () => f.metrics.sum(METRICS.dueEntryFailures, { handling: "refiled" });
    const refiledBefore = refiled();
    const pass = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: 1,
      match: isFanOutTo(b.jobId),
      reason: "ValidationError",
    });
    try {
      await dispatchShard(pass.engine, 0, "refused-pass");
      expect(pass.injected.count).toBe(1);
    } finally {
      pass.destroy();
    }
    // Counted apart from the transient `left`: it is what the set-aside alarm watches too.
    expect(refiled()).toBe(refiledBefore + 1);
    expect(await runsOf(b.jobId)).toEqual([]);
    // Still a trigger entry: nothing of it is set aside, where no pass nor edit would fan it out.
    expect(await triggerEntries(a.jobId)).toHaveLength(1);
    expect(
      (await listSetAsideEntries(f.engine, 0)).filter((s) => s.entry.jobId === a.jobId),
    ).toEqual([]);
    const later = {
      ...f.engine,
      clock: () => new Date(Date.now() + f.engine.settings.lookaheadMs + 60_000),
    };
    await dispatchShard(later, 0, "later-pass");
    expect((await runsOf(b.jobId)).map((r) => [r.status, r.trigger?.jobId])).toEqual([
      ["QUEUED", a.jobId],
    ]);
    expect(await triggerEntries(a.jobId)).toEqual([]);
  });

  it("two fan-outs to one dependent in one millisecond: the run moved a millisecond on is due at its occurrence, not before", async () => {
    const [a1, a2] = [await upstreamJob(), await upstreamJob()];
    if (!a1 || !a2) throw new Error("upstreams not created");
    const b = await dependentOf([a1, a2]);
    // Both upstream runs succeed, their fan-outs left to a pass (each refused once by a crash).
    await runWithFanOutsRefused([a1.jobId, a2.jobId], b.jobId);
    const entries = [...(await triggerEntries(a1.jobId)), ...(await triggerEntries(a2.jobId))];
    expect(entries).toHaveLength(2);
    // Both fanned out at one instant: the second run of b takes the millisecond after the first.
    const at = Date.now();
    const frozen = { ...f.engine, clock: () => new Date(at) };
    for (const entry of entries) await fanOutTrigger(frozen, entry);
    const runs = (await runsOf(b.jobId)).map((r) => ({
      scheduledFor: r.scheduledFor,
      dueAt: r.dueAt,
    }));
    const twin = new Date(at + 1).toISOString();
    expect(runs.map((r) => r.scheduledFor).sort()).toEqual([new Date(at).toISOString(), twin]);
    // Its worker waits for its message's dueAt, never past it, before it starts the run.
    for (const run of runs) expect(run.dueAt >= run.scheduledFor, JSON.stringify(run)).toBe(true);
    const delivered = await f.nextDeliveryOfRun({ jobId: b.jobId, scheduledFor: twin, attempt: 1 });
    expect(delivered.message.dueAt).toBe(twin);
  });

  it("a crash midway through a fan-out, and fan-outs of one entry at once: each dependent gets exactly one run", async () => {
    const a = await upstreamJob();
    const [b1, b2, b3] = [await dependentOf([a]), await dependentOf([a]), await dependentOf([a])];
    if (!b1 || !b2 || !b3) throw new Error("dependents not created");
    await runWithFanOutsRefused([a.jobId], b2.jobId);
    expect(await runsOf(b1.jobId)).toHaveLength(1);
    expect(await runsOf(b2.jobId)).toHaveLength(0);
    expect(await runsOf(b3.jobId)).toHaveLength(1);
    const [entry] = await triggerEntries(a.jobId);
    if (entry === undefined) throw new Error("the trigger entry is gone");
    await Promise.all([
      fanOutTrigger(f.engine, entry),
      fanOutTrigger(f.engine, entry),
      dispatchShard(f.engine, 0, "racing-pass"),
    ]);
    await fanOutTrigger(f.engine, entry);
    for (const dependent of [b1, b2, b3]) {
      const runs = await runsOf(dependent.jobId);
      expect(runs).toHaveLength(1);
      expect(runs[0]?.trigger?.jobId).toBe(a.jobId);
    }
  });

  it("on failure and on completion: a DEAD upstream run queues those dependents, not the ones on success", async () => {
    const a = await upstreamJob({
      type: "fail",
      payload: { retryable: false },
    });
    const onSuccess = await dependentOf([a], "success");
    const onFailure = await dependentOf([a], "failure");
    const onCompletion = await dependentOf([a], "completion");
    await runNext(a.jobId);
    expect((await runsOf(a.jobId)).map((r) => r.status)).toEqual(["DEAD"]);
    expect(await runsOf(onSuccess.jobId)).toEqual([]);
    expect((await runsOf(onFailure.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);
    expect((await runsOf(onCompletion.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);

    const ok = await upstreamJob();
    const okFailure = await dependentOf([ok], "failure");
    const okCompletion = await dependentOf([ok], "completion");
    await runNext(ok.jobId);
    expect(await runsOf(okFailure.jobId)).toEqual([]);
    expect(await runsOf(okCompletion.jobId)).toHaveLength(1);
  });

  it("a replayed dead upstream run is a run of its own: the dead run's trigger stands, and the replay's ending triggers again, once", async () => {
    const a = await upstreamJob({ type: "fail", payload: { times: 1, retryable: false } });
    const onSuccess = await dependentOf([a], "success");
    const onFailure = await dependentOf([a], "failure");
    const onCompletion = await dependentOf([a], "completion");
    await runNext(a.jobId);
    const [dead] = await runsOf(a.jobId);
    expect(dead?.status).toBe("DEAD");
    const replay = (await replayDeadLetter(f.engine, a.tenantId, dead?.runId ?? "")).run;
    const received = await f.nextDeliveryOfRun(replay);
    expect(await f.process(deps(), received)).toBe("ack");
    // The replay's message delivered again (at least once) and a pass: nothing more is queued.
    await f.process(deps(), received);
    await dispatchShard(f.engine, 0, "replayed-upstream-pass");
    const triggeredBy = async (job: Job) =>
      (await runsOf(job.jobId)).map((r) => r.trigger?.runId).sort();
    expect(await triggeredBy(onSuccess)).toEqual([replay.runId]);
    expect(await triggeredBy(onFailure)).toEqual([dead?.runId]);
    expect(await triggeredBy(onCompletion)).toEqual([dead?.runId, replay.runId].sort());
  });

  it("a failed attempt that is retried triggers nothing until the occurrence ends", async () => {
    const a = await upstreamJob({
      type: "fail",
      payload: { times: 1 },
      policies: {
        ...testJob().policies,
        retry: { maxAttempts: 3, initialDelayMs: 1000, maxDelayMs: 1000 },
      },
    });
    const onCompletion = await dependentOf([a], "completion");
    await runNext(a.jobId);
    expect((await runsOf(a.jobId)).map((r) => r.status)).toEqual(["FAILED", "QUEUED"]);
    expect(await runsOf(onCompletion.jobId)).toEqual([]);
    await runNext(a.jobId);
    expect((await runsOf(onCompletion.jobId)).map((r) => r.trigger?.runId)).toEqual([
      (await runsOf(a.jobId)).find((r) => r.status === "SUCCEEDED")?.runId,
    ]);
  });

  it("an edit of the dependent while its triggered run waits does not skip that run", async () => {
    const a = await upstreamJob();
    const b = await dependentOf([a]);
    await runNext(a.jobId);
    expect((await runsOf(b.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);
    await editJob(f.engine, b.tenantId, b.jobId, b.version, { name: "renamed" });
    await runNext(b.jobId);
    const [run] = await runsOf(b.jobId);
    expect([run?.status, run?.executedVersion]).toEqual(["SUCCEEDED", b.version + 1]);
  });

  it.each(["fire_once", "skip"] as const)(
    "a triggered run on a whole second, its dependent edited to a cron naming that second of every minute since before it starts late, runs (misfire %s does not skip it)",
    async (misfire) => {
      const a = await upstreamJob();
      const b = await createJob(
        f.engine,
        testJob({
          type: "record",
          schedule: { after: { jobs: [a.jobId], on: "success" } },
          policies: { ...testJob().policies, misfire },
        }),
      ).then((created) => created.job);
      expect(await runWithFanOutsRefused([a.jobId], b.jobId)).toBeGreaterThan(0);
      const [entry] = await triggerEntries(a.jobId);
      if (!entry) throw new Error("no trigger entry left for a pass");
      // The fan-out ran on a whole second five minutes ago (its worker, or a pass, on time); the
      // workers were down since, so the run starts well past the misfire grace.
      const onTheSecond = Math.floor(Date.now() / 1000) * 1000 - 5 * 60_000;
      const fannedOut = await fanOutTrigger(
        { ...f.engine, clock: () => new Date(onTheSecond) },
        entry,
      );
      expect(fannedOut.queued).toBe(1);
      const [triggered] = await runsOf(b.jobId);
      if (!triggered) throw new Error("the fan-out wrote no run");
      expect(triggered.scheduledFor).toBe(new Date(onTheSecond).toISOString());
      // Meanwhile the dependent gets a schedule of which the run's instant is one occurrence,
      // though the schedule never queued it, and whose later occurrences (that second of each
      // minute since, the last within the minute before now) would stand in for it under both
      // policies were it a scheduled run. Not a per-second cron: the edit's claim queued its next
      // 14 minutes (840 runs) and the cancel ended them, half the file's requests; the hours and
      // minutes named reach no occurrence within a claim's 14 minutes ahead.
      const since = new Date(onTheSecond);
      const minutes = new Set<number>();
      const hours = new Set<number>();
      for (let at = onTheSecond; at <= Date.now(); at += 60_000) {
        minutes.add(new Date(at).getUTCMinutes());
        hours.add(new Date(at).getUTCHours());
      }
      await editJob(f.engine, b.tenantId, b.jobId, b.version, {
        schedule: {
          cron: `${since.getUTCSeconds()} ${[...minutes].join(",")} ${[...hours].join(",")} * * *`,
          timezone: "UTC",
        },
      });
      const delivery = await f.nextDeliveryOfRun(triggered);
      expect(await f.process(deps(), delivery)).toBe("ack");
      const ended = (await runsOf(b.jobId)).find((r) => r.runId === triggered.runId);
      expect([ended?.status, ended?.reason ?? null]).toEqual(["SUCCEEDED", null]);
      expect(seen.filter((ctx) => ctx.runId === triggered.runId)).toHaveLength(1);
      await cancelJob(f.engine, b.tenantId, b.jobId);
    },
  );

  it("a run the redrive DLQ marks DEAD triggers the failure dependents, once, through the next pass", async () => {
    const a = await upstreamJob();
    const onFailure = await dependentOf([a], "failure");
    const onSuccess = await dependentOf([a], "success");
    const received = await f.nextDelivery(f.engine.queues.normal, a.jobId);
    // Every delivery crashed its worker after the start: started as often as the redrive allows,
    // the last lease lapsing now, so that the trigger entry the DLQ writes is due now. (Counted
    // from now, it was due maxReceiveCount leases ahead, past the lookahead, and the pass claimed
    // it only when the horizon's minute happened to reach that far: about one run in twelve.)
    const { leaseMs, maxReceiveCount } = f.engine.settings;
    const base = Date.now() - maxReceiveCount * (leaseMs + 1000);
    for (let i = 0; i < maxReceiveCount; i++) {
      const at = new Date(base + i * (leaseMs + 1000));
      const started = await startRun(f.engine, received.message, `crashed-${i}`, at);
      expect(started.kind, `start ${i}: ${JSON.stringify(started)}`).toBe("started");
    }
    const diedAt = new Date(base + maxReceiveCount * (leaseMs + 1000));
    const late = { ...f.engine, clock: () => diedAt };
    await handleCrashedRun(late, received.message, maxReceiveCount);
    await handleCrashedRun(late, received.message, maxReceiveCount);
    expect((await runsOf(a.jobId)).map((r) => r.status)).toEqual(["DEAD"]);
    expect(await triggerEntries(a.jobId)).toHaveLength(1);
    await dispatchShard(f.engine, 0, "dlq-pass");
    await dispatchShard(f.engine, 0, "dlq-second-pass");
    const runs = await runsOf(onFailure.jobId);
    expect(runs.map((r) => [r.status, r.trigger?.jobId])).toEqual([["QUEUED", a.jobId]]);
    expect(await runsOf(onSuccess.jobId)).toEqual([]);
  });

  it("fans out to 100 dependents, one run each", async () => {
    const a = await upstreamJob();
    const dependents: Job[] = [];
    for (let i = 0; i < 100; i++) dependents.push(await dependentOf([a], "success", "noop"));
    expect((await getTenantJob(f.engine, a.tenantId, a.jobId)).dependents).toHaveLength(100);
    await runNext(a.jobId);
    await dispatchShard(f.engine, 0, "fan-out-pass");
    const runs = (await f.runs()).filter(
      (r) => r.status !== undefined && r.trigger?.jobId === a.jobId,
    );
    expect(runs).toHaveLength(100);
    expect(new Set(runs.map((r) => r.jobId))).toEqual(new Set(dependents.map((d) => d.jobId)));
    expect(runs.every((r) => r.status === "QUEUED")).toBe(true);
  }, 120_000);

  it("refuses cycles at edit, naming them, and upstreams that are not the tenant's", async () => {
    const a = await createJob(
      f.engine,
      testJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" } }),
    ).then((c) => c.job);
    const b = await dependentOf([a]);
    const c = await dependentOf([b]);
    const cycle = await editJob(f.engine, a.tenantId, a.jobId, a.version, {
      schedule: { after: { jobs: [c.jobId], on: "success" } },
    }).catch((error: unknown) => error);
    expect(cycle).toBeInstanceOf(ValidationError);
    expect((cycle as ValidationError).field).toBe("schedule.after.jobs");
    expect((cycle as ValidationError).message).toContain(
      `${a.jobId} → ${c.jobId} → ${b.jobId} → ${a.jobId}`,
    );
    const self = await editJob(f.engine, b.tenantId, b.jobId, b.version, {
      schedule: { after: { jobs: [b.jobId], on: "success" } },
    }).catch((error: unknown) => error);
    expect((self as ValidationError).message).toContain(`cycle: ${b.jobId} → ${b.jobId}`);
    // Nothing was written: the jobs are as they were.
    expect((await getTenantJob(f.engine, a.tenantId, a.jobId)).version).toBe(a.version);

    const foreign = await createJob(f.engine, testJob({ tenantId: "tenant-b" })).then((x) => x.job);
    for (const jobs of [[foreign.jobId], ["01JD0000000000000000000000"]]) {
      const refused = await createJob(
        f.engine,
        testJob({ schedule: { after: { jobs, on: "success" } } }),
      ).catch((error: unknown) => error);
      expect((refused as ValidationError).field).toBe("schedule.after.jobs");
    }
    expect((await getTenantJob(f.engine, "tenant-b", foreign.jobId)).dependents).toEqual([]);

    // An edit that moves a dependent moves it between its upstreams' dependents.
    await editJob(f.engine, c.tenantId, c.jobId, c.version, {
      schedule: { after: { jobs: [a.jobId], on: "success" } },
    });
    expect((await getTenantJob(f.engine, a.tenantId, b.jobId)).dependents).toEqual([]);
    expect((await getTenantJob(f.engine, a.tenantId, a.jobId)).dependents).toEqual(
      [b.jobId, c.jobId].sort(),
    );
  });

  it("an upstream cancelled between a create's check and its write is not linked: the create is planned again and refused", async () => {
    const a = await createJob(
      f.engine,
      testJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" } }),
    ).then((c) => c.job);
    const name = "cancelBeforeLink";
    let cancelled = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        const links = (
          args.input as { TransactItems?: { Update?: { UpdateExpression?: string } }[] }
        ).TransactItems;
        if (
          !cancelled &&
          links?.some((item) => item.Update?.UpdateExpression?.includes("ADD dependents"))
        ) {
          cancelled = true;
          await cancelJob(f.engine, a.tenantId, a.jobId);
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    let refused: unknown;
    try {
      refused = await createJob(
        f.engine,
        testJob({ schedule: { after: { jobs: [a.jobId], on: "success" } } }),
      ).catch((error: unknown) => error);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(cancelled).toBe(true);
    expect(refused).toBeInstanceOf(ValidationError);
    expect((refused as ValidationError).message).toContain(`job ${a.jobId} is cancelled`);
    expect((await getTenantJob(f.engine, a.tenantId, a.jobId)).dependents).toEqual([]);
  });

  it("edits at once that would close a cycle of two or three jobs between them: never all commit", async () => {
    const yearly = () =>
      createJob(f.engine, testJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" } })).then(
        (c) => c.job,
      );
    const linked = (job: Job) =>
      isAfterSchedule(job.schedule) ? job.schedule.after.jobs.length > 0 : false;
    for (const size of [2, 3, 2, 3, 3]) {
      const ring: Job[] = [];
      for (let i = 0; i < size; i++) ring.push(await yearly());
      const outcomes = await Promise.allSettled(
        ring.map((job, i) =>
          editJob(f.engine, job.tenantId, job.jobId, job.version, {
            schedule: { after: { jobs: [ring[(i + 1) % size]?.jobId ?? ""], on: "success" } },
          }),
        ),
      );
      const refused = outcomes.filter((o) => o.status === "rejected");
      expect(refused.length).toBeGreaterThan(0);
      // Each refused edit met the cycle (or, out of plans, kept meeting the others' commits).
      for (const o of refused) expect(String(o.reason)).toMatch(/would make a cycle|kept changing/);
      const now = await Promise.all(ring.map((j) => getTenantJob(f.engine, j.tenantId, j.jobId)));
      expect(now.filter(linked)).toHaveLength(size - refused.length);
    }
  });

  it("a paused dependent records the triggered run SKIPPED with the reason, and resumes idle", async () => {
    const a = await upstreamJob();
    const b = await dependentOf([a]);
    await pauseJob(f.engine, b.tenantId, b.jobId);
    await runNext(a.jobId);
    const [skipped, ...more] = await runsOf(b.jobId);
    expect(more).toEqual([]);
    expect(skipped?.status).toBe("SKIPPED");
    expect(skipped?.reason).toContain("job paused");
    expect(skipped?.trigger?.jobId).toBe(a.jobId);
    const resumed = await resumeJob(f.engine, b.tenantId, b.jobId);
    expect(resumed.status).toBe("ACTIVE");
    expect(resumed.nextRunAt).toBeNull();
    expect(await runsOf(b.jobId)).toHaveLength(1);
  });

  /**
   * Runs `between` once, just before the first fan-out write to `dependentId`: after the upstream
   * run's ending (and its trigger entry) is written, before any dependent's run is.
   */
  async function runNextWithBeforeFanOut(
    jobId: string,
    dependentId: string,
    between: () => Promise<unknown>,
  ): Promise<boolean> {
    const name = "beforeFanOut";
    let done = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        if (!done && isFanOutTo(dependentId)(args.input as Input)) {
          done = true;
          await between();
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      await runNext(jobId);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    return done;
  }

  it("an upstream run that ends SUCCEEDED after its job is deleted, before the fan-out, triggers nothing", async () => {
    const a = await upstreamJob();
    const b = await dependentOf([a]);
    const deleted = await runNextWithBeforeFanOut(a.jobId, b.jobId, () =>
      deleteJob(f.engine, a.tenantId, a.jobId),
    );
    expect(deleted).toBe(true);
    expect((await runsOf(a.jobId)).map((r) => r.status)).toEqual(["SUCCEEDED"]);
    expect(await runsOf(b.jobId)).toEqual([]);
    // The entry went with the fan-out that wrote nothing: no later pass triggers the run either.
    expect(await triggerEntries(a.jobId)).toEqual([]);
    await dispatchShard(f.engine, 0, "after-delete-pass");
    expect(await runsOf(b.jobId)).toEqual([]);
    expect((await getTenantJob(f.engine, b.tenantId, b.jobId)).status).toBe("ACTIVE");
  });

  it("a completed one-off upstream's fan-out landing inside its delete, after the runs' cancel and before the item goes, triggers nothing", async () => {
    const a = await upstreamJob();
    const b = await dependentOf([a]);
    expect(await runWithFanOutsRefused([a.jobId])).toBeGreaterThan(0);
    expect((await getTenantJob(f.engine, a.tenantId, a.jobId)).status).toBe("COMPLETED");
    const [entry] = await triggerEntries(a.jobId);
    if (!entry) throw new Error("no trigger entry left for a pass");
    const name = "fanOutBeforeItemDelete";
    let fannedOut: Awaited<ReturnType<typeof fanOutTrigger>> | undefined;
    let ran = false;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (!ran && context.commandName === "DeleteItemCommand") {
          ran = true;
          fannedOut = await fanOutTrigger(f.engine, entry);
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      await deleteJob(f.engine, a.tenantId, a.jobId);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(ran).toBe(true);
    expect(fannedOut).toEqual({ queued: 0, skipped: 0 });
    expect(await runsOf(b.jobId)).toEqual([]);
    expect(await triggerEntries(a.jobId)).toEqual([]);
  });

  it("a recurring upstream cancelled (a delete's first step) between its run's ending and the fan-out triggers nothing", async () => {
    const a = await upstreamJob({ schedule: { every: "PT1H" } });
    const b = await dependentOf([a]);
    const cancelled = await runNextWithBeforeFanOut(a.jobId, b.jobId, () =>
      cancelJob(f.engine, a.tenantId, a.jobId),
    );
    expect(cancelled).toBe(true);
    expect((await runsOf(a.jobId)).map((r) => r.status)).toContain("SUCCEEDED");
    expect(await runsOf(b.jobId)).toEqual([]);
    expect(await triggerEntries(a.jobId)).toEqual([]);
  });

  it("a dependent deleted during its fan-out: before its run's write it gets none; after it, the run ends CANCELLED unrun", async () => {
    const a = await upstreamJob();
    const [before, after] = [await dependentOf([a]), await dependentOf([a])];
    const deleted = await runNextWithBeforeFanOut(a.jobId, before.jobId, () =>
      deleteJob(f.engine, before.tenantId, before.jobId),
    );
    expect(deleted).toBe(true);
    expect(await runsOf(before.jobId)).toEqual([]);
    expect((await runsOf(after.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);

    // The other dependent's run is written, then it is deleted before that run is sent.
    const b = await upstreamJob();
    const late = await dependentOf([b]);
    const name = "deleteAfterFanOut";
    let done = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        const result = await next(args);
        if (!done && isFanOutTo(late.jobId)(args.input as Input)) {
          done = true;
          await deleteJob(f.engine, late.tenantId, late.jobId);
        }
        return result;
      },
      { step: "initialize", name },
    );
    try {
      await runNext(b.jobId);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(done).toBe(true);
    expect((await runsOf(late.jobId)).map((r) => r.status)).toEqual(["CANCELLED"]);
    await runNext(late.jobId);
    expect((await runsOf(late.jobId)).map((r) => r.status)).toEqual(["CANCELLED"]);
    expect(seen.filter((ctx) => ctx.jobId === late.jobId)).toEqual([]);
    expect(await triggerEntries(a.jobId)).toEqual([]);
    expect(await triggerEntries(b.jobId)).toEqual([]);
    expect((await getTenantJob(f.engine, a.tenantId, a.jobId)).dependents).toEqual([after.jobId]);
    expect((await getTenantJob(f.engine, b.tenantId, b.jobId)).dependents).toEqual([]);
  });

  it("a recurring upstream paused between its run's ending and the fan-out still triggers: a pause does not take back a run that had started", async () => {
    const a = await upstreamJob({ schedule: { every: "PT1H" } });
    const b = await dependentOf([a]);
    const paused = await runNextWithBeforeFanOut(a.jobId, b.jobId, () =>
      pauseJob(f.engine, a.tenantId, a.jobId),
    );
    expect(paused).toBe(true);
    expect((await getTenantJob(f.engine, a.tenantId, a.jobId)).status).toBe("PAUSED");
    const [aRun] = (await runsOf(a.jobId)).filter((r) => r.status === "SUCCEEDED");
    expect((await runsOf(b.jobId)).map((r) => [r.status, r.trigger?.runId])).toEqual([
      ["QUEUED", aRun?.runId],
    ]);
    expect(await triggerEntries(a.jobId)).toEqual([]);
  });

  it("a one-off upstream that completed with its run still triggers: only a cancel or delete stops it", async () => {
    const a = await upstreamJob();
    const b = await dependentOf([a]);
    const completed = await runNextWithBeforeFanOut(a.jobId, b.jobId, async () =>
      expect((await getTenantJob(f.engine, a.tenantId, a.jobId)).status).toBe("COMPLETED"),
    );
    expect(completed).toBe(true);
    expect((await runsOf(b.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);
  });

  it("cancelling or deleting an upstream leaves its dependents idle; a cancelled dependent leaves its upstream", async () => {
    const a = await createJob(f.engine, testJob({ type: "record" })).then((c) => c.job);
    const b = await dependentOf([a]);
    await cancelJob(f.engine, a.tenantId, a.jobId);
    expect((await getTenantJob(f.engine, b.tenantId, b.jobId)).status).toBe("ACTIVE");
    expect(await runsOf(b.jobId)).toEqual([]);
    await deleteJob(f.engine, a.tenantId, a.jobId);
    expect((await getTenantJob(f.engine, b.tenantId, b.jobId)).status).toBe("ACTIVE");

    const up = await upstreamJob();
    const gone = await dependentOf([up]);
    await cancelJob(f.engine, gone.tenantId, gone.jobId);
    expect((await getTenantJob(f.engine, up.tenantId, up.jobId)).dependents).toEqual([]);
    await runNext(up.jobId);
    expect(await runsOf(gone.jobId)).toEqual([]);
  });
});
