import { DeleteCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { JobError, type JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import {
  createJob,
  editJob,
  pauseJob,
  replayDeadLetter,
  triggerJob,
} from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import type { Job, Run } from "../../shared/model.js";
import { runKey } from "../../shared/storage/runs.js";
import { ValidationError } from "../../shared/validation.js";
import { tenantWebhookSecrets } from "../../shared/webhooks/secrets.js";
import {
  createEngineFixture,
  dailyAwayFrom,
  deliveryOfRun,
  type EngineFixture,
  farJob,
  testJob,
} from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { type Receiver, startReceiver } from "../support/receiver.js";
import { refusedEditOnto, upstreamWithDependent } from "../support/triggered-instant.js";
import { waitFor } from "../support/wait.js";

/**
 * An edit that gives a job a `runAt` at the time of a run that is no occurrence's (a triggered
 * run, a dependent's run queued after its upstream), whatever that run's status, is a 400 naming
 * `schedule.runAt` and that run, nothing written: that time is the run's own key (its
 * `webhook-id`), and the one-off's occurrence filed there was delivered as its next attempt, or,
 * the run still under way, taken for it and never run.
 */
describe("an edit whose runAt is the time of a run that is no occurrence's", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  const runsAt = async (run: Run) =>
    (await f.runs())
      .filter((r) => r.jobId === run.jobId && r.scheduledFor === run.scheduledFor)
      .map((r) => [r.attempt, r.status]);

  /** The edit to `run`'s time, refused naming schedule.runAt and `run`; the job as it was. */
  async function expectRefused(job: Job, run: Run, says: string): Promise<void> {
    const issue = await refusedEditOnto(f.engine, job, run);
    expect(issue.message).toContain(says);
    expect(issue.message).toContain("give another runAt");
    const after = await getTenantJob(f.engine, job.tenantId, job.jobId);
    expect([after.version, after.status, after.schedule, after.nextRunAt]).toEqual([
      job.version,
      job.status,
      job.schedule,
      job.nextRunAt,
    ]);
  }

  it("a triggered run still queued: refused, and the triggered run runs as itself", async () => {
    const { job } = await createJob(f.engine, farJob("tenant-a"));
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);

    await expectRefused(job, triggered, `a triggered run (${triggered.runId}, queued)`);
    expect(await runsAt(triggered)).toEqual([[1, "QUEUED"]]);
    await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, triggered));
    expect(await runsAt(triggered)).toEqual([[1, "SUCCEEDED"]]);
  });

  it("a paused one-off, the triggered run succeeded: refused while paused too", async () => {
    const { job: created } = await createJob(f.engine, farJob("tenant-a"));
    const triggered = await triggerJob(f.engine, created.tenantId, created.jobId);
    await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, triggered));
    const paused = await pauseJob(f.engine, created.tenantId, created.jobId);
    expect(paused.status).toBe("PAUSED");

    await expectRefused(paused, triggered, `a triggered run (${triggered.runId}, succeeded)`);
    expect(await runsAt(triggered)).toEqual([[1, "SUCCEEDED"]]);
  });

  it("a recurring job made a one-off at its triggered run's time: refused", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: dailyAwayFrom(Date.now()).schedule }),
    );
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, triggered));

    await expectRefused(job, triggered, `a triggered run (${triggered.runId}, succeeded)`);
    expect(await runsAt(triggered)).toEqual([[1, "SUCCEEDED"]]);
  });

  it("a dependent made a one-off at the time of its run after its upstream: refused", async () => {
    const { upstream, dependent } = await upstreamWithDependent(f.engine);
    await dispatchShard(f.engine, 0, "pass-upstream");
    const upstreamRun = (await f.runs()).find((r) => r.jobId === upstream.jobId);
    if (upstreamRun === undefined) throw new Error("the upstream's run is not queued");
    await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, upstreamRun));
    const depRun = (await f.runs()).find((r) => r.jobId === dependent.jobId);
    if (depRun === undefined) throw new Error("the dependent's run is not queued");
    expect(depRun.trigger?.runId).toBe(upstreamRun.runId);

    const current = await getTenantJob(f.engine, dependent.tenantId, dependent.jobId);
    await expectRefused(
      current,
      depRun,
      `the run queued after ${upstreamRun.runId} (${depRun.runId}, queued)`,
    );
    expect(await runsAt(depRun)).toEqual([[1, "QUEUED"]]);
  });
});

type Input = Record<string, unknown>;

/**
 * Adversarial review h94 of refuseNoOccurrenceTime (an edit onto a triggered run's time is a 400
 * naming schedule.runAt). The refusal reads the runs at the new runAt before the edit's commit, so
 * the edit's transaction checks that no run was put there since (runAtStillFree); and a trigger
 * whose read an edit outruns is sent back by the job's version in its write's condition.
 */
