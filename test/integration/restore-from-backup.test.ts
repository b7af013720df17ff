import { describe, expect, it } from "vitest";
import { dispatchShard, type PassResult } from "../../shared/dispatch/dispatcher.js";
import { REAPER_SETTLE_MS, reap } from "../../shared/dispatch/reaper.js";
import { tickOnce } from "../../shared/dispatch/tick.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob } from "../../shared/jobs/index.js";
import { QuotaExceededError } from "../../shared/quotas/limits.js";
import { getJob } from "../../shared/storage/run-reads.js";
import {
  readQuotaOverride,
  readQuotaPartition,
  readQuotaUsage,
  writeQuotaOverride,
} from "../../shared/storage/tenant-quotas.js";
import {
  rotateWebhookSecret,
  signingSecrets,
  tenantWebhookSecrets,
} from "../../shared/webhooks/secrets.js";
import {
  caseFixture,
  type EngineFixture,
  type ShiftedClock,
  shiftedClock,
  testJob,
} from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";
import { createTestClients, scanTable } from "../support/namespace.js";
import { putItems, writeItems } from "../support/seed.js";
import { waitFor } from "../support/wait.js";

const LEASE_MS = 20_000;
/** Worker A's heartbeat pace: the test does what follows the restore between two of them. */
const SLOW_HEARTBEAT_MS = 5000;

/**
 * An operator's restore from a point-in-time backup, as the scheduler meets it: every table goes
 * back to what it held at the backup point while the queues, the workers and the targets keep
 * what they have seen since. `snapshot` is the backup (every item of every table), `restore`
 * puts the tables back to it (every item deleted, the snapshot's put back), as an operator who
 * restores to a side table and copies it over the live one does.
 */
type Snapshot = ReadonlyMap<string, readonly Record<string, unknown>[]>;

const keyAttributes = ["pk", "sk"] as const;

async function snapshot(f: EngineFixture): Promise<Snapshot> {
  const tables = Object.values(f.engine.tables);
  return new Map(
    await Promise.all(tables.map(async (t) => [t, await scanTable(f.engine.doc, t)] as const)),
  );
}

async function restore(f: EngineFixture, backup: Snapshot): Promise<void> {
  for (const [table, items] of backup) {
    const now = await scanTable(f.engine.doc, table);
    const keyOf = (item: Record<string, unknown>) =>
      Object.fromEntries(keyAttributes.filter((k) => k in item).map((k) => [k, item[k]]));
    await writeItems(
      f,
      table,
      now.map((item) => ({ DeleteRequest: { Key: keyOf(item) } })),
    );
    await putItems(f, table, items);
  }
}

/** A handler that runs until the test lets it end (or its signal fires), counting its runs. */
function gatedHandler() {
  const started: JobContext[] = [];
  const releases: (() => void)[] = [];
  const handler = (ctx: JobContext) => {
    started.push(ctx);
    return new Promise<void>((resolve) => {
      releases.push(resolve);
      ctx.signal.addEventListener("abort", () => resolve(), { once: true });
    });
  };
  return {
    handler,
    started,
    release: (i: number) => releases[i]?.(),
  };
}

/**
 * Tables and queues of the test's own, destroyed when it ends: a restore puts back every table
 * whole, so cases side by side cannot share them. The engine's clock runs `at.offsetMs` ahead of
 * the machine's: a test moves it on past a restore.
 *
 * One shard: what a restore does to a shard's lease, its due entries and its runs is the same on
 * each, and every case follows one job on one shard. Eight (the default) made each tick eight
 * passes, seven over empty shards, and the pass after the two-hour restore read 120 backlog
 * buckets on each of them (over 800 Queries for nothing the case looks at).
 */
async function ownFixture(
  atEnd: (cleanup: () => Promise<void>) => void,
): Promise<{ f: EngineFixture; at: ShiftedClock }> {
  const at = shiftedClock();
  const f = await caseFixture(atEnd, {
    settings: { leaseMs: LEASE_MS, quotaCacheMs: 0, shardCount: 1, maxShardCount: 1 },
    clock: at.clock,
  });
  return { f, at };
}

/**
 * Each case waits out a heartbeat of A's (SLOW_HEARTBEAT_MS) for its start to be written, then
 * restores, re-sends and starts the run again before A's next: side by side, each on tables and
 * queues of its own (it.concurrent: the suite stays apart from the concurrent one after it, which
 * vitest would otherwise run beside these), the three waits overlap where one after another they
 * were most of the file.
 */
