import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { FenceLostError } from "../../shared/errors.js";
import { handleCrashedRun } from "../../shared/execution/dead-letter-queue.js";
import { type JobContext, RunHandedOver } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import {
  cancelRun,
  createJob,
  type NewJob,
  pauseJob,
  triggerJob,
} from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { getJob, runKeyOf } from "../../shared/storage/run-reads.js";
import { readQuotaPartition, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { clientsDyingAfterAdmission } from "../support/faults.js";
import { heldHandler } from "../support/held-runs.js";
import { createTestClients, type TestClients } from "../support/namespace.js";
import { waitFor } from "../support/wait.js";

const LEASE_MS = 3000;
const WRITES = new Set(["UpdateItemCommand", "PutItemCommand", "DeleteItemCommand"]);

/**
 * A first delivery holds its run's start unwritten (`takeRun`): the run's first write (its
 * ending, or else its first heartbeat, a wait or a park) writes the start with it, so a run that
 * ends quickly is written once.
 */
describe("a start held unwritten until the run's first write", () => {
  let f: EngineFixture;
  const clients: TestClients[] = [];
  beforeAll(async () => {
    f = await createEngineFixture({
      // Quota overrides written here apply at the next start: no cached override.
      settings: { leaseMs: LEASE_MS, quotaCacheMs: 0 },
      maxReceiveCount: 3,
    });
  });
  /**
   * The held handlers and the deliveries a case started: a case that fails before releasing its
   * handler would leave the run heartbeating past afterAll's destroy (writes to deleted tables), and
   * its ending, awaited by nobody, rejects unhandled in whichever file the process runs then.
   */
  const holds: { release(): void }[] = [];
  const unfinished: Promise<unknown>[] = [];
  afterEach(async () => {
    for (const held of holds.splice(0)) held.release();
    await Promise.allSettled(unfinished.splice(0));
    for (const c of clients.splice(0)) c.destroy();
  });
  afterAll(() => f.destroy());

  /** A held handler (heldHandler) that the case's end releases if the case did not. */
  function holding() {
    const held = heldHandler();
    holds.push(held);
    return held;
  }

  /** A delivery the case's end awaits (after releasing its holds) if the case did not. */
  function underWay<T>(delivery: Promise<T>): Promise<T> {
    unfinished.push(delivery);
    return delivery;
  }

  /** A one-off job of `type` due now, and the first delivery of its message. */
  async function dueNow(type: string) {
    const { job } = await createJob(
      f.engine,
      testJob({ type, schedule: { runAt: new Date().toISOString() }, timeoutSeconds: 30 }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    return { job, received };
  }

  async function runOf(jobId: string): Promise<Run> {
    const runs = (await f.runs()).filter((r) => r.jobId === jobId);
    expect(runs).toHaveLength(1);
    const [run] = runs;
    if (!run) throw new Error("no run");
    return run;
  }

  /**
   * The engine with its writes to the runs table counted, by update expression, and every
   * DynamoDB request it makes for the run and its job named in `requests`.
   */
  function countingRunWrites(): { engine: Engine; writes: string[]; requests: string[] } {
    const c = createTestClients();
    clients.push(c);
    const writes: string[] = [];
    const requests: string[] = [];
    c.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input: object = args.input;
        const table = "TableName" in input ? String(input.TableName) : "";
        // The tenant's quota override, read once per process (cached), is not the run's.
        const key = "Key" in input ? JSON.stringify(input.Key) : "";
        if (!key.includes('"QUOTA#')) requests.push(String(context.commandName));
        if (table === f.engine.tables.runs && WRITES.has(String(context.commandName)))
          writes.push(
            `${context.commandName}: ${"UpdateExpression" in input ? String(input.UpdateExpression) : ""}`,
          );
        return next(args);
      },
      { step: "initialize", name: "countRunWrites" },
    );
    return { engine: { ...f.engine, doc: c.doc }, writes, requests };
  }

  /**
   * An hourly job (of `tenantId`) whose first run worker-a is running with its start unwritten:
   * its handler has been entered and holds until `held.release()`.
   */
  async function recurringRunHeld(tenantId?: string) {
    const held = holding();
    const { job } = await createJob(
      f.engine,
      testJob({
        ...(tenantId === undefined ? {} : { tenantId }),
        type: "held",
        schedule: { every: "PT1H", startAt: new Date(Date.now() + 200).toISOString() },
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const delivery = underWay(
      f.process(f.workerDeps("worker-a", { held: held.handler }), received),
    );
    await waitFor("the handler's start", () => held.contexts.length === 1);
    return { held, job, received, delivery };
  }

  /** Stores the run RUNNING under `fence` with its lease lapsed: its last start's worker crashed. */
  async function storeCrashed(run: Run, fence: number): Promise<void> {
    // Stored as the scheduler stores a run no cancel was asked for: without the attributes (a
    // null one reads as a cancel request to the fenced writes and the DLQ's DEAD write).
    const { cancelRequestedAt: _asked, cancelledBy: _by, ...uncancelled } = run;
    await f.engine.doc.send(
      new PutCommand({
        TableName: f.engine.tables.runs,
        Item: {
          ...runKeyOf(run),
          ...uncancelled,
          status: "RUNNING",
          fence,
          leaseUntil: new Date(Date.now() - 1000).toISOString(),
        },
      }),
    );
  }

  it("a run that ends before its first heartbeat is written once, its history whole", async () => {
    const { engine, writes, requests } = countingRunWrites();
    const { job, received } = await dueNow("noop");
    const deps = { ...f.workerDeps("worker-a"), engine };
    expect(await f.process(deps, received)).toBe("ack");

    // The run and its job read in one request; the run's ending; the one-off's completion.
    expect(requests).toEqual(["BatchGetItemCommand", "UpdateItemCommand", "UpdateItemCommand"]);
    expect(writes).toHaveLength(1);
    expect(writes[0]).toContain("fence = :fence");
    const run = await runOf(job.jobId);
    expect(run).toMatchObject({ status: "SUCCEEDED", fence: 1, workerId: "worker-a" });
    expect(Date.parse(run.finishedAt ?? "")).toBeGreaterThanOrEqual(
      Date.parse(run.startedAt ?? ""),
    );
    expect(run.durationMs).toBeGreaterThanOrEqual(0);
  });

  it("a first delivery that finds its run ended makes the job's missing write from the job read with the run", async () => {
    const c = createTestClients();
    clients.push(c);
    let ended = false;
    c.doc.middlewareStack.add(
      (next, context) => async (args) => {
        // The worker dies between the run's ending and the job's write after it.
        if (ended) return new Promise<never>(() => undefined);
        const input: object = args.input;
        const result = await next(args);
        if ("TableName" in input && input.TableName === f.engine.tables.runs)
          ended = context.commandName === "UpdateItemCommand";
        return result;
      },
      { step: "initialize", name: "dieBeforeTheJobWrite" },
    );
    const { job, received } = await dueNow("noop");
    void f.process({ ...f.workerDeps("worker-a"), engine: { ...f.engine, doc: c.doc } }, received);
    await waitFor("the run's ending", async () => (await runOf(job.jobId)).status === "SUCCEEDED");

    // A duplicate of the first delivery (receive count 1) finds the run ended.
    const { engine, requests } = countingRunWrites();
    expect(await f.process({ ...f.workerDeps("worker-b"), engine }, received)).toBe("ack");
    expect(requests).toEqual(["BatchGetItemCommand", "UpdateItemCommand"]);
    expect((await f.jobs()).find((j) => j.jobId === job.jobId)).toMatchObject({
      status: "COMPLETED",
      lastRun: { status: "SUCCEEDED" },
    });
  });

  it("a run that outlives its first heartbeat is RUNNING from that beat, under the fence its handler got", async () => {
    const held = holding();
    const { job, received } = await dueNow("held");
    const delivery = underWay(
      f.process(f.workerDeps("worker-a", { held: held.handler }), received),
    );
    await waitFor("the handler's start", () => held.contexts.length === 1);
    expect((await runOf(job.jobId)).status).toBe("QUEUED");
    const running = await waitFor("the first heartbeat", async () => {
      const run = await runOf(job.jobId);
      return run.status === "RUNNING" ? run : undefined;
    });
    expect(running).toMatchObject({ fence: 1, workerId: "worker-a" });
    expect(held.contexts[0]?.fence).toBe(1);
    held.release();
    expect(await delivery).toBe("ack");
    expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
  });

  it("a cancel that finds the run QUEUED ends it; the handler is aborted at its first heartbeat and nothing more is written", async () => {
    const held = holding();
    const { job, received } = await dueNow("held");
    const delivery = underWay(
      f.process(f.workerDeps("worker-a", { held: held.handler }), received),
    );
    await waitFor("the handler's start", () => held.contexts.length === 1);
    const run = await runOf(job.jobId);
    const cancelled = await cancelRun(f.engine, job.tenantId, job.jobId, run.runId);
    expect(cancelled.status).toBe("CANCELLED");

    expect(await delivery).toBe("ack");
    expect(held.contexts[0]?.signal.reason).toBeInstanceOf(FenceLostError);
    expect(await runOf(job.jobId)).toMatchObject({ status: "CANCELLED", fence: 0 });
  });

  it("two deliveries at once both run the handler under the same fence; one ending is recorded", async () => {
    let calls = 0;
    const slow = async () => {
      calls++;
      await sleep(300);
    };
    const { job, received } = await dueNow("slow");
    const [a, b] = await Promise.all([
      processRun(f.workerDeps("worker-a", { slow }), received),
      processRun(f.workerDeps("worker-b", { slow }), received),
    ]);
    expect([a, b]).toEqual(["ack", "ack"]);
    expect(calls).toBe(2);
    const run = await runOf(job.jobId);
    expect(run).toMatchObject({ status: "SUCCEEDED", fence: 1 });
    expect(["worker-a", "worker-b"]).toContain(run.workerId);
  });

  it("two deliveries of a recurring run at once: the job's admission lets one run it", async () => {
    let calls = 0;
    const slow = async () => {
      calls++;
      await sleep(300);
    };
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "slow",
        schedule: { every: "PT1H", startAt: new Date(Date.now() + 200).toISOString() },
        policies: { ...testJob().policies, overlap: "allow", maxConcurrent: 5 },
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const dispositions = await Promise.all([
      processRun(f.workerDeps("worker-a", { slow }), received),
      processRun(f.workerDeps("worker-b", { slow }), received),
    ]);
    expect(dispositions).toEqual(["ack", "ack"]);
    expect(calls).toBe(1);
    expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
  });

  it("a message that came back writes its run's start at once", async () => {
    const held = holding();
    const { job, received } = await dueNow("held");
    const delivery = underWay(
      f.process(f.workerDeps("worker-a", { held: held.handler }), {
        ...received,
        receiveCount: 2,
      }),
    );
    await waitFor("the handler's start", () => held.contexts.length === 1);
    expect(await runOf(job.jobId)).toMatchObject({ status: "RUNNING", fence: 1 });
    held.release();
    expect(await delivery).toBe("ack");
  });

  it("a run taken too near the reaper's deadline for it writes its start at once", async () => {
    const held = holding();
    const { job, received } = await dueNow("held");
    const queued = await runOf(job.jobId);
    // The deadline is a lease after the run was due; its first heartbeat would come after it.
    await sleep(Math.max(0, Date.parse(queued.dueAt) + LEASE_MS - 1500 - Date.now()));
    const delivery = underWay(
      f.process(f.workerDeps("worker-a", { held: held.handler }), received),
    );
    await waitFor("the handler's start", () => held.contexts.length === 1);
    expect(await runOf(job.jobId)).toMatchObject({ status: "RUNNING", fence: 1 });
    held.release();
    expect(await delivery).toBe("ack");
  });

  it("a run queued again by a claim after an edit is another run: the held start's ending fails", async () => {
    const held = holding();
    const { job, received } = await dueNow("held");
    const delivery = underWay(
      f.process(f.workerDeps("worker-a", { held: held.handler }), received),
    );
    await waitFor("the handler's start", () => held.contexts.length === 1);
    const run = await runOf(job.jobId);
    // What a claim of the edited job puts over a QUEUED run of an older version. A claim's item has
    // no cancelRequestedAt (the read gives it as null): an item carrying one, even null, would fail
    // the held start's condition on that attribute, whatever the version.
    const { cancelRequestedAt: _unasked, ...asRead } = run;
    const requeued = { ...asRead, jobVersion: run.jobVersion + 1, reason: null };
    await f.engine.doc.send(
      new PutCommand({
        TableName: f.engine.tables.runs,
        Item: { ...runKeyOf(run), ...requeued },
      }),
    );
    held.release();
    expect(await delivery).toBe("ack");
    expect(await runOf(job.jobId)).toMatchObject({
      status: "QUEUED",
      fence: 0,
      jobVersion: run.jobVersion + 1,
    });
  });

  it("the redrive DLQ dead-letters a run started by every delivery after the first", async () => {
    const { job, received } = await dueNow("noop");
    const run = await runOf(job.jobId);
    // The first delivery died holding an unwritten start; the next two (maxReceiveCount 3) started it.
    await storeCrashed(run, 2);
    await handleCrashedRun(f.engine, received.message, 3);
    expect((await runOf(job.jobId)).status).toBe("DEAD");
    // The one-off's own occurrence ended for good: nothing is left for the job to run.
    expect(await getJob(f.engine, job.jobId)).toMatchObject({
      status: "COMPLETED",
      nextRunAt: null,
    });
  });
  it("a pause with running: cancel cancels a recurring run admitted with its start unwritten", async () => {
    const { held, job, delivery } = await recurringRunHeld();
    // Admitted (listed in activeRuns) and running, its start still unwritten: the run reads QUEUED.
    expect(await runOf(job.jobId)).toMatchObject({ status: "QUEUED", fence: 0 });
    await pauseJob(f.engine, job.tenantId, job.jobId, { running: "cancel" });

    expect(await runOf(job.jobId)).toMatchObject({ status: "CANCELLED", cancelledBy: "pause" });
    expect(await delivery).toBe("ack");
    expect(held.contexts[0]?.signal.aborted).toBe(true);
    expect(await runOf(job.jobId)).toMatchObject({ status: "CANCELLED", cancelledBy: "pause" });
  });

  it("a start whose write applied but answered an error is the worker's own: the run still ends once", async () => {
    const c = createTestClients();
    clients.push(c);
    let failed = 0;
    c.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input: object = args.input;
        const table = "TableName" in input ? String(input.TableName) : "";
        const result = await next(args);
        // The first write of the run (its first heartbeat, carrying the start) applies, and the
        // answer is lost on the way back: a timeout or a dropped connection.
        if (
          failed === 0 &&
          table === f.engine.tables.runs &&
          context.commandName === "UpdateItemCommand"
        ) {
          failed++;
          throw Object.assign(new Error("socket hang up"), { name: "TimeoutError" });
        }
        return result;
      },
      { step: "initialize", name: "loseTheFirstRunWriteAnswer" },
    );
    let calls = 0;
    const handler = async (ctx: JobContext) => {
      calls++;
      // Outlives two heartbeats: the first (its answer lost) and the next, under the written start.
      await sleep(700);
      if (ctx.signal.aborted) throw ctx.signal.reason;
    };
    const { job, received } = await dueNow("lost-answer");
    const deps = {
      ...f.workerDeps("worker-a", { "lost-answer": handler }, 200),
      engine: { ...f.engine, doc: c.doc },
    };
    expect(await f.process(deps, received)).toBe("ack");
    expect(failed).toBe(1);
    expect(calls).toBe(1);
    expect(await runOf(job.jobId)).toMatchObject({
      status: "SUCCEEDED",
      fence: 1,
      workerId: "worker-a",
    });
  });

  it("the redrive DLQ leaves alone a run one of whose started message's deliveries never started it", async () => {
    const { job, received } = await dueNow("noop");
    const run = await runOf(job.jobId);
    // A message sent with the run under fence 1 (a wait's recheck): its every delivery writes its
    // start, so three deliveries (maxReceiveCount 3) of which one never reached the run (its worker
    // died holding a batch) started it twice.
    await storeCrashed(run, 3);
    await handleCrashedRun(f.engine, { ...received.message, fence: 1 }, 3);
    expect((await runOf(job.jobId)).status).toBe("RUNNING");
  });
  it("a duplicate delivery let off by the admission leaves the tenant's concurrent-runs slot to the delivery that runs", async () => {
    const tenantId = "one-slot";
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 1 }, new Date());
    const { held, job, received, delivery: running } = await recurringRunHeld(tenantId);
    // The same message again (SQS's at-least-once): the job lists the run, so it is let off.
    expect(await processRun(f.workerDeps("worker-b", { held: held.handler }), received)).toBe(
      "ack",
    );
    expect(held.contexts).toHaveLength(1);

    // Another run of the tenant finds its one slot taken: it waits.
    let otherCalls = 0;
    const other = await createJob(
      f.engine,
      testJob({ tenantId, type: "other", schedule: { runAt: new Date().toISOString() } }),
    );
    const otherDelivery = await f.nextDelivery(f.engine.queues.normal, other.job.jobId);
    const otherDeps = f.workerDeps("worker-c", { other: async () => void otherCalls++ });
    expect(await f.process(otherDeps, otherDelivery)).toBe("ack");
    expect(otherCalls).toBe(0);
    expect((await runOf(other.job.jobId)).reason).toMatch(/concurrentRuns quota \(1\)/);

    held.release();
    expect(await running).toBe("ack");
    expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", fence: 1 });
  });
  it("a duplicate delivery that joined the running delivery's slot and then failed leaves that slot held", async () => {
    const tenantId = "joined-then-failed";
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns: 1 }, new Date());
    const { job } = await createJob(
      f.engine,
      testJob({
        tenantId,
        type: "held",
        schedule: { runAt: new Date().toISOString() },
        timeoutSeconds: 30,
      }),
    );
    const { received, clock } = await deliveredOnTime(job.jobId);
    const held = holding();
    const running = underWay(
      processRun(
        { ...f.workerDeps("worker-a", { held: held.handler }), engine: { ...f.engine, clock } },
        received,
      ),
    );
    await waitFor("worker-a's handler", () => held.contexts.length === 1);
    // worker-b, the same message again, joins worker-a's slot (the same start) and runs its
    // handler, and its ending (the run's first write) fails as a timed-out request would.
    const c = createTestClients();
    clients.push(c);
    let joined = false;
    c.doc.middlewareStack.add(
      (next) => async (args) => {
        const input: object = args.input;
        const key = "Key" in input ? JSON.stringify(input.Key) : "";
        if (joined && !key.includes('"QUOTA#')) throw new Error("injected: request timed out");
        const result = await next(args);
        const update = "UpdateExpression" in input ? String(input.UpdateExpression) : "";
        if (update.includes("ADD takers")) joined = true;
        return result;
      },
      { step: "initialize", name: "failsAfterJoin" },
    );
    const deps = {
      ...f.workerDeps("worker-b", { held: async () => undefined }),
      engine: { ...f.engine, doc: c.doc, clock },
    };
    await expect(processRun(deps, received)).rejects.toThrow(/injected/);
    expect(joined).toBe(true);
    const { runId } = await runOf(job.jobId);
    // worker-a runs on: its slot, which worker-b joined, is still held for it.
    expect(
      (await readQuotaPartition(f.engine, tenantId)).slots.map((s) => [s.index, s.runId, s.fence]),
    ).toEqual([[0, runId, 1]]);

    held.release();
    expect(await running).toBe("ack");
    expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", workerId: "worker-a" });
    expect((await readQuotaPartition(f.engine, tenantId)).slots).toEqual([]);
  });
  /**
   * The run held unwritten by worker-a (this fixture's lease) is delivered again to worker-b, of a
   * deploy with the lease raised tenfold (its heartbeat `heartbeatMs`, or its lease's): worker-b
   * must leave the run to worker-a, which runs it once.
   */
  async function duplicateToRaisedLease(heartbeatMs?: number) {
    const { held, job, received, delivery: running } = await recurringRunHeld();
    const raised = { ...f.engine, settings: { ...f.engine.settings, leaseMs: 10 * LEASE_MS } };
    let secondCalls = 0;
    const deps = {
      ...f.workerDeps("worker-b", { held: async () => void secondCalls++ }, heartbeatMs),
      engine: raised,
    };
    const second = await processRun(deps, received);
    held.release();
    expect({ second, secondCalls }).toEqual({ second: "ack", secondCalls: 0 });
    expect(await running).toBe("ack");
    expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", workerId: "worker-a" });
  }

  it("a duplicate delivery to a worker deployed with a longer lease, taken too near the run's deadline to hold its start, leaves the run to the first", async () => {
    // The first delivery runs on a worker of the earlier deploy (this fixture's lease, 3 s: a
    // heartbeat a second); the same message again reaches a worker deployed with leaseSeconds
    // raised (30 s: a heartbeat every 10 s), too near the run's deadline to hold its own start
    // unwritten, while the first still has its time for the start's first write.
    await duplicateToRaisedLease();
  });
  it("a duplicate delivery to a worker deployed with a longer lease is let off by the admission while the first runs the run", async () => {
    // Both heartbeat every second (as every lease of 30 s or more beats every 10 s), so the second
    // holds its start unwritten too; its lease (30 s) is not the one the first listed (3 s).
    await duplicateToRaisedLease(LEASE_MS / 3);
  });
  it("a run cancelled while its handler runs with the start unwritten still counts against its job's overlap until its lease lapses", async () => {
    const { held, job, delivery: first } = await recurringRunHeld();
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    if (!run) throw new Error("no run");
    // Found QUEUED, the run ends at once; its handler runs on until its first heartbeat.
    expect((await cancelRun(f.engine, job.tenantId, job.jobId, run.runId)).status).toBe(
      "CANCELLED",
    );

    // A second run of the job (overlap skip) meanwhile must not run beside it.
    const triggered = await triggerJob(f.engine, job.tenantId, job.jobId);
    const second = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(second.message.scheduledFor).toBe(triggered.scheduledFor);
    let secondCalls = 0;
    const deps = f.workerDeps("worker-b", {
      held: async () => {
        // Counted only while the first handler still runs: that is the overlap.
        if (held.contexts[0]?.signal.aborted === false) secondCalls++;
      },
    });
    expect(await f.process(deps, second)).toBe("ack");
    expect(secondCalls).toBe(0);
    expect(await first).toBe("ack");
  });

  /**
   * The engine for each of two deliveries of one run, over one client whose slot puts wait until
   * both have come (so both read the tenant's slots free before either takes one), each starting
   * from the free slot its `random` picks.
   */
  function slotTakesAtOnce(
    randoms: readonly [number, number],
    clock: () => Date,
  ): [Engine, Engine] {
    const c = createTestClients();
    clients.push(c);
    let puts = 0;
    let bothCame: () => void = () => undefined;
    const together = new Promise<void>((resolve) => {
      bothCame = resolve;
    });
    c.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input: object = args.input;
        const item = "Item" in input ? (input.Item as Record<string, unknown>) : {};
        // The document client's commands reach its stack under the low-level client's names.
        if (context.commandName === "PutItemCommand" && String(item.sk).startsWith("SLOT#")) {
          if (++puts === 2) bothCame();
          // Long enough for a loaded machine: a put let on alone lands before the other's read,
          // which then finds the run's slot and joins it, and the case is one slot, not two.
          await Promise.race([together, sleep(10_000)]);
        }
        return next(args);
      },
      { step: "initialize", name: "slotTakesAtOnce" },
    );
    return [
      { ...f.engine, doc: c.doc, clock, random: () => randoms[0] },
      { ...f.engine, doc: c.doc, clock, random: () => randoms[1] },
    ];
  }

  /** The engine over a client whose reads of a tenant's slots wait until `ready` says so. */
  function readsSlotsOnce(ready: () => Promise<boolean> | boolean, clock: () => Date): Engine {
    const c = createTestClients();
    clients.push(c);
    c.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input: object = args.input;
        const values = "ExpressionAttributeValues" in input ? input.ExpressionAttributeValues : {};
        if (context.commandName === "QueryCommand" && JSON.stringify(values).includes("QUOTA#"))
          await waitFor("the slots' read let on", ready, 10_000, 20);
        return next(args);
      },
      { step: "initialize", name: "readsSlotsOnce" },
    );
    return { ...f.engine, doc: c.doc, clock };
  }

  /**
   * The job's next delivery, and a clock on which it came when due: a receive slowed by other
   * cases' messages would bring it near the reaper's deadline for its run, where a first delivery
   * writes its start at once, and the deliveries a case races would not hold theirs unwritten.
   */
  async function deliveredOnTime(jobId: string) {
    const received = await f.nextDelivery(f.engine.queues.normal, jobId);
    const lateMs = Math.max(0, Date.now() - Date.parse(received.message.dueAt));
    return { received, clock: () => new Date(Date.now() - lateMs) };
  }

  /**
   * A job of `tenantId`, whose concurrentRuns quota is set to `concurrentRuns` first (a one-off
   * `held` job due now unless `definition` says otherwise), its delivery on time (deliveredOnTime),
   * and a read of the tenant's slots as [index, runId, fence].
   */
  async function deliveredUnderSlotQuota(
    tenantId: string,
    concurrentRuns: number,
    definition: Partial<NewJob> = {
      type: "held",
      schedule: { runAt: new Date().toISOString() },
      timeoutSeconds: 30,
    },
  ) {
    await writeQuotaOverride(f.engine, tenantId, { concurrentRuns }, new Date());
    const { job } = await createJob(f.engine, testJob({ tenantId, ...definition }));
    const { received, clock } = await deliveredOnTime(job.jobId);
    const slotsHeld = async () =>
      (await readQuotaPartition(f.engine, tenantId)).slots.map((s) => [s.index, s.runId, s.fence]);
    return { job, received, clock, slotsHeld };
  }

  it("two deliveries at once that took two of the tenant's slots: the one refused by the other's start frees its own", async () => {
    const { job, received, clock, slotsHeld } = await deliveredUnderSlotQuota("two-slots", 2);
    // Slots 0 and 1 free: worker-a starts from slot 0, worker-b from slot 1.
    const [engineA, engineB] = slotTakesAtOnce([0, 0.99], clock);
    const held = holding();
    const runningA = underWay(
      processRun(
        { ...f.workerDeps("worker-a", { held: held.handler }, 200), engine: engineA },
        received,
      ),
    );
    // worker-b's handler returns once worker-a's first heartbeat wrote the start: its ending is
    // refused by that start, under the fence both took.
    const refusedB = underWay(
      processRun(
        {
          ...f.workerDeps("worker-b", {
            held: async () => {
              await waitFor("worker-a's start written", async () => {
                const run = await runOf(job.jobId);
                return run.status === "RUNNING" && run.workerId === "worker-a";
              });
            },
          }),
          engine: engineB,
        },
        received,
      ),
    );
    expect(await refusedB).toBe("ack");
    const { runId } = await runOf(job.jobId);
    // worker-a runs on in slot 0; slot 1, worker-b's alone, is free for another run of the tenant.
    expect(await slotsHeld()).toEqual([[0, runId, 1]]);

    held.release();
    expect(await runningA).toBe("ack");
    expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", workerId: "worker-a" });
    expect(await slotsHeld()).toEqual([]);
  });

  it("two deliveries of a recurring run at once that took two of the tenant's slots: the one the admission lets off frees its own", async () => {
    const held = holding();
    const delivered = await deliveredUnderSlotQuota("two-slots-recurring", 2, {
      type: "held",
      schedule: { every: "PT1H", startAt: new Date(Date.now() + 200).toISOString() },
    });
    const { job, received, clock } = delivered;
    // Which delivery's slot stays (0 or 1) is whichever admission came first: read without it.
    const slotsHeld = async () =>
      (await delivered.slotsHeld()).map(([, runId, fence]) => [runId, fence]);
    const [engineA, engineB] = slotTakesAtOnce([0, 0.99], clock);
    const deliveries = [
      underWay(
        processRun(
          { ...f.workerDeps("worker-a", { held: held.handler }), engine: engineA },
          received,
        ),
      ),
      underWay(
        processRun(
          { ...f.workerDeps("worker-b", { held: held.handler }), engine: engineB },
          received,
        ),
      ),
    ];
    // The first to return is the one let off: the other's admission listed the run.
    expect(await Promise.race(deliveries)).toBe("ack");
    expect(held.contexts).toHaveLength(1);
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(await slotsHeld()).toEqual([[run?.runId, 1]]);

    held.release();
    expect(await Promise.all(deliveries)).toEqual(["ack", "ack"]);
    expect(await slotsHeld()).toEqual([]);
  });

  it("three deliveries at once, two in the slot of the one that runs: the refused ones leave that slot held and free the other", async () => {
    const { job, received, clock, slotsHeld } = await deliveredUnderSlotQuota(
      "three-deliveries",
      2,
    );
    // worker-a and worker-b take slots 0 and 1 at once; worker-c, which read the run QUEUED with
    // them, reads the tenant's slots once both are taken, and takes the run's first, worker-a's.
    const [engineA, engineB] = slotTakesAtOnce([0, 0.99], clock);
    const engineC = readsSlotsOnce(async () => (await slotsHeld()).length === 2, clock);
    const startWrittenByA = () =>
      waitFor("worker-a's start written", async () => {
        const run = await runOf(job.jobId);
        return run.status === "RUNNING" && run.workerId === "worker-a";
      });
    const held = holding();
    const runningA = underWay(
      processRun(
        { ...f.workerDeps("worker-a", { held: held.handler }, 500), engine: engineA },
        received,
      ),
    );
    // worker-c's ending is refused by worker-a's start, then worker-b's.
    let refusedCDone = false;
    const refusedC = underWay(
      processRun(
        { ...f.workerDeps("worker-c", { held: startWrittenByA }), engine: engineC },
        received,
      ).finally(() => {
        refusedCDone = true;
      }),
    );
    const refusedB = underWay(
      processRun(
        {
          ...f.workerDeps("worker-b", {
            held: async () => {
              await startWrittenByA();
              await waitFor("worker-c's refusal", () => refusedCDone);
            },
          }),
          engine: engineB,
        },
        received,
      ),
    );
    expect(await refusedC).toBe("ack");
    expect(await refusedB).toBe("ack");
    expect(held.contexts).toHaveLength(1);
    const { runId } = await runOf(job.jobId);
    // worker-a runs on in slot 0, which worker-c took with it; slot 1, worker-b's alone, is free.
    expect(await slotsHeld()).toEqual([[0, runId, 1]]);

    held.release();
    expect(await runningA).toBe("ack");
    expect(await runOf(job.jobId)).toMatchObject({ status: "SUCCEEDED", workerId: "worker-a" });
    expect(await slotsHeld()).toEqual([]);
  });

  it("a delivery whose slot is taken once the other delivery handed the run to its async target frees it (concurrentRuns 1)", async () => {
    const { job, received, clock, slotsHeld } = await deliveredUnderSlotQuota("handed-over", 1, {
      type: "hand-over",
      target: { url: "http://127.0.0.1:2/run", mode: "async" },
      schedule: { runAt: new Date().toISOString() },
      timeoutSeconds: 30,
    });
    // The target answers 202 at once: worker-a hands the run over, and frees its slot (an async
    // run holds none once handed over). worker-b read the run QUEUED with worker-a, and reads the
    // tenant's slots only then.
    const handOver = async () => new RunHandedOver();
    let handedOver = false;
    const first = underWay(
      processRun(
        { ...f.workerDeps("worker-a", { "hand-over": handOver }), engine: { ...f.engine, clock } },
        received,
      ).finally(() => {
        handedOver = true;
      }),
    );
    const refused = underWay(
      processRun(
        {
          ...f.workerDeps("worker-b", { "hand-over": handOver }),
          engine: readsSlotsOnce(() => handedOver, clock),
        },
        received,
      ),
    );
    expect(await first).toBe("ack");
    expect(await refused).toBe("ack");
    expect(await runOf(job.jobId)).toMatchObject({ status: "RUNNING", workerId: "worker-a" });
    // worker-b's token write was refused by worker-a's start: its slot, its alone, is free, and
    // the tenant's next run starts now, not a lease later.
    expect(await slotsHeld()).toEqual([]);
  });
});

