import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { cancelJob, createJob, pauseJob } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { RUNS_INFLIGHT_INDEX } from "../../shared/storage/tables.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients, type TestClients } from "../support/namespace.js";

const TENANT = "tenant-a";

/** Issue 13 item 11: the worker decides on the job as it is once it has taken the run. */
describe("a worker decides after it starts the run", () => {
  let f: EngineFixture;
  const clients: TestClients[] = [];
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(async () => {
    for (const c of clients) c.destroy();
    await f.destroy();
  });

  /**
   * A client that commits `between` (through the fixture's own client) just before the first
   * request `at` matches: a lifecycle request landing at that point of a worker's delivery.
   */
  function clientCommittingBefore(
    at: (command: string, input: Record<string, unknown>) => boolean,
    between: () => Promise<unknown>,
  ): Engine {
    const c = createTestClients();
    clients.push(c);
    let done = false;
    c.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (!done && at(String(context.commandName), args.input as Record<string, unknown>)) {
          done = true;
          await between();
        }
        return next(args);
      },
      { step: "initialize", name: "lifecycleRequestBefore" },
    );
    return { ...f.engine, doc: c.doc };
  }

  /** The worker's consistent read of the run and its job, which a first start decides on. */
  const jobRead = (command: string) => command === "BatchGetItemCommand";
  /** The run's first write: the ending of a run that ends quickly, which writes its start too. */
  const firstRunWrite = (command: string, input: Record<string, unknown>) =>
    command === "UpdateItemCommand" && input.TableName === f.engine.tables.runs;

  it("a cancel or pause committed just before the worker reads the run and its job is obeyed: the handler never runs", async () => {
    let calls = 0;
    const handlers = { counted: async (_ctx: JobContext) => void calls++ };
    const outcomes: [string, string | undefined, string | null | undefined][] = [];
    for (const action of [cancelJob, pauseJob]) {
      const { job } = await createJob(
        f.engine,
        testJob({ type: "counted", schedule: { runAt: new Date().toISOString() } }),
      );
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      const engine = clientCommittingBefore(jobRead, () => action(f.engine, TENANT, job.jobId));
      expect(await processRun({ ...f.workerDeps("w", handlers), engine }, received)).toBe("ack");
      const run = (await f.runs()).find((r) => r.jobId === job.jobId);
      outcomes.push([(await getJob(f.engine, job.jobId))?.status ?? "", run?.status, run?.reason]);
    }
    expect(calls).toBe(0);
    expect(outcomes).toEqual([
      ["CANCELLED", "CANCELLED", "job cancelled"],
      ["PAUSED", "QUEUED", "waiting: job paused"],
    ]);
  });

  it("a pause committed after the worker read the job finds the run under way and lets it finish", async () => {
    let calls = 0;
    const handlers = { counted: async (_ctx: JobContext) => void calls++ };
    const { job } = await createJob(
      f.engine,
      testJob({ type: "counted", schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const engine = clientCommittingBefore(firstRunWrite, () =>
      pauseJob(f.engine, TENANT, job.jobId),
    );
    expect(await processRun({ ...f.workerDeps("w", handlers), engine }, received)).toBe("ack");
    expect(calls).toBe(1);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("PAUSED");
    expect((await f.runs()).find((r) => r.jobId === job.jobId)).toMatchObject({
      status: "SUCCEEDED",
      fence: 1,
    });
  });
});

describe("a delivery that fails early", () => {
  let f: EngineFixture;
  let failing: TestClients;
  beforeAll(async () => {
    // The queue's default visibility stands in for the worker function's timeout (15 min on AWS).
    f = await createEngineFixture({ settings: { leaseMs: 3000 }, queueVisibilitySeconds: 60 });
    failing = createTestClients();
    failing.doc.middlewareStack.add(
      () => async () => {
        throw Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
          name: "ThrottlingException",
        });
      },
      { step: "initialize", name: "throttledEverything" },
    );
  });
  afterAll(async () => {
    failing.destroy();
    await f.destroy();
  });

  it("comes back a lease later, not after the queue's default visibility", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(received.visibilitySeconds).toBeUndefined();
    const engine = { ...f.engine, doc: failing.doc };
    await expect(processRun({ ...f.workerDeps("w"), engine }, received)).rejects.toThrow(
      /allowed throughput/,
    );
    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId, 15_000);
    expect(again.receiveCount).toBe(2);
    expect(await f.process(f.workerDeps("w"), again)).toBe("ack");
    expect((await f.runs()).find((r) => r.jobId === job.jobId)?.status).toBe("SUCCEEDED");
  }, 30_000);
});