describe("a restore while a worker holds a run it started after the backup point", () => {
  it.concurrent("refuses that worker's ending once the run was started again: one run recorded, by its holder", async ({
    onTestFinished,
  }) => {
    const { f } = await ownFixture(onTestFinished);
    const fenceLostBefore = f.metrics.sum("FenceLost", { component: "worker" });
    const gateA = gatedHandler();
    const gateB = gatedHandler();
    const { job } = await createJob(
      f.engine,
      testJob({ type: "gate", schedule: { runAt: new Date().toISOString() }, timeoutSeconds: 30 }),
    );
    const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // The backup point: the run QUEUED, fence 0.
    const backup = await snapshot(f);
    expect((await runOf(f, job.jobId)).status).toBe("QUEUED");

    // Worker A starts it after the backup point; its first heartbeat writes the start (fence 1).
    const workerA = f.workerDeps("worker-a", { gate: gateA.handler }, SLOW_HEARTBEAT_MS);
    const endingA = processRun(workerA, first);
    await waitFor("A's start written", async () => {
      const run = await runOf(f, job.jobId);
      return run.status === "RUNNING" && run.workerId === "worker-a" ? run : undefined;
    });
    // The operator restores: the run is QUEUED at fence 0 again while A still runs it, between
    // two of A's heartbeats (what follows takes well under SLOW_HEARTBEAT_MS).
    await restore(f, backup);
    expect((await runOf(f, job.jobId)).status).toBe("QUEUED");

    // The reaper finds the restored run QUEUED past its deadline and sends it again; worker B
    // starts it under fence 1, the fence A holds.
    const resent = await reap(f.engine, {
      now: new Date(Date.now() + LEASE_MS + REAPER_SETTLE_MS + 1000),
    });
    expect(resent.resent).toBeGreaterThanOrEqual(1);
    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const workerB = f.workerDeps("worker-b", { gate: gateB.handler }, 300);
    const endingB = processRun(workerB, again);
    await waitFor("B's start written", async () => {
      const run = await runOf(f, job.jobId);
      return run.status === "RUNNING" && run.workerId === "worker-b" ? run : undefined;
    });

    // A's handler ends: its ending must not be taken for B's.
    gateA.release(0);
    // Refused, it acknowledges its message: the run is another worker's.
    expect(await endingA).toBe("ack");
    const whileB = await runOf(f, job.jobId);
    expect(whileB.status).toBe("RUNNING");
    expect(whileB.workerId).toBe("worker-b");
    expect(f.metrics.sum("FenceLost", { component: "worker" })).toBe(fenceLostBefore + 1);

    gateB.release(0);
    expect(await endingB).toBe("ack");
    const ended = await runOf(f, job.jobId);
    expect([ended.status, ended.workerId]).toEqual(["SUCCEEDED", "worker-b"]);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  }, 60_000);

  it.concurrent("leaves the tenant's concurrent-runs slot to the start that holds the run now", async ({
    onTestFinished,
  }) => {
    const { f } = await ownFixture(onTestFinished);
    const tenantId = "tenant-one-slot";
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 1 }, f.engine.clock());
    const gateA = gatedHandler();
    const gateB = gatedHandler();
    const { job } = await createJob(
      f.engine,
      testJob({
        tenantId,
        type: "gate",
        schedule: { runAt: new Date().toISOString() },
        timeoutSeconds: 30,
      }),
    );
    const first = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // The backup point: the run QUEUED, the tenant's one slot free.
    const backup = await snapshot(f);
    // B's heartbeats move its slot's lease: a slot is told by its place, run and fence.
    const slotsNow = async () =>
      (await readQuotaPartition(f.engine, tenantId)).slots.map((s) => [s.index, s.runId, s.fence]);
    expect(await slotsNow()).toEqual([]);

    // Worker A takes the slot and starts the run (fence 1) after the backup point.
    const workerA = f.workerDeps("worker-a", { gate: gateA.handler }, SLOW_HEARTBEAT_MS);
    const endingA = processRun(workerA, first);
    const { runId } = await waitFor("A's start written", async () => {
      const run = await runOf(f, job.jobId);
      return run.status === "RUNNING" && run.workerId === "worker-a" ? run : undefined;
    });
    // Between two of A's heartbeats: the run QUEUED at fence 0 again, and the slot free.
    await restore(f, backup);
    expect(await slotsNow()).toEqual([]);
    await reap(f.engine, { now: new Date(Date.now() + LEASE_MS + REAPER_SETTLE_MS + 1000) });
    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // Worker B takes the one slot, under the run and fence A holds, and starts the run.
    const workerB = f.workerDeps("worker-b", { gate: gateB.handler }, 300);
    const endingB = processRun(workerB, again);
    await waitFor("B's start written", async () => {
      const run = await runOf(f, job.jobId);
      return run.status === "RUNNING" && run.workerId === "worker-b" ? run : undefined;
    });
    const heldByB = await slotsNow();
    expect(heldByB).toEqual([[0, runId, 1]]);

    // A's ending is refused; the slot it frees on its way out is B's, which runs on.
    gateA.release(0);
    expect(await endingA).toBe("ack");
    expect((await runOf(f, job.jobId)).workerId).toBe("worker-b");
    expect(await slotsNow()).toEqual(heldByB);

    gateB.release(0);
    expect(await endingB).toBe("ack");
    expect(await slotsNow()).toEqual([]);
  }, 60_000);

  it.concurrent("leaves the job's activeRuns entry to the start that holds the run now (allow, maxConcurrent 1)", async ({
    onTestFinished,
  }) => {
    const { f } = await ownFixture(onTestFinished);
    const gateA = gatedHandler();
    const gateB = gatedHandler();
    const startAt = new Date(Math.ceil((Date.now() + 2000) / 1000) * 1000);
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "gate",
        schedule: { every: "PT1M", startAt: startAt.toISOString() },
        timeoutSeconds: 30,
        policies: { ...testJob().policies, overlap: "allow", maxConcurrent: 1 },
      }),
    );
    await tickOnce(f.engine, "restore-listed");
    const firstRun = async () =>
      (await f.runs()).find(
        (r) => r.jobId === job.jobId && r.scheduledFor === startAt.toISOString(),
      );
    const queued = await firstRun();
    if (!queued) throw new Error("no run");
    const first = await f.nextDeliveryOfRun(queued);
    // The backup point: the run QUEUED, the job listing no run.
    const backup = await snapshot(f);
    const listed = async () => (await getJob(f.engine, job.jobId))?.activeRuns;

    // Worker A is admitted (the job lists the run) and starts it after the backup point.
    const workerA = f.workerDeps("worker-a", { gate: gateA.handler }, SLOW_HEARTBEAT_MS);
    const endingA = processRun(workerA, first);
    await waitFor("A's start written", async () => {
      const run = await firstRun();
      return run?.status === "RUNNING" && run.workerId === "worker-a" ? run : undefined;
    });
    expect(Object.keys((await listed()) ?? {})).toEqual([queued.runId]);
    const fenceLostBefore = f.metrics.sum("FenceLost", { component: "worker" });
    await restore(f, backup);
    expect(await listed()).toEqual({});
    await reap(f.engine, { now: new Date(Date.now() + LEASE_MS + REAPER_SETTLE_MS + 1000) });
    const again = await f.nextDeliveryOfRun(queued);
    const workerB = f.workerDeps("worker-b", { gate: gateB.handler }, 300);
    const endingB = processRun(workerB, again);
    await waitFor("B's start written", async () => {
      const run = await firstRun();
      return run?.status === "RUNNING" && run.workerId === "worker-b" ? run : undefined;
    });
    expect(Object.keys((await listed()) ?? {})).toEqual([queued.runId]);

    // A's ending is refused before it writes the job: the run stays listed, B's, holding the one
    // run allow lets the job have.
    gateA.release(0);
    expect(await endingA).toBe("ack");
    expect(f.metrics.sum("FenceLost", { component: "worker" })).toBe(fenceLostBefore + 1);
    expect(Object.keys((await listed()) ?? {})).toEqual([queued.runId]);
    expect((await firstRun())?.workerId).toBe("worker-b");

    gateB.release(0);
    expect(await endingB).toBe("ack");
    expect((await firstRun())?.status).toBe("SUCCEEDED");
  }, 60_000);
});