describe("a trigger and an edit onto its instant, one landing between the other's read and its write", () => {
  let f: EngineFixture;
  const T = Math.floor(Date.now() / 1000) * 1000 + 5 * 60_000;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { shardCount: 1, maxShardCount: 1 },
      clock: () => new Date(T),
    });
  });
  afterAll(() => f.destroy());

  /** A dispatcher pass, then each of the job's QUEUED runs processed: its runs after, in short. */
  async function passAndRun(jobId: string, owner: string) {
    await dispatchShard(f.engine, 0, owner);
    for (const run of (await f.runs()).filter((r) => r.jobId === jobId && r.status === "QUEUED"))
      await processRun(f.workerDeps("w"), deliveryOfRun(f.engine, run));
    return (await f.runs())
      .filter((r) => r.jobId === jobId)
      .map((r) => [r.scheduledFor, r.attempt, r.status, r.triggered === true]);
  }

  it("either refuses the edit or runs the one-off as its own run", async () => {
    const { job } = await createJob(f.engine, farJob("tenant-a"));
    const isJobWrite = (input: Input) =>
      JSON.stringify(input.TransactItems ?? []).includes(`"JOB#${job.jobId}"`);
    let triggered: Run | undefined;
    let hooked = false;
    const { doc } = f.engine;
    doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (
          !hooked &&
          context.commandName === "TransactWriteItemsCommand" &&
          isJobWrite(args.input as Input)
        ) {
          hooked = true;
          triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
        }
        return next(args);
      },
      { step: "initialize", name: "triggerBeforeEditCommit" },
    );
    const runAt = new Date(T).toISOString();
    const edited = await editJob(f.engine, job.tenantId, job.jobId, job.version, {
      schedule: { runAt },
    })
      .catch((error: unknown) => error)
      .finally(() => doc.middlewareStack.remove("triggerBeforeEditCommit"));
    if (triggered === undefined) throw new Error("the hook did not trigger");
    expect(triggered.scheduledFor).toBe(runAt);

    // Whatever the edit answered, both runs asked for run: the trigger's, and the one-off's
    // unless its edit was refused.
    await passAndRun(job.jobId, "pass-1");
    const runs = await passAndRun(job.jobId, "pass-2");
    // The edit's transaction meets the trigger's run at runAt (runAtStillFree) and plans again, and
    // its read then refuses the time as the triggered run's: the trigger's run runs as itself, and
    // the job keeps its own runAt, an hour on.
    expect(edited).toBeInstanceOf(ValidationError);
    expect(runs).toEqual([[runAt, 1, "SUCCEEDED", true]]);
    expect(await getTenantJob(f.engine, job.tenantId, job.jobId)).toMatchObject({
      status: "ACTIVE",
      schedule: job.schedule,
    });
  });

  it("sends the trigger back to read the job: its run takes the next millisecond, and both run", async ({
    onTestFinished,
  }) => {
    const { job } = await createJob(f.engine, farJob("tenant-a"));
    const runAt = new Date(T).toISOString();
    // The edit's process dies right after its commit, before its fast path puts the one-off's run
    // at T: the trigger's write then meets no run there, only the job's new version.
    const editClients = createTestClients();
    onTestFinished(() => editClients.destroy());
    let committed = false;
    editClients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (committed) throw new Error("process died");
        const result = await next(args);
        const input = args.input as Input;
        committed =
          context.commandName === "TransactWriteItemsCommand" &&
          JSON.stringify(input.TransactItems ?? []).includes(`"JOB#${job.jobId}"`);
        return result;
      },
      { step: "initialize", name: "diesAfterEditCommit" },
    );
    const { doc } = f.engine;
    doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as Input;
        if (
          !committed &&
          context.commandName === "TransactWriteItemsCommand" &&
          JSON.stringify(input.TransactItems ?? []).includes('"triggered":true')
        ) {
          await editJob(
            { ...f.engine, doc: editClients.doc },
            job.tenantId,
            job.jobId,
            job.version,
            {
              schedule: { runAt },
            },
          ).catch(() => undefined);
        }
        return next(args);
      },
      { step: "initialize", name: "editBeforeTriggerWrite" },
    );
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId).finally(() =>
      doc.middlewareStack.remove("editBeforeTriggerWrite"),
    );
    expect(committed).toBe(true);
    // T is now an occurrence of the job's schedule, which a trigger leaves to it.
    expect(triggered.scheduledFor).toBe(new Date(T + 1).toISOString());

    const runs = await passAndRun(job.jobId, "pass");
    expect(runs.sort()).toEqual([
      [runAt, 1, "SUCCEEDED", false],
      [triggered.scheduledFor, 1, "SUCCEEDED", true],
    ]);
  });
});

