import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock, sleep } from "../../shared/clock.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { FenceLostError } from "../../shared/errors.js";
import type { JobHandler } from "../../shared/execution/job-contract.js";
import type { WorkerDeps } from "../../shared/execution/worker.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import type { Job } from "../../shared/model.js";
import type { ReceivedRun } from "../../shared/queue/work-queue.js";
import { runKeyOf } from "../../shared/storage/run-reads.js";
import {
  caseFixture,
  createEngineFixture,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";
import { heldHandler, runOf } from "../support/held-runs.js";
import { createTestClients, scanTable } from "../support/namespace.js";
import { seedJobs } from "../support/seed.js";
import { waitFor } from "../support/wait.js";

/**
 * Every process reads its own host's clock. These cases give each component a clock of its own,
 * ahead of or behind the others, at the design's default lease (60 s, a heartbeat every 10 s;
 * some holders beat faster so that the case takes seconds, not minutes).
 */
const SECOND = 1000;
const MINUTE = 60 * SECOND;

/** A promise and what settles it, for ordering two passes' requests. */
function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve: () => void = () => undefined;
  const promise = new Promise<void>((settle) => {
    resolve = settle;
  });
  return { promise, resolve };
}

/** The engine as a host whose clock is `skewMs` ahead of the others (behind when negative). */
const skewed = (engine: Engine, skewMs: number): Engine => ({
  ...engine,
  clock: offsetClock(skewMs),
});

/** A worker of `type`'s handler on a host `skewMs` off the others. */
function workerOn(
  f: EngineFixture,
  skewMs: number,
  workerId: string,
  handlers: Record<string, JobHandler>,
  heartbeatEveryMs?: number,
): WorkerDeps {
  return {
    ...f.workerDeps(workerId, handlers, heartbeatEveryMs),
    engine: skewed(f.engine, skewMs),
  };
}

/** An hourly job of the `held` type, first due in 200 ms, and its first delivery. */
async function heldHourlyDueSoon(f: EngineFixture): Promise<{ job: Job; received: ReceivedRun }> {
  const { job } = await createJob(
    f.engine,
    testJob({
      type: "held",
      schedule: { every: "PT1H", startAt: new Date(Date.now() + 200).toISOString() },
    }),
  );
  return { job, received: await f.nextDelivery(f.engine.queues.normal, job.jobId) };
}

/** A one-off due now of `type`, and its first delivery. */
async function oneOffDueNow(
  f: EngineFixture,
  type: string,
): Promise<{ jobId: string; received: ReceivedRun }> {
  const { job } = await createJob(
    f.engine,
    testJob({ type, schedule: { runAt: new Date().toISOString() }, timeoutSeconds: 600 }),
  );
  return { jobId: job.jobId, received: await f.nextDelivery(f.engine.queues.normal, job.jobId) };
}

/**
 * Runs held by a worker on the right clock, met by hosts whose clocks disagree. Each case waits a
 * second or two of real time on heartbeats; side by side, each on tables and queues of its own (a
 * first delivery stays a first delivery: another case's receive would count as one of its
 * deliveries), they take the longest case's time.
 */