/**
 * Side by side, each on tables of its own: they bound no real time (the cases above do, restoring
 * between two of A's heartbeats, and run first, without these beside them).
 */
describe.concurrent("restores that bound no real time", () => {
  describe("a restore to before a run ended", () => {
    it("runs it again, and its recurring job goes on claiming its occurrences", async ({
      onTestFinished,
    }) => {
      const { f } = await ownFixture(onTestFinished);
      const startAt = new Date(Math.ceil((Date.now() + 2000) / 1000) * 1000);
      const { job } = await createJob(
        f.engine,
        testJob({ schedule: { every: "PT1M", startAt: startAt.toISOString() } }),
      );
      await tickOnce(f.engine, "restore-recurring");
      const backup = await snapshot(f);
      // The claim queued the occurrences of the next minutes; the first is due now.
      const firstRun = async () =>
        (await f.runs()).find(
          (r) => r.jobId === job.jobId && r.scheduledFor === startAt.toISOString(),
        );
      const queued = await firstRun();
      if (!queued) throw new Error("no run");
      expect(await f.process(f.workerDeps("w"), await f.nextDeliveryOfRun(queued))).toBe("ack");
      expect((await firstRun())?.status).toBe("SUCCEEDED");

      await restore(f, backup);
      expect((await firstRun())?.status).toBe("QUEUED");
      // The message was acknowledged: the reaper re-sends the run, which runs again.
      const pass = await reap(f.engine, {
        now: new Date(Date.now() + LEASE_MS * 2 + REAPER_SETTLE_MS + 1000),
      });
      expect(pass.resent).toBeGreaterThanOrEqual(1);
      const again = await f.nextDeliveryOfRun(queued);
      expect(await f.process(f.workerDeps("w2"), again)).toBe("ack");
      const rerun = (await f.runs()).find((r) => r.runId === queued.runId);
      expect(rerun?.status).toBe("SUCCEEDED");
      expect((await getJob(f.engine, job.jobId))?.status).toBe("ACTIVE");
      expect((await f.dueEntries()).some((d) => d.jobId === job.jobId)).toBe(true);
    }, 60_000);
  });

  describe("a restore to before a job was created", () => {
    it("acknowledges the lost job's queued message without writing a run", async ({
      onTestFinished,
    }) => {
      const { f } = await ownFixture(onTestFinished);
      const backup = await snapshot(f);
      const { job } = await createJob(
        f.engine,
        testJob({ schedule: { runAt: new Date().toISOString() } }),
      );
      await restore(f, backup);
      const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(await f.process(f.workerDeps("w"), delivery)).toBe("ack");
      expect((await f.runs()).filter((r) => r.jobId === job.jobId)).toEqual([]);
      expect(await getJob(f.engine, job.jobId)).toBeNull();
    }, 60_000);
  });

  describe("a restore to before a claim, put back two hours later", () => {
    it("claims the restored entry again from the shard's restored sweepFrom, and the job runs on", async ({
      onTestFinished,
    }) => {
      const { f, at } = await ownFixture(onTestFinished);
      const startAt = new Date(
        Math.ceil((f.engine.clock().getTime() + 10 * 60_000) / 60_000) * 60_000,
      );
      const { job } = await createJob(
        f.engine,
        testJob({ schedule: { every: "PT1M", startAt: startAt.toISOString() } }),
      );
      await tickOnce(f.engine, "before-backup");
      const backup = await snapshot(f);

      // After the backup point the occurrence is claimed and run.
      at.offsetMs = startAt.getTime() - Date.now() + 1000;
      await tickOnce(f.engine, "after-backup");
      const ofJob = async () => (await f.runs()).filter((r) => r.jobId === job.jobId);
      const claimed = (await ofJob()).find((r) => r.scheduledFor === startAt.toISOString());
      if (!claimed) throw new Error("the occurrence was not claimed");
      expect(await f.process(f.workerDeps("w"), await f.nextDeliveryOfRun(claimed))).toBe("ack");

      // The operator puts the tables back as they were at the backup point, two hours on.
      await restore(f, backup);
      expect(await ofJob()).toEqual([]);
      at.offsetMs += 2 * 3_600_000;
      const due = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
      expect(due.map((d) => d.dueAt)).toEqual([startAt.toISOString()]);

      // The restored lease's sweepFrom lies before the entry: the next pass claims it (late, by the
      // job's misfire policy, fire_once: the latest occurrence runs) and files the next one ahead.
      await tickOnce(f.engine, "after-restore");
      const [late] = (await ofJob()).filter((r) => r.status === "QUEUED");
      if (!late) throw new Error("the restored entry was not claimed");
      expect(await f.process(f.workerDeps("w2"), await f.nextDeliveryOfRun(late))).toBe("ack");
      expect((await ofJob()).find((r) => r.runId === late.runId)?.status).toBe("SUCCEEDED");
      const next = (await f.dueEntries()).filter((d) => d.jobId === job.jobId);
      expect(next.every((d) => Date.parse(d.dueAt) > f.engine.clock().getTime())).toBe(true);
      expect(next.length).toBeGreaterThan(0);
    }, 60_000);
  });

  describe("a restore to before a webhook secret's rotation, or its making", () => {
    it("signs with the restored secret alone: the rotated one, and one made since, are gone", async ({
      onTestFinished,
    }) => {
      const { f } = await ownFixture(onTestFinished);
      const before = await tenantWebhookSecrets(f.engine, "tenant-rotated");
      const backup = await snapshot(f);
      const rotated = await rotateWebhookSecret(f.engine, "tenant-rotated");
      expect(signingSecrets(rotated, f.engine.clock())).toEqual([rotated.current, before.current]);
      const madeSince = await tenantWebhookSecrets(f.engine, "tenant-new");

      await restore(f, backup);
      const restored = await tenantWebhookSecrets(f.engine, "tenant-rotated");
      expect(signingSecrets(restored, f.engine.clock())).toEqual([before.current]);
      // A tenant whose first secret was made after the backup point gets a new one at its next use.
      const remade = await tenantWebhookSecrets(f.engine, "tenant-new");
      expect(remade.current).not.toBe(madeSince.current);
    });
  });

  describe("a restore to before a create and a quota override", () => {
    it("counts the tenant's restored jobs, under the restored override", async ({
      onTestFinished,
    }) => {
      const { f } = await ownFixture(onTestFinished);
      const tenantId = "tenant-quota";
      const far = () =>
        testJob({ tenantId, schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() } });
      await writeQuotaOverride(f.engine, tenantId, { activeJobs: 2 }, f.engine.clock());
      await createJob(f.engine, far());
      const backup = await snapshot(f);
      await createJob(f.engine, far());
      await writeQuotaOverride(f.engine, tenantId, { activeJobs: 5 }, f.engine.clock());

      await restore(f, backup);
      expect(await readQuotaOverride(f.engine, tenantId)).toEqual({ activeJobs: 2 });
      expect((await readQuotaUsage(f.engine, tenantId))?.activeJobs).toBe(1);
      // The job made since is gone and counts no more; the raise is gone too.
      expect((await createJob(f.engine, far())).created).toBe(true);
      const refused = await createJob(f.engine, far()).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(QuotaExceededError);
      expect((refused as QuotaExceededError).context.quota).toBe("activeJobs");
    });
  });

  /**
   * The engine's client with `hold` run before the first write that ends a dispatcher pass (the
   * lease's watermark and sweepFrom) is sent: the pass is under way when the restore comes.
   */
  function passEndingAfter(f: EngineFixture, hold: () => Promise<void>) {
    const clients = createTestClients();
    let held = false;
    clients.doc.middlewareStack.add(
      (next) => async (args) => {
        const input = args.input as { UpdateExpression?: unknown };
        if (!held && String(input.UpdateExpression ?? "").includes("watermark = :minute")) {
          held = true;
          await hold();
        }
        return next(args);
      },
      { step: "initialize", name: "holdPassEnd" },
    );
    return { engine: { ...f.engine, doc: clients.doc }, destroy: () => clients.destroy() };
  }

  describe("a restore while a dispatcher pass is under way", () => {
    it("refuses that pass's end write once another pass took the restored lease to its fence", async ({
      onTestFinished,
    }) => {
      const { f } = await ownFixture(onTestFinished);
      await dispatchShard(f.engine, 0, "pass-before-backup");
      const backup = await snapshot(f);
      let secondPass: PassResult | undefined;
      const holding = passEndingAfter(f, async () => {
        // The lease goes back below this pass's fence; the next pass takes it up to that fence.
        await restore(f, backup);
        secondPass = await dispatchShard(f.engine, 0, "pass-after-restore");
      });
      try {
        const first = await dispatchShard(holding.engine, 0, "pass-across-restore");
        const fenceOf = (pass: PassResult | undefined) =>
          pass !== undefined && "fence" in pass ? pass.fence : undefined;
        expect(secondPass?.outcome).toBe("swept");
        expect(fenceOf(secondPass)).toBe(fenceOf(first));
        expect(first.outcome).toBe("fence-lost");
      } finally {
        holding.destroy();
      }
    });
  });
});