/**
 * Adversarial review h94 of refuseNoOccurrenceTime. Whether a later attempt is a triggered run's
 * is read from its first attempt (isOccurrenceRun: a retry or replay carries no `triggered`), and
 * a first attempt that is gone counts as an occurrence's. Runs expire one by one: a dead triggered
 * run is kept deadLetterRetentionDays (30) after its death, and its replay, made d days later, a
 * retention (30) after its own ending, so for d days TTL has deleted the first attempt while the
 * replay is still there. An edit onto
 * that time is then taken for a move onto an occurrence's, and files the one-off as the triggered
 * run's next attempt, under its webhook-id: what 1bfc3cd refuses.
 */
describe("an edit onto the time of a triggered run whose first attempt has expired", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  it("is refused naming schedule.runAt and the triggered run, as while its first attempt was there", async () => {
    const handlers: Record<string, JobHandler> = {
      once: async () => {
        throw new JobError("target down", { retryable: false });
      },
    };
    const { job } = await createJob(f.engine, { ...farJob("tenant-a"), type: "once" });
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    await processRun(f.workerDeps("w", handlers), deliveryOfRun(f.engine, triggered));
    const dead = (await f.runs()).find((r) => r.runId === triggered.runId);
    expect(dead?.status).toBe("DEAD");
    const { run: replay } = await replayDeadLetter(f.engine, job.tenantId, triggered.runId);
    await processRun(f.workerDeps("w", handlers), deliveryOfRun(f.engine, replay));
    expect((await f.runs()).find((r) => r.runId === replay.runId)?.status).toBe("DEAD");

    // The first attempt's TTL has come (DynamoDB Local deletes nothing by TTL).
    await f.engine.doc.send(
      new DeleteCommand({
        TableName: f.engine.tables.runs,
        Key: runKey(job.jobId, triggered.scheduledFor, 1),
      }),
    );
    const current = await getTenantJob(f.engine, job.tenantId, job.jobId);
    const issue = await refusedEditOnto(f.engine, current, replay);
    expect(issue.message).toContain(`a triggered run (${replay.runId}, dead)`);
  });
});

/**
 * docs/api.md tells a receiver to "apply each `webhook-id` once". A triggered run's time is its
 * `webhook-id` (`<jobId>@<scheduledFor>`): a one-off moved to that time was filed as the run's next
 * attempt and delivered under its `webhook-id`, so the receiver took it for a duplicate and
 * dropped it while the run was recorded SUCCEEDED ('expected 1 to be 2', the webhook-id count
 * below). Such an edit is a 400 naming `schedule.runAt`, nothing written; a one-off moved a
 * millisecond off that time is its own delivery, under its own `webhook-id`.
 */
describe("a one-off moved to the time of a triggered run that succeeded", () => {
  let f: EngineFixture;
  let receiver: Receiver;
  const stop = new AbortController();
  let loop: Promise<void>;

  beforeAll(async () => {
    f = await createEngineFixture();
    const secret = (await tenantWebhookSecrets(f.engine, "tenant-a")).current;
    receiver = await startReceiver({ secret });
    loop = runWorkerLoop(f.workerDeps("loop"), { concurrency: 2, signal: stop.signal });
  });
  afterAll(async () => {
    stop.abort();
    await loop;
    await receiver.close();
    await f.destroy();
  });

  const succeededRuns = (jobId: string, count: number) =>
    waitFor(`${count} succeeded runs of ${jobId}`, async () => {
      const runs = (await f.runs()).filter((run) => run.jobId === jobId);
      return runs.filter((run) => run.status === "SUCCEEDED").length === count ? runs : undefined;
    });

  it("is refused (400 naming schedule.runAt and the run); moved elsewhere, it is its own delivery", async () => {
    const runAt = new Date(Date.now() + 3_600_000).toISOString();
    const { job } = await createJob(
      f.engine,
      testJob({
        tenantId: "tenant-a",
        type: "http",
        payload: { invoice: 42 },
        target: { url: `${receiver.url}/tenant-a`, timeoutSeconds: 5 },
        schedule: { runAt },
      }),
    );
    const triggered = await triggerJob(f.engine, "tenant-a", job.jobId);
    await succeededRuns(job.jobId, 1);

    const issue = await refusedEditOnto(f.engine, job, triggered);
    expect(issue.message).toContain(`a triggered run (${triggered.runId}, succeeded)`);
    expect(issue.message).toContain("give another runAt");
    // Nothing written: the job keeps its version and its runAt.
    const kept = await getTenantJob(f.engine, "tenant-a", job.jobId);
    expect([kept.version, kept.schedule]).toEqual([job.version, { runAt }]);

    // A millisecond off, the one-off's occurrence is its own run under its own webhook-id.
    const off = new Date(Date.parse(triggered.scheduledFor) + 1).toISOString();
    const moved = await editJob(f.engine, "tenant-a", job.jobId, job.version, {
      schedule: { runAt: off },
    });
    expect(moved.status).toBe("ACTIVE");
    const runs = await succeededRuns(job.jobId, 2);
    expect(runs.map((run) => [run.attempt, run.triggered ?? false]).sort()).toEqual([
      [1, false],
      [1, true],
    ]);

    const deliveries = receiver.deliveries.filter((d) => d.jobId === job.jobId);
    expect(deliveries).toHaveLength(2);
    // Two runs the tenant asked for (a trigger, then the one-off's own occurrence): two keys.
    expect(new Set(deliveries.map((d) => d.webhookHeaders["webhook-id"])).size).toBe(2);
    expect(deliveries.filter((d) => d.applied)).toHaveLength(2);
  });
});