describe.concurrent("held runs met by hosts whose clocks disagree", () => {
  describe("a worker on a clock ahead is delivered a run another worker holds (written start, heartbeating)", () => {
    for (const aheadMs of [2 * SECOND, 30 * SECOND]) {
      it(`${aheadMs / SECOND} s ahead: finds the run busy and leaves it to its holder`, async ({
        onTestFinished,
      }) => {
        const f = await caseFixture(onTestFinished);
        const holder = heldHandler();
        const other = heldHandler();
        const { jobId, received } = await oneOffDueNow(f, "held");
        const first = processRun(
          workerOn(f, 0, "worker-a", { held: holder.handler }, SECOND),
          received,
        );
        await waitFor(
          "the written start",
          async () => (await runOf(f, jobId)).status === "RUNNING",
        );
        // The message came back (a duplicate, or its visibility ran out): the start is written now.
        const again = { ...received, receiveCount: 2 };
        expect(
          await processRun(workerOn(f, aheadMs, "worker-b", { held: other.handler }), again),
        ).toBe("ack");
        expect(other.contexts).toHaveLength(0);
        holder.release();
        expect(await first).toBe("ack");
        expect(await runOf(f, jobId)).toMatchObject({
          status: "SUCCEEDED",
          workerId: "worker-a",
          fence: 1,
        });
      }, 30_000);
    }

    it("5 min ahead: takes the run over as lapsed; the holder is fenced out, one success recorded", async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const holder = heldHandler();
      let takeoverCalls = 0;
      const { jobId, received } = await oneOffDueNow(f, "held");
      const first = processRun(
        workerOn(f, 0, "worker-a", { held: holder.handler }, SECOND),
        received,
      );
      await waitFor("the written start", async () => (await runOf(f, jobId)).status === "RUNNING");
      const again = { ...received, receiveCount: 2 };
      const takeover = workerOn(f, 5 * MINUTE, "worker-b", {
        held: async () => {
          takeoverCalls++;
        },
      });
      expect(await processRun(takeover, again)).toBe("ack");
      expect(takeoverCalls).toBe(1);
      // The holder's handler finishes too: its ending is refused by the fence it lost (or its
      // heartbeat, should it beat first, aborts it).
      holder.release();
      expect(await first).toBe("ack");
      expect(holder.contexts).toHaveLength(1);
      const run = await runOf(f, jobId);
      expect(run).toMatchObject({ status: "SUCCEEDED", workerId: "worker-b", fence: 2 });
    }, 30_000);

    it("5 min ahead, while the holder's handler still runs: its next heartbeat aborts it", async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const holder = heldHandler();
      const { jobId, received } = await oneOffDueNow(f, "held");
      const first = processRun(
        workerOn(f, 0, "worker-a", { held: holder.handler }, SECOND),
        received,
      );
      await waitFor("the written start", async () => (await runOf(f, jobId)).status === "RUNNING");
      const takeover = workerOn(f, 5 * MINUTE, "worker-b", { held: async () => undefined });
      expect(await processRun(takeover, { ...received, receiveCount: 2 })).toBe("ack");
      expect(await first).toBe("ack");
      expect(holder.contexts[0]?.signal.reason).toBeInstanceOf(FenceLostError);
      expect(await runOf(f, jobId)).toMatchObject({ status: "SUCCEEDED", workerId: "worker-b" });
    }, 30_000);
  });

  describe("overlap skip, the admitting worker's clock ahead of the one that listed the lease", () => {
    /** An hourly job (overlap skip) whose run worker-a holds, listed with its lease; a trigger's run. */
    async function secondRunBesideHeld(f: EngineFixture) {
      const holder = heldHandler();
      const { job, received } = await heldHourlyDueSoon(f);
      const first = processRun(
        workerOn(f, 0, "worker-a", { held: holder.handler }, SECOND),
        received,
      );
      await waitFor(
        "the holder's heartbeat",
        async () => (await runOf(f, job.jobId)).status === "RUNNING",
      );
      const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
      const second = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(second.message.scheduledFor).toBe(triggered.scheduledFor);
      return { holder, first, job, second, triggered };
    }

    it("30 s ahead: the listed lease is live by its clock too, and the second run is skipped", async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const { holder, first, job, second, triggered } = await secondRunBesideHeld(f);
      let beside = 0;
      const deps = workerOn(f, 30 * SECOND, "worker-b", {
        held: async () => {
          beside++;
        },
      });
      expect(await f.process(deps, second)).toBe("ack");
      expect(beside).toBe(0);
      const ended = (await f.runs()).find((r) => r.runId === triggered.runId);
      expect(ended?.status).toBe("SKIPPED");
      expect(ended?.reason).toMatch(/overlap/);
      holder.release();
      expect(await first).toBe("ack");
      expect(
        (await f.runs()).filter((r) => r.jobId === job.jobId && r.status === "SUCCEEDED"),
      ).toHaveLength(1);
    }, 30_000);

    it("5 min ahead: the listed lease reads lapsed, and the second run runs beside the first (a limit)", async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const { holder, first, second } = await secondRunBesideHeld(f);
      let beside = 0;
      const deps = workerOn(f, 5 * MINUTE, "worker-b", {
        held: async () => {
          if (holder.contexts[0]?.signal.aborted === false) beside++;
        },
      });
      expect(await f.process(deps, second)).toBe("ack");
      expect(beside).toBe(1);
      holder.release();
      expect(await first).toBe("ack");
    }, 30_000);
  });

  it("a worker whose clock steps back 30 s mid-run keeps its lease live to the others: no takeover", async ({
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    let stepMs = 0;
    const holder = heldHandler();
    const { jobId, received } = await oneOffDueNow(f, "held");
    const steppingBack: WorkerDeps = {
      ...f.workerDeps("worker-a", { held: holder.handler }, SECOND),
      engine: { ...f.engine, clock: () => new Date(Date.now() + stepMs) },
    };
    const first = processRun(steppingBack, received);
    await waitFor("the written start", async () => (await runOf(f, jobId)).status === "RUNNING");
    stepMs = -30 * SECOND;
    // A heartbeat by the stepped clock: the lease it writes is 30 s shorter than the last one.
    const shortened = await waitFor("a heartbeat on the stepped clock", async () => {
      const run = await runOf(f, jobId);
      return Date.parse(run.leaseUntil ?? "") < Date.now() + 35 * SECOND ? run : undefined;
    });
    expect(Date.parse(shortened.leaseUntil ?? "")).toBeGreaterThan(Date.now() + 20 * SECOND);
    let other = 0;
    const again = { ...received, receiveCount: 2 };
    expect(
      await processRun(
        workerOn(f, 0, "worker-b", {
          held: async () => {
            other++;
          },
        }),
        again,
      ),
    ).toBe("ack");
    expect(other).toBe(0);
    holder.release();
    expect(await first).toBe("ack");
    const ended = await runOf(f, jobId);
    expect(ended).toMatchObject({ status: "SUCCEEDED", workerId: "worker-a", fence: 1 });
    expect(ended.durationMs).toBeGreaterThanOrEqual(0);
  }, 30_000);
});