describe("a start held unwritten by a worker that died after its admission", () => {
  /** Long enough that the holder's listed lease outlives the reaper's first look at the run. */
  const LONG_LEASE_MS = 12_000;
  let f: EngineFixture;
  const made: TestClients[] = [];
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { leaseMs: LONG_LEASE_MS } });
  });
  afterAll(async () => {
    for (const c of made) c.destroy();
    await f.destroy();
  });

  /** Clients whose every request hangs once the admission has been written: a worker that died. */
  function dyingClients(): TestClients {
    const dying = clientsDyingAfterAdmission();
    made.push(dying);
    return dying;
  }

  /**
   * A holder taken 6 s late (a backlog), early enough to hold its start unwritten, with a heartbeat
   * of this fixture's lease, dies once admitted; its admission lists the run for `holderLeaseMs`.
   * The reaper finds the run QUEUED past its deadline (a lease after it was due) and re-sends it
   * while that listing is still live: the survivor must run it.
   */
  async function reaperResendAfterDeadHolder(holderLeaseMs: number) {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { every: "PT1H", startAt: new Date(Date.now() + 200).toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const dueAt = Date.parse(received.message.dueAt);
    const holder = {
      ...f.workerDeps("holder", {}, LONG_LEASE_MS / 3),
      engine: {
        ...engineAt(f.engine, dueAt + 6000),
        doc: dyingClients().doc,
        settings: { ...f.engine.settings, leaseMs: holderLeaseMs },
      },
    };
    void processRun(holder, received);
    await waitFor("the holder's admission", async () => {
      const stored = (await f.jobs()).find((j) => j.jobId === job.jobId);
      return Object.keys(stored?.activeRuns ?? {}).length === 1;
    });
    const reapedAt = dueAt + LONG_LEASE_MS + 5500;
    expect((await reap(f.engine, { now: new Date(reapedAt) })).resent).toBe(1);
    const survivor = { ...f.workerDeps("survivor"), engine: engineAt(f.engine, reapedAt + 100) };
    expect(await processRun(survivor, received)).toBe("ack");
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(run).toMatchObject({ status: "SUCCEEDED", workerId: "survivor", fence: 1 });
  }

  it("is taken over by the reaper's re-send, not left to wait out the dead holder's lease", async () => {
    await reaperResendAfterDeadHolder(LONG_LEASE_MS);
  }, 30_000);
  it("held by a worker deployed with a longer lease is taken over by the reaper's re-send all the same", async () => {
    // The holder is a worker of the deploy before leaseSeconds was lowered to this fixture's.
    await reaperResendAfterDeadHolder(5 * LONG_LEASE_MS);
  }, 30_000);
});
