import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { JobHandler } from "../../shared/execution/job-contract.js";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJobs, MAX_BATCH_JOBS } from "../../shared/jobs/create-batch.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import type { Priority } from "../../shared/model.js";
import { writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { held } from "../support/held-runs.js";
import { seededDependents } from "../support/seeded-dependents.js";
import { waitFor } from "../support/wait.js";

/**
 * A tenant held to `concurrentRuns: 1` (the setting docs/api.md tells a deployment serving
 * tenants it does not trust to use) whose backlog is larger than the loop's 100 messages per slot
 * (`MOST_HELD_PER_SLOT` in worker-loop.ts), beside a quiet tenant with one run queued after it.
 * Architecture.md ("Fair delivery") says a capped tenant's messages wait at its gate without
 * taking the loop's capacity, "so the loop keeps receiving past a capped tenant's backlog to the
 * other tenants' messages behind it". A hostile tenant needs only its own credentials to queue
 * that many runs: 210 creates of a one-off due now (4 s of its default 50 requests a second), or
 * one trigger of a one-off with 1,000 jobs after it. What its gate may not keep goes back to SQS
 * (hand-back.ts), so the loop's hold never fills with it.
 */
/**
 * Each tenant's backlog of one-offs due now as it can queue it with batch creates (POST /jobs/batch,
 * 25 jobs a request), the tenants' batches in turn: each job's run claimed and sent at its create,
 * as one at a time. Their order among themselves is not what a case asserts, only that the quiet
 * tenant's job comes after all of them. Returns the jobs' ids.
 */
async function createdBacklogs(
  f: EngineFixture,
  tenantIds: readonly string[],
  perTenant: number,
  job: Partial<Parameters<typeof createJob>[1]>,
): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < perTenant; i += MAX_BATCH_JOBS) {
    for (const tenantId of tenantIds) {
      const items = Array.from({ length: Math.min(MAX_BATCH_JOBS, perTenant - i) }, () => ({
        input: testJob({ ...job, tenantId }),
      }));
      for (const outcome of await createJobs(f.engine, tenantId, items)) {
        if (!("job" in outcome)) throw outcome.error;
        ids.push(outcome.job.jobId);
      }
    }
  }
  return ids;
}

/** The ReceiveMessage requests `f`'s SQS client makes from the call on. */
function countedReceives(f: EngineFixture): { count: number } {
  const receives = { count: 0 };
  f.engine.sqs.middlewareStack.add(
    (next, context) => (args) => {
      if (context.commandName === "ReceiveMessageCommand") receives.count++;
      return next(args);
    },
    { step: "initialize", name: "countReceives" },
  );
  return receives;
}

/**
 * The receives the loop may make to reach a message behind `ahead` others: each round asks the
 * high queue before the normal one, and the low queue at most once a second, so 3 for each batch
 * of 10 it gets past (docs/architecture.md "Fair delivery": full batches, not one a free slot).
 */
function receivesToReach(ahead: number): number {
  return 3 * Math.ceil((ahead + 1) / 10);
}

