import { ProvisionedThroughputExceededException } from "@aws-sdk/client-dynamodb";
import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MIN_LOOKAHEAD_SECONDS } from "../../shared/config.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { runId } from "../../shared/keys.js";
import type { Job, Run } from "../../shared/model.js";
import { finishRun } from "../../shared/storage/run-finish.js";
import { startRun } from "../../shared/storage/run-start.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { seedJobs, setWatermark } from "../support/seed.js";

/**
 * The SKIPPED records a claim writes under its misfire policy after an outage (found in a review
 * of the run history): each is put before the claim's transaction, only where no item is
 * (`attribute_not_exists(pk)`: a run there handled the occurrence and is kept), and a put that
 * fails for good fails the claim before its commit, for the next pass to plan again
 * (docs/architecture.md, "Claim"; "Where the code departs", 9). Before, 40 rode in the
 * transaction and the rest were batch-written after the commit with no condition.
 */
const SECOND = 1000;
const MINUTE = 60 * SECOND;

let f: EngineFixture;
beforeAll(async () => {
  // The shortest lookahead: a late per-second claim queues the occurrences from its grace to the
  // horizon, which none of these cases reads.
  f = await createEngineFixture({
    settings: { shardCount: 1, maxShardCount: 1, lookaheadMs: MIN_LOOKAHEAD_SECONDS * SECOND },
  });
});
afterAll(() => f.destroy());

/** A job of `cron` under `misfire` whose pending occurrence, `first`, is `minutesAgo` old. */
async function lateJob(
  jobId: string,
  cron: string,
  minutesAgo: number,
  misfire: "skip" | "fire_once" = "skip",
) {
  const now = new Date();
  const first = new Date(Math.floor((now.getTime() - minutesAgo * MINUTE) / MINUTE) * MINUTE);
  const [job] = await seedJobs(
    f,
    [{ jobId, misfire, schedule: { cron, timezone: "UTC" }, dueAt: first }],
    now,
  );
  if (!job) throw new Error("no job seeded");
  // The dispatcher last swept the minute before it.
  await setWatermark(f, 0, new Date(first.getTime() - MINUTE));
  return { job, first, now };
}

/** A QUEUED first attempt of `job` at `at`, as a claim of it (an earlier schedule's) put it. */
async function putQueuedRun(job: Job, at: Date): Promise<Run> {
  const { run, item } = queuedRun(
    {
      jobId: job.jobId,
      tenantId: job.tenantId,
      scheduledFor: at,
      dueAt: at,
      attempt: 1,
      priority: "normal",
      jobVersion: 1,
    },
    new Date(at.getTime() - MINUTE),
    f.engine.settings,
  );
  await f.engine.doc.send(new PutCommand({ TableName: f.engine.tables.runs, Item: item }));
  return run;
}

const runsOf = async (job: Job) => (await f.runs()).filter((r) => r.jobId === job.jobId);

/** The per-minute job's outage: more missed occurrences than the 40 records a claim's transaction held before. */
const OUTAGE_MINUTES = 50;

describe(`a per-minute job after a ${OUTAGE_MINUTES}-minute dispatcher outage`, () => {
  it("records every missed occurrence SKIPPED, also when its first claim's record puts fail", async () => {
    const { job, first } = await lateJob("job_history_batch_lost", "* * * * *", OUTAGE_MINUTES);
    // The pass's writes of SKIPPED records on the runs table are throttled every time, in a
    // BatchWriteItem or a PutItem of one; everything else goes through.
    const clients = createTestClients({ maxSockets: 16 });
    let failed = 0;
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as {
          RequestItems?: Record<string, unknown>;
          TableName?: string;
          Item?: { status?: unknown };
        };
        const command = context.commandName ?? "";
        if (
          (command.startsWith("BatchWrite") &&
            input.RequestItems?.[f.engine.tables.runs] !== undefined) ||
          (command.startsWith("Put") &&
            input.TableName === f.engine.tables.runs &&
            input.Item?.status === "SKIPPED")
        ) {
          failed++;
          throw new ProvisionedThroughputExceededException({
            message: "The level of configured provisioned throughput for the table was exceeded",
            $metadata: { httpStatusCode: 400 },
          });
        }
        return next(args);
      },
      { step: "initialize", name: "throttleSkippedBatches" },
    );
    try {
      // No backoff between a put's throttled attempts: each fails for good at once.
      await dispatchShard({ ...f.engine, doc: clients.doc, random: () => 0 }, 0, "throttled");
    } finally {
      clients.destroy();
    }
    expect(failed).toBeGreaterThan(0);
    // The throttling is over: later passes run as usual.
    for (let pass = 0; pass < 3; pass++) await dispatchShard(f.engine, 0, `after-${pass}`);

    const missedUntil = first.getTime() + (OUTAGE_MINUTES - 1) * MINUTE;
    const skipped = (await runsOf(job)).filter(
      (r) => Date.parse(r.scheduledFor) < missedUntil && r.status === "SKIPPED",
    );
    const newestSkipped = skipped
      .map((r) => r.scheduledFor)
      .sort()
      .at(-1);
    // Every occurrence the outage missed has its row in the history, once.
    expect({ skipped: skipped.length, newestSkipped }).toEqual({
      skipped: OUTAGE_MINUTES - 1,
      newestSkipped: new Date(missedUntil - MINUTE).toISOString(),
    });
  }, 60_000);
});