/**
 * One after another, on one pair of tables: the duplicate delivery's windows (1.2 s before the
 * holder's first write, 1.5 s for the duplicate's answer) and the start lags (within a second)
 * are bounds on real time that cases beside them could stretch, and a reaper pass on a clock
 * minutes ahead would re-send any other case's held run in the same tables.
 */
describe("hosts whose clocks disagree", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    // One shard: a reaper pass reads its shards one after another, and each case's run is on one
    // of them whatever their count; with the default eight, the backoff case's 30 passes read 240
    // shards, 210 of them holding nothing.
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  describe("a duplicate first delivery on a clock ahead, while the holder's start is unwritten", () => {
    it("2 s ahead, a second before the holder's first write: the job's admission still lets only the holder run", async () => {
      const holder = heldHandler();
      const duplicate = heldHandler();
      const { job, received } = await heldHourlyDueSoon(f);
      // The holder beats every 2 s, so its first write (the start's) is owed 2 s after its start.
      const first = processRun(
        workerOn(f, 0, "worker-a", { held: holder.handler }, 2 * SECOND),
        received,
      );
      await waitFor("the holder's handler", () => holder.contexts.length === 1);
      // SQS delivers the same message again a moment before the holder's first write, to a host
      // whose clock is 2 s ahead: by that clock the holder is past the write it owed.
      await sleep(1200);
      expect(await runOf(f, job.jobId)).toMatchObject({ status: "QUEUED", fence: 0 });
      const second = processRun(
        workerOn(f, 2 * SECOND, "worker-b", { held: duplicate.handler }),
        received,
      );
      const secondDone = await Promise.race([
        second.then(() => true),
        sleep(1500).then(() => false),
      ]);
      holder.release();
      duplicate.release();
      await Promise.all([first, second]);
      // The duplicate is acknowledged, its handler never entered: one run of the occurrence.
      expect(duplicate.contexts).toHaveLength(0);
      expect(secondDone).toBe(true);
      expect(await runOf(f, job.jobId)).toMatchObject({
        status: "SUCCEEDED",
        workerId: "worker-a",
        fence: 1,
      });
    }, 30_000);
  });

  /**
   * Each case waits 2 or 3 s of real time for its run's time; side by side, each on tables and
   * queues of its own (its deliveries are counted: another case's receive would be one), they take
   * the longest case's time.
   */
  describe.concurrent("what 2 s of skew costs a start", () => {
    /**
     * When the handler of a one-off due `dueInMs` from now, created by `api` (an engine over `f`),
     * enters, less its due time.
     */
    async function startLag(
      f: EngineFixture,
      api: Engine,
      worker: WorkerDeps["engine"],
      dueInMs: number,
    ) {
      const dueAt = Date.now() + dueInMs;
      const { job } = await createJob(
        api,
        testJob({ type: "stamp", schedule: { runAt: new Date(dueAt).toISOString() } }),
      );
      let enteredAt = 0;
      const deps = {
        ...f.workerDeps("worker-lag", {
          stamp: async () => {
            enteredAt = Date.now();
          },
        }),
        engine: worker,
      };
      // A message that came more than 2 s early by the worker's clock is sent again for its time.
      let deliveries = 0;
      while (deliveries < 3 && enteredAt === 0) {
        deliveries++;
        const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
        expect(await f.process(deps, received)).toBe("ack");
      }
      expect((await runOf(f, job.jobId)).status).toBe("SUCCEEDED");
      return { lag: enteredAt - dueAt, deliveries };
    }

    it("all on one clock: the run starts within a second of its time", async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const { lag, deliveries } = await startLag(f, f.engine, f.engine, 2 * SECOND);
      expect(lag).toBeGreaterThanOrEqual(0);
      expect(lag).toBeLessThan(SECOND);
      expect(deliveries).toBe(1);
    }, 30_000);

    it("an API 2 s behind sends the run's message 2 s late (its delay counts from its clock): up to 2 s late", async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const { lag } = await startLag(f, skewed(f.engine, -2 * SECOND), f.engine, 2 * SECOND);
      expect(lag).toBeGreaterThanOrEqual(SECOND);
      expect(lag).toBeLessThan(3 * SECOND);
    }, 30_000);

    it("a worker 2 s behind takes the message for early and waits or sends it back for its time: about 2 s late", async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const { lag } = await startLag(f, f.engine, skewed(f.engine, -2 * SECOND), 2 * SECOND);
      expect(lag).toBeGreaterThanOrEqual(SECOND);
      expect(lag).toBeLessThan(4 * SECOND);
    }, 30_000);

    it("an API 2 s ahead sends the message 2 to 3 s early (delays are whole seconds, rounded down): the worker sends it back for its time, and the run starts on time", async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const { lag, deliveries } = await startLag(
        f,
        skewed(f.engine, 2 * SECOND),
        f.engine,
        3 * SECOND,
      );
      expect(deliveries).toBe(2);
      expect(lag).toBeGreaterThanOrEqual(0);
      expect(lag).toBeLessThan(SECOND);
    }, 30_000);
  });

  it("an API 5 min behind takes a one-off due now for 5 min ahead: its run is sent 5 min late, and the reaper's re-send runs it a lease on, not skipped", async () => {
    const api = skewed(f.engine, -5 * MINUTE);
    const dueAt = Date.now();
    const { job } = await createJob(
      api,
      testJob({
        type: "noop",
        schedule: { runAt: new Date(dueAt).toISOString() },
        policies: { ...testJob().policies, misfire: "skip" },
      }),
    );
    // Put with its deadline a lease after it is due: the reaper reads it there.
    const queued = await runOf(f, job.jobId);
    expect(queued.status).toBe("QUEUED");
    // The reaper's first pass past that deadline (5 s to settle), on the right clock.
    const reapedAt = dueAt + f.engine.settings.leaseMs + 6 * SECOND;
    await reap(f.engine, { now: new Date(reapedAt) });
    expect((await runOf(f, job.jobId)).misfireFrom).toBe(new Date(reapedAt).toISOString());
    const copy = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(workerOn(f, reapedAt + 500 - Date.now(), "worker-r", {}), copy)).toBe(
      "ack",
    );
    // Late by the lease and more, but counted from the re-send: it runs.
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "SUCCEEDED", workerId: "worker-r" });
  }, 30_000);

  it("a worker 5 min behind sends a message due now back as early; the reaper's re-send, a lease after its time, runs it on the right clock, not skipped", async () => {
    const dueAt = Date.now() + SECOND;
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "noop",
        schedule: { runAt: new Date(dueAt).toISOString() },
        policies: { ...testJob().policies, misfire: "skip" },
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    let calls = 0;
    const count = {
      noop: async () => {
        calls++;
      },
    };
    expect(await f.process(workerOn(f, -5 * MINUTE, "worker-behind", count), received)).toBe("ack");
    expect(calls).toBe(0);
    expect((await runOf(f, job.jobId)).status).toBe("QUEUED");
    const reapedAt = dueAt + f.engine.settings.leaseMs + 6 * SECOND;
    await reap(f.engine, { now: new Date(reapedAt) });
    const copy = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(await f.process(workerOn(f, reapedAt + 500 - Date.now(), "worker-r", count), copy)).toBe(
      "ack",
    );
    expect(calls).toBe(1);
    expect(await runOf(f, job.jobId)).toMatchObject({ status: "SUCCEEDED", workerId: "worker-r" });
  }, 30_000);

  it("a reaper 5 min ahead re-sends a run due in 2 min as overdue; a worker on the right clock sends it back for its time", async () => {
    const dueAt = Date.now() + 2 * MINUTE;
    const { job } = await createJob(
      f.engine,
      testJob({ type: "noop", schedule: { runAt: new Date(dueAt).toISOString() } }),
    );
    await reap(skewed(f.engine, 5 * MINUTE));
    // Its lateness would count from the reaper's clock: ahead, that counts none.
    const resent = await runOf(f, job.jobId);
    expect(Date.parse(resent.misfireFrom ?? "")).toBeGreaterThan(dueAt);
    const copy = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(Date.parse(copy.message.dueAt)).toBe(dueAt);
    let calls = 0;
    const deps = workerOn(f, 0, "worker-c", {
      noop: async () => {
        calls++;
      },
    });
    expect(await f.process(deps, copy)).toBe("ack");
    expect(calls).toBe(0);
    expect((await runOf(f, job.jobId)).status).toBe("QUEUED");
  }, 30_000);

  describe("a reaper on a clock ahead meets a run held under a live lease", () => {
    /**
     * A one-off run held by a heartbeating worker on the right clock, its reaper deadline moved
     * into the past as a long run's stands once the reaper has first looked at it (a lease after its lease).
     */
    async function heldLongRun() {
      const holder = heldHandler();
      const { jobId, received } = await oneOffDueNow(f, "held");
      const first = processRun(
        workerOn(f, 0, "worker-a", { held: holder.handler }, SECOND),
        received,
      );
      const run = await waitFor("the written start", async () => {
        const found = await runOf(f, jobId);
        return found.status === "RUNNING" ? found : undefined;
      });
      await f.engine.doc.send(
        new UpdateCommand({
          TableName: f.engine.tables.runs,
          Key: runKeyOf(run),
          UpdateExpression: "SET inflightSk = :deadline",
          ExpressionAttributeValues: { ":deadline": new Date(Date.now() - MINUTE).toISOString() },
        }),
      );
      return { holder, first, jobId, received };
    }

    /** How many times the reaper has re-sent the job's one run since its start. */
    async function resendsOf(jobId: string): Promise<number> {
      const item = (await scanTable(f.engine.doc, f.engine.tables.runs)).find(
        (i) => i.jobId === jobId,
      );
      return typeof item?.resentCount === "number" ? item.resentCount : 0;
    }

    it("30 s ahead: the lease is live by its clock too, and nothing is re-sent", async () => {
      const { holder, first, jobId } = await heldLongRun();
      const reaper = skewed(f.engine, 30 * SECOND);
      await reap(reaper);
      expect(await resendsOf(jobId)).toBe(0);
      holder.release();
      expect(await first).toBe("ack");
      expect(await runOf(f, jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
    }, 30_000);

    it("5 min ahead: re-sends it, its re-sends back off, and a worker on the right clock leaves the run to its holder", async () => {
      const { holder, first, jobId } = await heldLongRun();
      const reaperAt = (passMs: number): Engine => skewed(f.engine, 5 * MINUTE + passMs);
      // One pass a minute for half an hour, by the reaper's clock (the lease never lapses by the
      // right one: the holder beats every second).
      const resentAt: number[] = [];
      let count = 0;
      for (let minute = 0; minute < 30; minute++) {
        await reap(reaperAt(minute * MINUTE));
        const now = await resendsOf(jobId);
        if (now === count) continue;
        expect(now).toBe(count + 1);
        count = now;
        resentAt.push(minute);
        const copy = await f.nextDelivery(f.engine.queues.normal, jobId);
        expect(await f.process(workerOn(f, 0, "worker-c", {}), copy)).toBe("ack");
      }
      // A lease apart, then doubling to 15 minutes: 5 in 30 passes, not one a pass.
      expect(resentAt).toEqual([0, 2, 5, 10, 19]);
      holder.release();
      expect(await first).toBe("ack");
      expect(await runOf(f, jobId)).toMatchObject({
        status: "SUCCEEDED",
        workerId: "worker-a",
        fence: 1,
      });
    }, 90_000);
  });
});