/** Issue 13 item 13: cancel reads the job's own runs, not its shard's in-flight index. */
describe("cancel cost", () => {
  let f: EngineFixture;
  let counting: TestClients;
  let requests: { command: string; index?: string; scanned?: number; quota?: boolean }[] = [];
  beforeAll(async () => {
    f = await createEngineFixture();
    counting = createTestClients();
    counting.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input: object = args.input;
        const result = await next(args);
        const output: object = result.output as object;
        requests.push({
          command: String(context.commandName),
          ...("IndexName" in input ? { index: String(input.IndexName) } : {}),
          ...("ScannedCount" in output ? { scanned: Number(output.ScannedCount) } : {}),
          ...(quotaKeyOf(input) ? { quota: true } : {}),
        });
        return result;
      },
      { step: "initialize", name: "countRequests" },
    );
  });
  afterAll(async () => {
    counting.destroy();
    await f.destroy();
  });

  // The tenant's quota items a cancel reads to give its share back (its override, cached for 10 s
  // per process) are not its runs: they are counted apart.
  const reads = () =>
    requests.filter((r) => /^(Query|Get|BatchGet|Scan)/.test(r.command) && !r.quota);
  const quotaReads = () => requests.filter((r) => r.quota && /^Get/.test(r.command));

  it("reads only the job's runs, whatever else its shard holds, and one page for a per-second job", async () => {
    const startAt = new Date(Date.now() + 60_000).toISOString();
    const { job: busy } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1S", startAt } }),
    );
    const shards = f.engine.settings.shardCount;
    let small = (await createJob(f.engine, testJob({ schedule: { every: "PT30S", startAt } }))).job;
    while (shardOf(small.jobId, shards) !== shardOf(busy.jobId, shards)) {
      await cancelJob(f.engine, TENANT, small.jobId);
      small = (await createJob(f.engine, testJob({ schedule: { every: "PT30S", startAt } }))).job;
    }
    const queuedOf = async (jobId: string) =>
      (await f.runs()).filter((r) => r.jobId === jobId && r.status === "QUEUED").length;
    const busyQueued = await queuedOf(busy.jobId);
    const smallQueued = await queuedOf(small.jobId);
    expect(busyQueued).toBeGreaterThan(300);
    expect(smallQueued).toBeGreaterThan(5);

    const engine = { ...f.engine, doc: counting.doc };
    requests = [];
    await cancelJob(engine, TENANT, small.jobId);
    expect(await queuedOf(small.jobId)).toBe(0);
    expect(reads().filter((r) => r.index === RUNS_INFLIGHT_INDEX)).toEqual([]);
    // The job read, then one query that scans only the small job's runs in the window.
    expect(reads().map((r) => r.command)).toEqual(["GetItemCommand", "QueryCommand"]);
    expect(reads()[1]?.scanned).toBe(smallQueued);
    expect(quotaReads().length).toBeLessThanOrEqual(1);

    requests = [];
    await cancelJob(engine, TENANT, busy.jobId);
    expect(await queuedOf(busy.jobId)).toBe(0);
    // Reads: the job and one query page (was: the shard's index, then one GetItem per run).
    expect(reads().map((r) => r.command)).toEqual(["GetItemCommand", "QueryCommand"]);
    expect(requests.filter((r) => r.command === "UpdateItemCommand")).toHaveLength(busyQueued);
    const scanned = reads()[1]?.scanned;

    // Its repeat keeps the CANCELLED runs in that query (to repair a lost job write): the same
    // page and items read, and, none of them having run, nothing written.
    requests = [];
    await cancelJob(engine, TENANT, busy.jobId);
    expect(reads().map((r) => r.command)).toEqual(["GetItemCommand", "QueryCommand"]);
    expect(reads()[1]?.scanned).toBe(scanned);
    expect(requests.filter((r) => !/^(Query|Get|BatchGet|Scan)/.test(r.command))).toEqual([]);
  }, 60_000);
});

/** Whether a request names a tenant's quota item (`QUOTA#<tenantId>`) by its key. */
function quotaKeyOf(input: object): boolean {
  if (!("Key" in input) || typeof input.Key !== "object" || input.Key === null) return false;
  const pk: unknown = "pk" in input.Key ? input.Key.pk : undefined;
  return typeof pk === "string" && pk.startsWith("QUOTA#");
}