/**
 * How late the per-second job's claim comes: the occurrences before the minute's misfire grace
 * are missed, at least 120 of them, more than the 100 seconds its runs below lie in, and past the
 * 40 records a claim's transaction held before.
 */
const LATE_MINUTES = 3;

describe("a late per-second claim meets runs at some of its missed occurrences", () => {
  /**
   * A run of the job's schedule there before the schedule's claim: an edit keeps the old
   * schedule's queued runs at occurrences the new schedule has, and they run at their time; when
   * the new schedule's first claim comes past the misfire grace (the edit's fast path failed, the
   * passes were down), it records the occurrences missed since the edit.
   */
  it("leaves a run that ran as it ended, whether among the first 40 missed or past them", async () => {
    const { job, first } = await lateJob("job_history_overwrite", "* * * * * *", LATE_MINUTES);
    // Two runs that ran and succeeded: the 11th missed occurrence and the 46th (inside and past
    // the 40 records a claim's transaction held before).
    const ranAt = [10, 45].map((s) => new Date(first.getTime() + s * SECOND));
    for (const at of ranAt) {
      const started = await startRun(f.engine, await putQueuedRun(job, at), "w", at);
      if (started.kind !== "started") throw new Error(`not started: ${started.kind}`);
      const ending = { status: "SUCCEEDED", ran: true, tracked: false } as const;
      await finishRun(f.engine, started.run, ending, new Date(at.getTime() + 200));
    }
    expect((await dispatchShard(f.engine, 0, "late")).outcome).toBe("swept");

    const runs = await runsOf(job);
    const ran = ranAt.map((at) =>
      runs.find((r) => r.runId === runId(job.jobId, at.toISOString(), 1)),
    );
    expect(ran.map((r) => r?.status)).toEqual(["SUCCEEDED", "SUCCEEDED"]);
  }, 60_000);

  /**
   * Runs at every other missed second: a record that meets one keeps it and the claim goes on.
   * When the records rode in the transaction, each run met cancelled it and the claim planned
   * again, four rounds at most, then gave up for the pass, and every pass after started again from
   * nothing: the job never moved on. A `*\/2`-second job paused, edited to every second (its
   * parked runs kept) and resumed late has such runs (test/api/history-paused-edit-resume.test.ts,
   * through the API alone).
   */
  it("is claimed when runs lie at every other missed second: the job moves on", async () => {
    const { job, first, now } = await lateJob("job_history_scattered", "* * * * * *", LATE_MINUTES);
    for (let i = 0; i < 50; i++)
      await putQueuedRun(job, new Date(first.getTime() + 2 * i * SECOND));
    for (let pass = 0; pass < 3; pass++) await dispatchShard(f.engine, 0, `scattered-${pass}`);

    const [stored] = (await f.jobs()).filter((j) => j.jobId === job.jobId);
    expect(Date.parse(stored?.nextRunAt ?? "")).toBeGreaterThan(now.getTime());
  }, 120_000);

  it("is claimed under fire_once too: the job moves on and its latest missed occurrence is queued", async () => {
    const { job, first, now } = await lateJob(
      "job_history_scattered_once",
      "* * * * * *",
      LATE_MINUTES,
      "fire_once",
    );
    for (let i = 0; i < 50; i++)
      await putQueuedRun(job, new Date(first.getTime() + 2 * i * SECOND));
    for (let pass = 0; pass < 3; pass++) await dispatchShard(f.engine, 0, `scattered-once-${pass}`);

    const [stored] = (await f.jobs()).filter((j) => j.jobId === job.jobId);
    expect(Date.parse(stored?.nextRunAt ?? "")).toBeGreaterThan(now.getTime());
    const lastOld = first.getTime() + 98 * SECOND;
    // The claim queued the most recent missed occurrence, which its records name, and recorded
    // the others, keeping the runs that were there.
    const runs = await runsOf(job);
    const reasons = [...new Set(runs.flatMap((r) => (r.status === "SKIPPED" ? [r.reason] : [])))];
    const ranAt = /^misfire: policy fire_once ran (\S+) instead$/.exec(reasons[0] ?? "")?.[1];
    expect({ reasons: reasons.length, ranAt: typeof ranAt }).toEqual({
      reasons: 1,
      ranAt: "string",
    });
    const latest = runs.find((r) => r.scheduledFor === ranAt);
    expect(latest?.status).toBe("QUEUED");
    expect(
      runs.filter((r) => r.status === "QUEUED" && Date.parse(r.scheduledFor) <= lastOld),
    ).toHaveLength(50);
  }, 120_000);
});