/**
 * A triggered run is an extra run the tenant asked for, no occurrence, and a dead one is
 * replayable while its job exists. A one-off moved to its instant was filed as that run's next
 * attempt (the same occurrence key): once it succeeded there, the dead triggered run's replay was
 * refused ('NotReplayableError: … its occurrence ran again as …-2 and succeeded'), though the
 * work the trigger asked for never succeeded. The move is refused (400 naming `schedule.runAt`)
 * and takes no key: the dead triggered run stays replayable, as its own next attempt.
 */
describe("a dead triggered run whose instant a one-off is then moved to", () => {
  it("refuses the move, and the triggered run stays replayable", async ({ onTestFinished }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() } }),
    );
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    const dies = async () => {
      throw new JobError("the receiver refused it", { retryable: false });
    };
    await processRun(f.workerDeps("w1", { noop: dies }), deliveryOfRun(f.engine, triggered));
    expect((await f.runs()).find((r) => r.runId === triggered.runId)?.status).toBe("DEAD");

    const issue = await refusedEditOnto(f.engine, job, triggered);
    expect(issue.message).toContain(`(${triggered.runId}, dead)`);
    // Nothing filed at the triggered run's time: its only run is the dead one.
    expect(
      (await f.runs())
        .filter((r) => r.scheduledFor === triggered.scheduledFor)
        .map((r) => r.attempt),
    ).toEqual([1]);

    const replayed = await replayDeadLetter(f.engine, job.tenantId, triggered.runId);
    expect([replayed.run.status, replayed.run.attempt]).toEqual(["QUEUED", 2]);
  }, 60_000);
});

/**
 * A one-off moved to the instant of a triggered run that succeeded ran there as that run's next
 * attempt: the trigger's attempt was counted against the one-off's own `maxAttempts`, and under
 * `maxAttempts: 2` its first failure was its last ('expected 'DEAD' to be 'FAILED''). The move
 * is refused (400 naming `schedule.runAt`); moved elsewhere, the one-off's first attempt is its
 * attempt 1, and its first retryable failure is retried.
 */
describe("a one-off moved to the instant of a succeeded triggered run, maxAttempts 2", () => {
  it("is refused; its own occurrence retries its first retryable failure", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const base = testJob({ schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() } });
    const { job } = await createJob(f.engine, {
      ...base,
      policies: {
        ...base.policies,
        retry: { maxAttempts: 2, initialDelayMs: 1_000, maxDelayMs: 1_000 },
      },
    });
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    await processRun(f.workerDeps("w1"), deliveryOfRun(f.engine, triggered));
    expect((await f.runs()).find((r) => r.runId === triggered.runId)?.status).toBe("SUCCEEDED");

    await refusedEditOnto(f.engine, job, triggered);

    const off = new Date(Date.parse(triggered.scheduledFor) + 1).toISOString();
    await editJob(f.engine, job.tenantId, job.jobId, job.version, { schedule: { runAt: off } });
    await dispatchShard(f.engine, 0, "pass-after-edit");
    const own = (await f.runs()).find((r) => r.jobId === job.jobId && !r.triggered);
    if (own === undefined) throw new Error("the moved one-off's run is not queued");
    expect(own.attempt).toBe(1);
    const fails = async () => {
      throw new JobError("the receiver is down", { retryable: true });
    };
    await processRun(f.workerDeps("w2", { noop: fails }), deliveryOfRun(f.engine, own));
    // Its first attempt failed: FAILED with a retry queued, not DEAD.
    expect((await f.runs()).find((r) => r.runId === own.runId)?.status).toBe("FAILED");
  }, 60_000);
});