describe("dispatcher passes on clocks that disagree", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  /** An hourly job whose pending entry, due in 3 minutes, sits in its own minute's bucket. */
  async function dueInThreeMinutes(jobId: string) {
    const dueAt = new Date(Date.now() + 3 * MINUTE);
    await seedJobs(
      f,
      [{ jobId, schedule: { every: "PT1H", startAt: dueAt.toISOString() }, dueAt }],
      new Date(),
    );
    return { dueAt, shard: shardOf(jobId, f.engine.settings.shardCount) };
  }

  const runsOf = async (jobId: string) => (await f.runs()).filter((r) => r.jobId === jobId);

  it("a pass 5 min behind does not reach an entry due in 3 minutes; the next pass on the right clock claims it", async () => {
    const { dueAt, shard } = await dueInThreeMinutes("behind-pass");
    expect((await dispatchShard(skewed(f.engine, -5 * MINUTE), shard, "behind")).outcome).toBe(
      "swept",
    );
    // Its horizon (its now and the 5 min lookahead) is the right clock's now: not 3 min ahead.
    expect(await runsOf("behind-pass")).toHaveLength(0);
    expect((await dispatchShard(f.engine, shard, "right")).outcome).toBe("swept");
    const [run] = await runsOf("behind-pass");
    expect(run).toMatchObject({ status: "QUEUED", dueAt: dueAt.toISOString() });
  }, 30_000);

  it("a pass 5 min ahead claims the entry early; its message comes early and a worker on the right clock sends it back for its time", async () => {
    const { dueAt, shard } = await dueInThreeMinutes("ahead-pass");
    expect((await dispatchShard(skewed(f.engine, 5 * MINUTE), shard, "ahead")).outcome).toBe(
      "swept",
    );
    const copy = await f.nextDelivery(f.engine.queues.normal, "ahead-pass");
    expect(copy.message.dueAt).toBe(dueAt.toISOString());
    let calls = 0;
    const deps = f.workerDeps("worker-right", {
      noop: async () => {
        calls++;
      },
    });
    expect(await f.process(deps, copy)).toBe("ack");
    expect(calls).toBe(0);
    const [run] = await runsOf("ahead-pass");
    expect(run?.status).toBe("QUEUED");
    // The next pass on the right clock finds the shard's line ahead of it and reads back.
    expect((await dispatchShard(f.engine, shard, "right")).outcome).toBe("swept");
  }, 30_000);
});