describe("a capped tenant's backlog past the loop's hold limit", () => {
  let f: EngineFixture;
  // A fixture each: a case leaves most of the noisy backlog in its queues.
  beforeEach(async () => {
    f = await createEngineFixture();
  });
  afterEach(() => f.destroy());

  // The second case puts the backlog on the high queue (any tenant may: `maxPriority` defaults to
  // high) and the quiet run on normal, whose share of the slots the starvation guard keeps.
  // The loop reaches the quiet run by receiving the backlog ahead of it and handing back what the
  // noisy tenant's gate may not keep; how long the machine takes for those requests is its own.
  // So the case bounds that work: the noisy runs are held until the quiet one has started (only
  // the hand-backs, not a noisy run's end, can free room in the loop's hold), and the receives
  // are counted.
  it.each<[Priority, Priority]>([
    ["normal", "normal"],
    ["high", "normal"],
  ])(
    "does not hold back another tenant's run queued behind it while the loop has a free slot (backlog %s, quiet run %s)",
    async (noisyPriority, quietPriority) => {
      const concurrency = 2;
      // Past the 100 messages a slot the loop holds in all (200 at 2 slots), by ten.
      const backlogSize = concurrency * 100 + 10;
      const startedAt = new Map<string, number>();
      const noisyRuns = held();
      const handler: JobHandler = async (ctx) => {
        startedAt.set(ctx.jobId, Date.now());
        if (ctx.tenantId === "t-noisy") await noisyRuns.released;
      };
      await writeQuotaOverride(f.engine, "t-noisy", { concurrentRuns: 1 }, new Date());
      const runAt = new Date().toISOString();
      // The backlog first, then the quiet tenant's run: the queue holds it last.
      const noisy = await createdBacklogs(f, ["t-noisy"], backlogSize, {
        type: "held-back",
        priority: noisyPriority,
        schedule: { runAt },
      });
      const quiet = await createJob(
        f.engine,
        testJob({
          tenantId: "t-quiet",
          type: "held-back",
          priority: quietPriority,
          schedule: { runAt },
        }),
      );
      const quietId = quiet.job.jobId;
      const receives = countedReceives(f);

      const stop = new AbortController();
      const loopStart = Date.now();
      const loop = runWorkerLoop(f.workerDeps("gate-limit", { "held-back": handler }), {
        concurrency,
        signal: stop.signal,
        idleWaitSeconds: 0,
        idleSleepMs: 20,
      });
      let receivesToQuiet = Number.NaN;
      try {
        await waitFor("the quiet tenant's run to start", () => startedAt.has(quietId), 60_000);
        receivesToQuiet = receives.count;
      } finally {
        stop.abort();
        noisyRuns.release();
        await loop;
      }
      const quietStart = startedAt.get(quietId) ?? Number.NaN;
      const noisyBefore = noisy.filter((id) => (startedAt.get(id) ?? Infinity) < quietStart).length;
      const what = `the quiet run started ${quietStart - loopStart} ms after the loop did, after ${noisyBefore} noisy runs and ${receivesToQuiet} receives`;
      // The noisy tenant runs one at a time and its first run never ends: the quiet run starts
      // beside it, not after the noisy runs have drained the loop's hold one by one.
      expect(noisyBefore, what).toBeLessThanOrEqual(1);
      expect(receivesToQuiet, what).toBeLessThanOrEqual(receivesToReach(noisy.length));
    },
    120_000,
  );
  // As above: the loop gets past the fan-out's runs by receives and hand-backs, whatever the
  // machine's speed, so the case counts the receives from the quiet run's create to its start.
  it("does not hold back another tenant's run queued after one trigger of its one-off with 210 jobs after it", async () => {
    const concurrency = 2;
    const startedAt = new Map<string, number>();
    await writeQuotaOverride(f.engine, "t-noisy", { concurrentRuns: 1 }, new Date());
    // A one-off a day out: it runs only when triggered, and counts 0 towards runsPerMinute, as
    // do the jobs after it (docs/api.md "Quotas").
    const upstream = await createJob(
      f.engine,
      testJob({
        tenantId: "t-noisy",
        type: "held-back",
        schedule: { runAt: new Date(Date.now() + 86_400_000).toISOString() },
      }),
    );
    // Written as their creates would have: what the case asserts starts at the trigger.
    const dependents = await seededDependents(f, upstream.job, concurrency * 100 + 10, "success", {
      type: "held-back",
    });
    // The upstream run ends, so that it fans out; its dependents' runs are held.
    const dependentIds = new Set(dependents);
    const noisyRuns = held();
    const handler: JobHandler = async (ctx) => {
      startedAt.set(ctx.jobId, Date.now());
      if (dependentIds.has(ctx.jobId)) await noisyRuns.released;
    };
    const receives = countedReceives(f);
    const stop = new AbortController();
    // The loop runs through the fan-out, its queues empty between the runs handed back: 100 ms
    // between empty rounds (of three receives) is the default.
    const loop = runWorkerLoop(f.workerDeps("gate-trigger", { "held-back": handler }), {
      concurrency,
      signal: stop.signal,
      idleWaitSeconds: 0,
      idleSleepMs: 100,
    });
    let quietStart = Number.NaN;
    let quietCreated = Number.NaN;
    let receivesToQuiet = Number.NaN;
    try {
      // The tenant's one request: its one-off's run ends and its worker fans out 210 runs.
      await triggerJob(f.engine, "t-noisy", upstream.job.jobId);
      await waitFor(
        "the fan-out to queue and send every dependent's run",
        async () =>
          (await f.runs()).filter((r) => dependents.includes(r.jobId)).length ===
            dependents.length &&
          // The fan-out deletes its trigger entry once it has sent the runs it wrote.
          !(await f.dueEntries()).some((d) => d.kind === "trigger"),
        60_000,
        200,
      );
      quietCreated = Date.now();
      const receivesBefore = receives.count;
      const quiet = await createJob(
        f.engine,
        testJob({
          tenantId: "t-quiet",
          type: "held-back",
          schedule: { runAt: new Date().toISOString() },
        }),
      );
      const quietId = quiet.job.jobId;
      await waitFor("the quiet tenant's run to start", () => startedAt.has(quietId), 90_000);
      receivesToQuiet = receives.count - receivesBefore;
      quietStart = startedAt.get(quietId) ?? Number.NaN;
    } finally {
      stop.abort();
      noisyRuns.release();
      await loop;
    }
    const noisyBefore = dependents.filter(
      (id) => (startedAt.get(id) ?? Infinity) < quietStart,
    ).length;
    const what = `the quiet run started ${quietStart - quietCreated} ms after it was created, after ${noisyBefore} noisy runs and ${receivesToQuiet} receives`;
    expect(noisyBefore, what).toBeLessThanOrEqual(1);
    // At most every dependent's message ahead of it.
    expect(receivesToQuiet, what).toBeLessThanOrEqual(receivesToReach(dependents.length));
  }, 180_000);

  // The quiet run is the 421st message of the queue: the loop reaches it by receiving and turning
  // away the 420 before it (some 100 receives, 40 hand-backs of a SendMessageBatch and a
  // DeleteMessageBatch each, the gates' cap reads), in as long as the machine takes for those
  // requests: 1.8 to 12.7 s beside two busy loops, for the same 100 to 107 receives. So the case
  // bounds that work, not its time: the noisy runs are held until the quiet one has started (none
  // ends and frees room in the loop's hold, so only the hand-backs can), and the receives are
  // counted, full batches and not one a free slot (docs/architecture.md "Fair delivery").
  it("does not hold back another tenant's run behind the backlogs of several capped tenants", async () => {
    // Three tenants capped at 1 run in three of the four slots: one is always free.
    const concurrency = 4;
    const noisyTenants = ["t-noisy-1", "t-noisy-2", "t-noisy-3"];
    // 420 in all, 20 past the loop's hold of 400: each gate keeps 8 waiting, the rest go back.
    const perTenant = 140;
    const startedAt = new Map<string, number>();
    const noisyRuns = held();
    const handler: JobHandler = async (ctx) => {
      startedAt.set(ctx.jobId, Date.now());
      if (ctx.tenantId !== "t-quiet") await noisyRuns.released;
    };
    for (const tenantId of noisyTenants)
      await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 1 }, new Date());
    const runAt = new Date().toISOString();
    const noisy = await createdBacklogs(f, noisyTenants, perTenant, {
      type: "held-back",
      schedule: { runAt },
    });
    const quiet = await createJob(
      f.engine,
      testJob({ tenantId: "t-quiet", type: "held-back", schedule: { runAt } }),
    );
    const receives = countedReceives(f);
    const stop = new AbortController();
    const loopStart = Date.now();
    const loop = runWorkerLoop(f.workerDeps("gate-many", { "held-back": handler }), {
      concurrency,
      signal: stop.signal,
      idleWaitSeconds: 0,
      idleSleepMs: 20,
    });
    let receivesToQuiet = Number.NaN;
    try {
      await waitFor(
        "the quiet tenant's run to start",
        () => startedAt.has(quiet.job.jobId),
        90_000,
      );
      receivesToQuiet = receives.count;
    } finally {
      stop.abort();
      noisyRuns.release();
      await loop;
    }
    const quietStart = startedAt.get(quiet.job.jobId) ?? Number.NaN;
    const noisyBefore = noisy.filter((id) => (startedAt.get(id) ?? Infinity) < quietStart).length;
    const what = `the quiet run started ${quietStart - loopStart} ms after the loop did, after ${noisyBefore} noisy runs and ${receivesToQuiet} receives`;
    // One run a capped tenant, none of them ended: beside the first of them.
    expect(noisyBefore, what).toBeLessThanOrEqual(noisyTenants.length);
    // 43 rounds of 10 reach it; a receive for each free slot took 788.
    expect(receivesToQuiet, what).toBeLessThanOrEqual(receivesToReach(noisy.length));
  }, 180_000);
});