/**
 * A writer behind the passes files an overdue entry in its own minute, a bucket the passes' recent
 * windows have left behind. Each case has tables of its own: its passes run up to 20 minutes ahead
 * of real time and record where the next pass starts by that clock.
 */
describe.concurrent("an overdue entry filed by a writer behind the dispatcher passes", () => {
  /** Half a minute into the current minute: the passes' clock, which the cases move a minute a pass. */
  const startOfCase = () => Math.floor(Date.now() / MINUTE) * MINUTE + 30 * SECOND;

  /**
   * One completed pass at `baseMs`; then an hourly job's entry, due a minute before the writer's
   * now and filed by it, whose clock reads `behindMs` less than the passes' 10 s after `baseMs`;
   * then passes a minute apart from `baseMs` + 20 s. Returns how many minutes on the first pass
   * that claimed the entry ran, or null when none of those up to `minutes` on did.
   */
  async function minutesUntilClaimed(
    f: EngineFixture,
    jobId: string,
    behindMs: number,
    minutes: number,
  ): Promise<number | null> {
    const baseMs = startOfCase();
    const shard = shardOf(jobId, f.engine.settings.shardCount);
    const warned: { message: string; fields: Record<string, unknown> }[] = [];
    const log = {
      ...f.engine.obs.log,
      warn: (message: string, fields = {}) => void warned.push({ message, fields }),
    };
    const passAt = (ms: number): Engine => ({
      ...f.engine,
      clock: () => new Date(ms),
      obs: { ...f.engine.obs, log },
    });
    expect((await dispatchShard(passAt(baseMs), shard, "before")).outcome).toBe("swept");
    const writerNow = new Date(baseMs + 10 * SECOND - behindMs);
    const dueAt = new Date(writerNow.getTime() - MINUTE);
    await seedJobs(
      f,
      [
        {
          jobId,
          schedule: { every: "PT1H", startAt: dueAt.toISOString() },
          dueAt,
          filedAt: writerNow,
        },
      ],
      writerNow,
    );
    for (let minute = 0; minute <= minutes; minute++) {
      const at = baseMs + 20 * SECOND + minute * MINUTE;
      const pass = await dispatchShard(passAt(at), shard, `after-${minute}`);
      // What it costs: one bucket (one Query) more for each minute the passes' line moves on.
      expect(pass).toMatchObject({ outcome: "swept", lookbackBuckets: minute === 0 ? 0 : 1 });
      const runs = (await f.runs()).filter((r) => r.jobId === jobId);
      if (runs.length > 0) {
        expect(runs.map((r) => r.scheduledFor)).toEqual([dueAt.toISOString()]);
        // The operator's sign of a writer behind: the pass counts what its look-back found and
        // warns, naming the shard, the bucket and the job.
        expect(pass).toMatchObject({ lookbackEntries: 1 });
        expect(warned.filter((w) => w.message.includes("behind the passes' line"))).toEqual([
          expect.objectContaining({
            fields: expect.objectContaining({
              shard,
              entries: 1,
              buckets: [writerNow.toISOString().slice(0, 16)],
              jobIds: [jobId],
            }),
          }),
        ]);
        return minute;
      }
      expect(pass).toMatchObject({ lookbackEntries: 0 });
    }
    expect((await f.dueEntries()).filter((e) => e.jobId === jobId)).toHaveLength(1);
    expect(warned.filter((w) => w.message.includes("behind the passes' line"))).toEqual([]);
    return null;
  }

  for (const behind of [5, 15]) {
    it(`${behind} min behind: a pass reads its bucket again 15 minutes behind the passes' line and claims it within 15 minutes`, async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const claimedAfter = await minutesUntilClaimed(
        f,
        `filed-${behind}-behind`,
        behind * MINUTE,
        20,
      );
      // Its bucket, `behind` minutes before the passes' minute, is read again by the pass that
      // moves their line (two minutes before it began) to 16 minutes past it: 18 - behind on.
      expect(claimedAfter).toBe(18 - behind);
    }, 60_000);
  }

  it("20 min behind: its bucket lies before every pass's look-back, and no pass claims it (a limit)", async ({
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    // Each pass's look-back begins where the one before it ended, so after the first two passes
    // the range only moves away from the entry's bucket: five passes show it left behind.
    expect(await minutesUntilClaimed(f, "filed-20-behind", 20 * MINUTE, 5)).toBeNull();
  }, 60_000);
});

/**
 * The bound architecture.md states (Known limits, "Clocks that disagree"), measured on a clock of
 * the cases' own: passes a minute apart, 50 s into each minute, from FIRST_PASS_MINUTE on (the
 * first one scans for the shard's backlog, the ones after it are steady), so the look-back has read
 * every bucket up to 18 minutes before the last pass's minute when the entry lands (the scan every
 * one before those). An entry is claimed when its
 * bucket's minute is at most 17 minutes before the minute of the last pass begun before its write
 * (m_P), within 15 minutes of its write and the time to the next pass; never when earlier.
 */
describe.concurrent("the look-back's bound, measured on the passes' own clock", () => {
  const PHASE_MS = 50 * SECOND;
  /**
   * The minute, relative to the write's (`m`), of the cases' first pass. A pass's look-back range
   * comes from the line the pass before it recorded, so from the second pass after the scan on
   * each reads one bucket, as after hours of passes; the table holds no entry before the write.
   * The cases began 20 minutes before it once: 17 passes more each, over empty buckets.
   */
  const FIRST_PASS_MINUTE = -3;

  /**
   * Passes a minute apart from FIRST_PASS_MINUTE to `m` + `lastPassMinute` min (each PHASE_MS into
   * its minute), and between them, at `m` + `writtenAtMs`, the write of a writer `behindMs` behind
   * (an hourly job's entry due a minute before its clock, filed in its clock's minute). Returns how
   * long after the write the pass that claimed it began, or null when none did.
   */
  async function claimedAfterMs(
    f: EngineFixture,
    jobId: string,
    behindMs: number,
    writtenAtMs: number,
    lastPassMinute: number,
  ): Promise<number | null> {
    const m = Math.floor(Date.now() / MINUTE) * MINUTE;
    const shard = shardOf(jobId, f.engine.settings.shardCount);
    const passAt = async (ms: number) => {
      const pass = await dispatchShard({ ...f.engine, clock: () => new Date(ms) }, shard, `p${ms}`);
      expect(pass.outcome).toBe("swept");
      return pass;
    };
    const writtenAt = m + writtenAtMs;
    const passes = Array.from(
      { length: lastPassMinute + 1 - FIRST_PASS_MINUTE },
      (_, i) => m + (i + FIRST_PASS_MINUTE) * MINUTE + PHASE_MS,
    );
    for (const at of passes.filter((at) => at < writtenAt)) await passAt(at);
    const writerNow = new Date(writtenAt - behindMs);
    const dueAt = new Date(writerNow.getTime() - MINUTE);
    const schedule = { every: "PT1H", startAt: dueAt.toISOString() };
    await seedJobs(f, [{ jobId, schedule, dueAt, filedAt: writerNow }], writerNow);
    for (const at of passes.filter((at) => at > writtenAt)) {
      await passAt(at);
      const runs = (await f.runs()).filter((r) => r.jobId === jobId);
      if (runs.length > 0) {
        expect(runs.map((r) => r.scheduledFor)).toEqual([dueAt.toISOString()]);
        return at - writtenAt;
      }
    }
    expect((await f.dueEntries()).filter((e) => e.jobId === jobId)).toHaveLength(1);
    return null;
  }

  const cases: {
    name: string;
    behindMs: number;
    writtenAtMs: number;
    /** Derived from the rule above; the write is at `m` + writtenAtMs. */
    claimedAfterMs: number | null;
    /**
     * The minute of the case's last pass: 20, past the bound, for an entry claimed; for one never
     * claimed, the fifth pass after its write. Each pass's look-back begins where the one before
     * it ended, so once the passes' look-back has read past the entry's bucket (before the write),
     * every later pass only moves away from it; five show it left behind.
     */
    lastPassMinute: number;
  }[] = [
    {
      // Bucket m-2 (m_P = m): the next pass re-sweeps from two minutes before m_P, 55 s on.
      name: "2.5 min behind, 5 s after a pass: the next pass's re-sweep claims it",
      behindMs: 2.5 * MINUTE,
      writtenAtMs: 55 * SECOND,
      claimedAfterMs: 55 * SECOND,
      lastPassMinute: 20,
    },
    {
      // Bucket m-3 (m_P - 3), before the next pass's re-sweep: the look-back reads it once the
      // passes' line reaches m+13, at m+15 min, 14 min 55 s on.
      name: "3.5 min behind, 5 s after a pass: past the re-sweep, claimed by the look-back within 15 min",
      behindMs: 3.5 * MINUTE,
      writtenAtMs: 55 * SECOND,
      claimedAfterMs: 14 * MINUTE + 55 * SECOND,
      lastPassMinute: 20,
    },
    {
      // Bucket m-17 (m_P = m-1, so m_P - 16), read by the pass whose line reaches m-1: at m+1.
      name: "17 min behind, 5 s before a pass: claimed a pass later",
      behindMs: 17 * MINUTE,
      writtenAtMs: 45 * SECOND,
      claimedAfterMs: MINUTE + 5 * SECOND,
      lastPassMinute: 20,
    },
    {
      // Bucket m-18 (m_P - 17), which the pass at m reads 5 s after the write.
      name: "18 min 45 s behind, 5 s before a pass: its bucket 17 min before m_P, claimed by that pass",
      behindMs: 18 * MINUTE + 45 * SECOND,
      writtenAtMs: 45 * SECOND,
      claimedAfterMs: 5 * SECOND,
      lastPassMinute: 20,
    },
    {
      // Bucket m-19 (m_P - 18), which the pass at m-1 min read before the write.
      name: "18 min 50 s behind, 5 s before a pass: its bucket 18 min before m_P, never claimed (the limit)",
      behindMs: 18 * MINUTE + 50 * SECOND,
      writtenAtMs: 45 * SECOND,
      claimedAfterMs: null,
      lastPassMinute: 4,
    },
  ];
  for (const behind of [5, 20]) {
    it(`a pass on a clock ${behind} min behind the last reads back 15 minutes and 15 look-back buckets before those; the next on the right clock as many as the line moves on, up to 15`, async ({
      onTestFinished,
    }) => {
      const f = await caseFixture(onTestFinished);
      const m = Math.floor(Date.now() / MINUTE) * MINUTE;
      const passAt = async (ms: number) => {
        const engine = { ...f.engine, clock: () => new Date(ms) };
        const pass = await dispatchShard(engine, 0, `p${ms}`);
        if (pass.outcome !== "swept") throw new Error(`pass at ${ms}: ${pass.outcome}`);
        return pass;
      };
      for (let minute = FIRST_PASS_MINUTE; minute < 0; minute++)
        await passAt(m + minute * MINUTE + PHASE_MS);
      // It finds `sweepFrom` ahead of its window, reads back 15 minutes as backlog and the 15
      // before those as look-back, and records its line, two minutes before its clock.
      const back = await passAt(m + PHASE_MS - behind * MINUTE);
      expect(back).toMatchObject({ backlogBuckets: 15, lookbackBuckets: 15 });
      // The next pass on the right clock moves the line `behind` + 1 minutes on, and reads the
      // buckets 15 minutes behind those again: 6 for 5 behind, the 15 at most for 20.
      const right = await passAt(m + MINUTE + PHASE_MS);
      expect(right.lookbackBuckets).toBe(Math.min(behind + 1, 15));
      expect((await passAt(m + 2 * MINUTE + PHASE_MS)).lookbackBuckets).toBe(1);
    }, 120_000);
  }
  it("two passes read the same look-back bucket (the second took the first's lease over): each entry is claimed once, and each job keeps one next entry", async ({
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished);
    const m = Math.floor(Date.now() / MINUTE) * MINUTE;
    const { shardCount, leaseMs } = f.engine.settings;
    const jobIds = Array.from({ length: 40 }, (_, i) => `race-${i}`).filter(
      (jobId) => shardOf(jobId, shardCount) === 0,
    );
    const passAt = (ms: number, owner: string) =>
      dispatchShard({ ...f.engine, clock: () => new Date(ms) }, 0, owner);
    for (let minute = FIRST_PASS_MINUTE; minute < 8; minute++) {
      if (minute === 1) {
        // Writers 10 minutes behind the passes file minutely jobs' overdue entries, at m + 55 s.
        const writerNow = new Date(m + 55 * SECOND - 10 * MINUTE);
        const dueAt = new Date(writerNow.getTime() - MINUTE);
        const schedule = { every: "PT1M", startAt: dueAt.toISOString() };
        await seedJobs(
          f,
          jobIds.map((jobId) => ({ jobId, schedule, dueAt, filedAt: writerNow })),
          writerNow,
        );
      }
      expect((await passAt(m + minute * MINUTE + PHASE_MS, `p${minute}`)).outcome).toBe("swept");
    }
    expect((await f.runs()).filter((r) => jobIds.includes(r.jobId))).toEqual([]);
    // The pass at m + 8 min reads the writers' bucket; one on a clock a lease on takes its lease
    // once the first holds it, and the first sweeps only after that (each on a client of its own,
    // so that the order does not rest on which request the emulator answers first).
    const at = m + 8 * MINUTE + PHASE_MS;
    const firstClients = createTestClients();
    const secondClients = createTestClients();
    onTestFinished(() => {
      firstClients.destroy();
      secondClients.destroy();
    });
    const firstLeased = signal();
    const secondLeased = signal();
    let firstRequests = 0;
    firstClients.doc.middlewareStack.add(
      (next) => async (args) => {
        const request = firstRequests++;
        if (request > 0) await secondLeased.promise;
        try {
          return await next(args);
        } finally {
          if (request === 0) firstLeased.resolve();
        }
      },
      { step: "initialize", name: "firstSweepsAfterTakeover" },
    );
    let secondRequests = 0;
    secondClients.doc.middlewareStack.add(
      (next) => async (args) => {
        const request = secondRequests++;
        if (request === 0) await firstLeased.promise;
        try {
          return await next(args);
        } finally {
          if (request === 0) secondLeased.resolve();
        }
      },
      { step: "initialize", name: "secondTakesOver" },
    );
    const [first, second] = await Promise.all([
      dispatchShard({ ...f.engine, doc: firstClients.doc, clock: () => new Date(at) }, 0, "first"),
      dispatchShard(
        { ...f.engine, doc: secondClients.doc, clock: () => new Date(at + leaseMs + SECOND) },
        0,
        "second",
      ),
    ]);
    expect(second).toMatchObject({ outcome: "swept", tookOver: true });
    expect([first.outcome, second.outcome].sort()).toEqual(["fence-lost", "swept"]);
    const runs = (await f.runs()).filter((r) => jobIds.includes(r.jobId));
    const occurrences = runs.map((r) => `${r.jobId}@${r.scheduledFor}`);
    expect(new Set(occurrences).size).toBe(occurrences.length);
    expect(new Set(runs.map((r) => r.jobId)).size).toBe(jobIds.length);
    const entries = (await f.dueEntries()).filter((e) => jobIds.includes(e.jobId));
    expect(entries.map((e) => e.jobId).sort()).toEqual([...jobIds].sort());
  }, 120_000);
  for (const c of cases) {
    it(c.name, async ({ onTestFinished }) => {
      const f = await caseFixture(onTestFinished);
      const measured = await claimedAfterMs(
        f,
        "bound",
        c.behindMs,
        c.writtenAtMs,
        c.lastPassMinute,
      );
      expect(measured).toBe(c.claimedAfterMs);
      // Known limits: within 15 minutes of its write and a tick's phase (to the next pass).
      if (measured !== null) {
        expect(measured).toBeLessThanOrEqual(
          15 * MINUTE + ((PHASE_MS - c.writtenAtMs + MINUTE) % MINUTE),
        );
      }
    }, 120_000);
  }
});
