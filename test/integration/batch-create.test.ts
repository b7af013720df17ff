import {
  InternalServerError,
  ProvisionedThroughputExceededException,
} from "@aws-sdk/client-dynamodb";
import type { BatchWriteCommandInput, BatchWriteCommandOutput } from "@aws-sdk/lib-dynamodb";
import { describe, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { ConcurrentUpdateError } from "../../shared/errors.js";
import { type BatchCreateOutcome, createJobs } from "../../shared/jobs/create-batch.js";
import { createJob } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import { isContention, MAX_CONTENTION_ATTEMPTS } from "../../shared/storage/dynamo-errors.js";
import { shardHighWaterKey } from "../../shared/storage/items.js";
import { readIdempotencyRecords } from "../../shared/storage/job-batch-create.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { caseFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import {
  leaveBatchGetsUnprocessed,
  leaveBatchWritesUnprocessed,
  strayWaits,
  withFaults,
  withLostAnswers,
} from "../support/faults.js";
import { createTestClients } from "../support/namespace.js";

type WriteRequests = NonNullable<BatchWriteCommandInput["RequestItems"]>;

const now = () => ({ runAt: new Date().toISOString() });
const later = () => ({ runAt: new Date(Date.now() + 3_600_000).toISOString() });

const createdName = (outcome: BatchCreateOutcome | undefined) =>
  outcome && "job" in outcome ? outcome.job.name : null;

const SETTINGS = { settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0 } };

/**
 * The cases run side by side, each on tables and queues of its own (caseFixture; one fixture
 * purged between them before): a fault is a middleware on the case's own client, and a case reads
 * its tables and queue whole (f.jobs(), f.receiveAll()).
 */
describe.concurrent("a batch create under write faults: each job is created whole or not at all, and its answer says which", () => {
  /**
   * Until removed, every BatchWriteItem the engine sends is changed by `change`: what it takes
   * out is not sent, and comes back as UnprocessedItems, as DynamoDB answers under throttling.
   */
  const onBatchWrites = (
    f: EngineFixture,
    name: string,
    change: (requests: WriteRequests, call: number) => WriteRequests,
  ) => {
    let calls = 0;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== "BatchWriteItemCommand") return next(args);
        const input = args.input as BatchWriteCommandInput;
        const all = input.RequestItems ?? {};
        const sent = change(all, ++calls);
        const unprocessed: WriteRequests = {};
        for (const [table, requests] of Object.entries(all)) {
          const kept = new Set(sent[table] ?? []);
          const left = requests.filter((r) => !kept.has(r));
          if (left.length > 0) unprocessed[table] = left;
        }
        // Nothing left to send: DynamoDB's answer to a request it processed none of.
        if (Object.keys(sent).length === 0) {
          const output: BatchWriteCommandOutput = { $metadata: {}, UnprocessedItems: unprocessed };
          return { output, response: {} } as Awaited<ReturnType<typeof next>>;
        }
        const result = await next({ ...args, input: { ...input, RequestItems: sent } });
        const output = {
          ...(result.output as BatchWriteCommandOutput),
          UnprocessedItems: unprocessed,
        };
        return { ...result, output };
      },
      { step: "initialize", name },
    );
    return { calls: () => calls, remove: () => f.engine.doc.middlewareStack.remove(name) };
  };

  const without = (requests: WriteRequests, drop: (item: Record<string, unknown>) => boolean) =>
    Object.fromEntries(
      Object.entries(requests)
        .map(
          ([table, rs]) =>
            [table, rs.filter((r) => !(r.PutRequest?.Item && drop(r.PutRequest.Item)))] as const,
        )
        .filter(([, rs]) => rs.length > 0),
    );

  it("a job DynamoDB keeps leaving unprocessed is not created and its quota share is given back; the others are created and their runs sent", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "unprocessed-job";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 10 }, new Date());
    const fault = onBatchWrites(f, "dropVictimJob", (requests) =>
      without(requests, (item) => item.sk === "JOB" && item.name === "victim"),
    );
    try {
      const outcomes = await createJobs(f.engine, tenant, [
        { input: testJob({ tenantId: tenant, name: "a", schedule: now() }) },
        { input: testJob({ tenantId: tenant, name: "victim", schedule: now() }) },
        { input: testJob({ tenantId: tenant, name: "per minute" }) },
        {
          input: testJob({ tenantId: tenant, name: "keyed", schedule: later() }),
          idempotency: { key: "k1", requestHash: "h1" },
        },
      ]);
      expect(outcomes.map(createdName)).toEqual(["a", null, "per minute", "keyed"]);
      const refused = outcomes[1];
      expect(refused && "error" in refused && refused.error).toBeInstanceOf(ConcurrentUpdateError);
      // Sent again after a backoff until the rounds ran out (the runs' write went through first).
      expect(fault.calls()).toBeGreaterThanOrEqual(7);
    } finally {
      fault.remove();
    }
    const jobs = (await f.jobs()).filter((j) => j.tenantId === tenant);
    expect(jobs.map((j) => j.name).sort()).toEqual(["a", "keyed", "per minute"]);
    // The victim's run was written before its job and belongs to no job: it is never sent
    // (a worker that met it would cancel it, "job no longer exists").
    const sent = await f.receiveAll(f.engine.queues.normal);
    const sentJobs = new Set(sent.map((m) => m.message.jobId));
    const byName = new Map(jobs.map((j) => [j.name, j.jobId]));
    expect(sentJobs.has(String(byName.get("a")))).toBe(true);
    // The per-minute job's first runs (sent with their delay) were claimed with it.
    const perMinuteRuns = (await f.runs()).filter((r) => r.jobId === byName.get("per minute"));
    expect(perMinuteRuns.length).toBeGreaterThan(0);
    const orphanRuns = (await f.runs()).filter(
      (r) => r.tenantId === tenant && !jobs.some((j) => j.jobId === r.jobId),
    );
    expect(orphanRuns).toHaveLength(1);
    expect(sentJobs.has(String(orphanRuns[0]?.jobId))).toBe(false);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: jobs.length });
  });

  /** Whether a BatchWriteItem (as sent, or as the Document client takes it) puts the job `victim`. */
  const holdsVictim = (input: Record<string, unknown>) => {
    const requests = JSON.stringify(input.RequestItems ?? {});
    return (
      (requests.includes('"name":{"S":"victim"}') && requests.includes('"sk":{"S":"JOB"}')) ||
      (requests.includes('"name":"victim"') && requests.includes('"sk":"JOB"'))
    );
  };

  /**
   * An engine whose BatchWriteItem holding the job named `victim` is applied with its answer lost
   * (a 500 after DynamoDB wrote it), and whose later sends of that job meet `later`:
   * - `throttled`: the SDK's resends are throttled whole until it gives up (the fault sits inside
   *   the SDK's retry loop, where a real 500 or throttle surfaces);
   * - `unprocessed`: the SDK's resend is answered with every item unprocessed (its answer says
   *   two attempts), and so is each later round of the batch.
   */
  const losingVictimPut = (f: EngineFixture, later: "throttled" | "unprocessed") => {
    const clients = createTestClients({ maxSockets: 16 });
    const sends = { applied: 0, refused: 0 };
    if (later === "throttled") {
      clients.dynamo.middlewareStack.add(
        (next, context) => async (args) => {
          const input = args.input as Record<string, unknown>;
          if (context.commandName !== "BatchWriteItemCommand" || !holdsVictim(input))
            return next(args);
          if (sends.applied === 0) {
            sends.applied++;
            await next(args);
            throw new InternalServerError({
              message: "answer lost after the write was applied",
              $metadata: { httpStatusCode: 500 },
            });
          }
          sends.refused++;
          throw new ProvisionedThroughputExceededException({
            message: "The level of configured provisioned throughput for the table was exceeded",
            $metadata: { httpStatusCode: 400 },
          });
        },
        { step: "finalizeRequest", priority: "low", name: "loseVictimPut" },
      );
    } else {
      // The SDK's answer to a request it sent twice: the first applied with its answer lost, the
      // second processing none of it (throttling): UnprocessedItems, after two attempts.
      clients.doc.middlewareStack.add(
        (next, context) => async (args) => {
          const input = args.input as BatchWriteCommandInput;
          if (context.commandName !== "BatchWriteItemCommand" || !holdsVictim(input))
            return next(args);
          const attempts = sends.applied === 0 ? 2 : 1;
          if (sends.applied === 0) {
            sends.applied++;
            await next(args);
          }
          sends.refused++;
          const output: BatchWriteCommandOutput = {
            $metadata: { attempts },
            UnprocessedItems: input.RequestItems,
          };
          return { output, response: {} } as Awaited<ReturnType<typeof next>>;
        },
        { step: "initialize", name: "leaveVictimUnprocessed" },
      );
    }
    return { engine: { ...f.engine, doc: clients.doc }, sends, destroy: () => clients.destroy() };
  };

  it.for(["throttled", "unprocessed"] as const)(
    "a job put applied with its answer lost, its resends then %s, is answered created and keeps its quota share",
    async (later, { expect, onTestFinished }) => {
      const f = await caseFixture(onTestFinished, SETTINGS);
      const tenant = `lost-put-${later}`;
      await writeQuotaOverride(f.engine, tenant, { activeJobs: 10 }, new Date());
      const faulty = losingVictimPut(f, later);
      let outcomes: BatchCreateOutcome[];
      try {
        outcomes = await createJobs(faulty.engine, tenant, [
          { input: testJob({ tenantId: tenant, name: "a", schedule: now() }) },
          { input: testJob({ tenantId: tenant, name: "victim", schedule: now() }) },
        ]);
      } finally {
        faulty.destroy();
      }
      expect(faulty.sends.applied).toBe(1);
      expect(faulty.sends.refused).toBeGreaterThan(0);
      // The victim's job was written by the send whose answer was lost: it is created, once.
      expect(outcomes.map(createdName)).toEqual(["a", "victim"]);
      const jobs = (await f.jobs()).filter((j) => j.tenantId === tenant);
      expect(jobs.map((j) => j.name).sort()).toEqual(["a", "victim"]);
      expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });
      // Its run is sent with the others', not left to the reaper.
      const victim = jobs.find((j) => j.name === "victim");
      const received = await f.nextDelivery(f.engine.queues.normal, String(victim?.jobId), 5_000);
      expect(received.message.jobId).toBe(victim?.jobId);
    },
  );

  it("a keyed job whose transaction keeps conflicting is answered busy with its share given back; the batch sent again with the same keys creates it once and answers the others' jobs", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "conflicting-job";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 10 }, new Date());
    const batch = [
      {
        input: testJob({ tenantId: tenant, name: "first", schedule: later() }),
        idempotency: { key: "first", requestHash: "h1" },
      },
      {
        input: testJob({ tenantId: tenant, name: "conflicting", schedule: now() }),
        idempotency: { key: "conflicting", requestHash: "h2" },
      },
      { input: testJob({ tenantId: tenant, name: "plain", schedule: later() }) },
    ];
    const isConflicting = (input: Record<string, unknown>) =>
      JSON.stringify(input.TransactItems ?? []).includes('"name":"conflicting"');
    const faulty = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: MAX_CONTENTION_ATTEMPTS,
      match: isConflicting,
    });
    let outcomes: BatchCreateOutcome[];
    try {
      outcomes = await createJobs(faulty.engine, tenant, batch);
    } finally {
      faulty.destroy();
    }
    expect(faulty.injected.count).toBe(MAX_CONTENTION_ATTEMPTS);
    expect(outcomes.map(createdName)).toEqual(["first", null, "plain"]);
    const busy = outcomes[1];
    expect(busy && "error" in busy && isContention(busy.error)).toBe(true);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });

    // The client sends the whole batch again: the keyed jobs it has are answered, not made again.
    const again = await createJobs(f.engine, tenant, batch);
    expect(again.map((o) => ("job" in o ? [o.job.name, o.created] : String(o.error)))).toEqual([
      ["first", false],
      ["conflicting", true],
      ["plain", true],
    ]);
    const first = outcomes[0];
    expect(again[0] && "job" in again[0] && again[0].job.jobId).toBe(
      first && "job" in first && first.job.jobId,
    );
    const jobs = (await f.jobs()).filter((j) => j.tenantId === tenant);
    // The plain job has no key: sent again, it is another job, as a single create without one is.
    expect(jobs.map((j) => j.name).sort()).toEqual(["conflicting", "first", "plain", "plain"]);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 4 });
  });

  it("a keyed job whose transaction was applied with every answer lost is answered as created, and its run is sent", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "answers-lost";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 10 }, new Date());
    const isLost = (input: Record<string, unknown>) =>
      JSON.stringify(input.TransactItems ?? []).includes("answers lost");
    // More lost answers than the SDK's sends of one request: it gives up with the 500.
    const faulty = withLostAnswers(f.engine, {
      operation: "TransactWriteItems",
      times: 20,
      match: isLost,
    });
    let outcomes: BatchCreateOutcome[];
    try {
      outcomes = await createJobs(faulty.engine, tenant, [
        {
          input: testJob({ tenantId: tenant, name: "answers lost", schedule: now() }),
          idempotency: { key: "lost", requestHash: "h1" },
        },
        { input: testJob({ tenantId: tenant, name: "plain", schedule: later() }) },
      ]);
    } finally {
      faulty.destroy();
    }
    expect(faulty.injected.count).toBeGreaterThan(1);
    expect(outcomes.map((o) => ("job" in o ? [o.job.name, o.created] : String(o.error)))).toEqual([
      ["answers lost", true],
      ["plain", true],
    ]);
    const jobs = (await f.jobs()).filter((j) => j.tenantId === tenant);
    expect(jobs.map((j) => j.name).sort()).toEqual(["answers lost", "plain"]);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 2 });
    const lost = outcomes[0];
    const jobId = lost && "job" in lost ? lost.job.jobId : "";
    const received = await f.nextDelivery(f.engine.queues.normal, jobId, 5_000);
    expect(received.message.jobId).toBe(jobId);
  });

  it("items left unprocessed once are sent again and every job is created", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "unprocessed-once";
    const fault = onBatchWrites(f, "dropFirstRound", (requests, call) =>
      call === 1 ? without(requests, (item) => item.sk !== "JOB" || item.name === "b") : requests,
    );
    try {
      const outcomes = await createJobs(f.engine, tenant, [
        { input: testJob({ tenantId: tenant, name: "a", schedule: now() }) },
        { input: testJob({ tenantId: tenant, name: "b", schedule: now() }) },
        { input: testJob({ tenantId: tenant, name: "c" }) },
      ]);
      expect(outcomes.map(createdName)).toEqual(["a", "b", "c"]);
    } finally {
      fault.remove();
    }
    const jobs = (await f.jobs()).filter((j) => j.tenantId === tenant);
    expect(jobs.map((j) => j.name).sort()).toEqual(["a", "b", "c"]);
    expect((await f.dueEntries()).filter((e) => e.tenantId === tenant)).toHaveLength(1);
  });

  it("a throttled write of the runs creates none of their jobs and gives their shares back; a job with its own transaction is created", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "throttled-runs";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 10 }, new Date());
    let thrown = 0;
    const name = "throttleFirstBatchWrite";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "BatchWriteItemCommand" && thrown === 0) {
          thrown++;
          throw new ProvisionedThroughputExceededException({
            message: "The level of configured provisioned throughput for the table was exceeded",
            $metadata: {},
          });
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      const outcomes = await createJobs(f.engine, tenant, [
        { input: testJob({ tenantId: tenant, name: "a", schedule: now() }) },
        { input: testJob({ tenantId: tenant, name: "per minute" }) },
        {
          input: testJob({ tenantId: tenant, name: "keyed", schedule: later() }),
          idempotency: { key: "k2", requestHash: "h2" },
        },
      ]);
      expect(outcomes.map(createdName)).toEqual([null, null, "keyed"]);
      for (const outcome of outcomes.slice(0, 2))
        expect(outcome && "error" in outcome && outcome.error).toBeInstanceOf(
          ConcurrentUpdateError,
        );
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(thrown).toBe(1);
    expect((await f.jobs()).filter((j) => j.tenantId === tenant).map((j) => j.name)).toEqual([
      "keyed",
    ]);
    expect(await f.receiveAll(f.engine.queues.normal, { quietMs: 1_500 })).toEqual([]);
    expect(await readQuotaUsage(f.engine, tenant)).toMatchObject({ activeJobs: 1 });
  });

  it("a batch whose shard mark cannot be raised writes nothing and reserves nothing of the tenant's quotas", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "mark-unwritten";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 10 }, new Date());
    // A mark of its own: this process has not raised it yet (recordShardCount raises once).
    const engine = { ...f.engine, settings: { ...f.engine.settings, maxShardCount: 13 } };
    let thrown = 0;
    const name = "failShardMark";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const key = (args.input as { Key?: Record<string, unknown> }).Key;
        if (context.commandName === "UpdateItemCommand" && key?.pk === shardHighWaterKey.pk) {
          thrown++;
          throw new InternalServerError({ message: "Internal server error", $metadata: {} });
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      await expect(
        createJobs(engine, tenant, [
          { input: testJob({ tenantId: tenant, name: "a", schedule: now() }) },
          { input: testJob({ tenantId: tenant, name: "b", schedule: later() }) },
        ]),
      ).rejects.toThrow(InternalServerError);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(thrown).toBe(1);
    expect((await f.jobs()).filter((j) => j.tenantId === tenant)).toEqual([]);
    // Nothing was written, so nothing stays reserved (a single create raises the mark first too).
    expect((await readQuotaUsage(f.engine, tenant))?.activeJobs ?? 0).toBe(0);
  });

  it("a recurring job's next entry inside a pass's window outlives a dispatcher pass that runs just before its job is written", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "pass-before-commit";
    // Every 5 s: more occurrences fall inside the fast-path window than one claim takes, so the
    // job's pending entry is due inside the window a dispatcher pass sweeps.
    const jobItem = (input: Record<string, unknown>): Record<string, unknown> | undefined => {
      const puts = [
        ...Object.values((input.RequestItems ?? {}) as Record<string, WriteRequests[string]>)
          .flat()
          .map((r) => r.PutRequest?.Item),
        ...((input.TransactItems ?? []) as { Put?: { Item?: Record<string, unknown> } }[]).map(
          (t) => t.Put?.Item,
        ),
        (input as { Item?: Record<string, unknown> }).Item,
      ];
      return puts.find((item) => item?.sk === "JOB" && item.tenantId === tenant);
    };
    let passes = 0;
    const name = "passBeforeJobWrite";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const job = jobItem(args.input as Record<string, unknown>);
        if (job !== undefined && passes === 0 && context.commandName !== "GetItemCommand") {
          passes++;
          // Another process's pass, at the moment the job's own write is about to go out.
          const shard = shardOf(String(job.jobId), f.engine.settings.shardCount);
          await dispatchShard(f.engine, shard, "pass-before-commit");
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    let outcomes: BatchCreateOutcome[];
    try {
      outcomes = await createJobs(f.engine, tenant, [
        {
          input: testJob({
            tenantId: tenant,
            name: "every 5 s",
            schedule: { every: "PT5S", startAt: new Date().toISOString() },
          }),
        },
      ]);
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(passes).toBe(1);
    expect(outcomes.map(createdName)).toEqual(["every 5 s"]);
    const [job] = (await f.jobs()).filter((j) => j.tenantId === tenant);
    expect(job?.status).toBe("ACTIVE");
    // The job names its next entry, and that entry is there for a pass to claim: the schedule goes on.
    const entries = (await f.dueEntries()).filter((e) => e.jobId === job?.jobId);
    expect(entries.map((e) => e.key.sk)).toEqual([job?.nextDueKey?.sk]);
  });

  it("a job whose re-read after its further claims fails is still answered as created, and so are the others of its batch", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "reread-fails";
    const failed: string[] = [];
    const name = "failJobReread";
    // Every consistent read of the tenant's job item fails, as a read that timed out after the
    // SDK's retries; the writes pass.
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const key = (args.input as { Key?: Record<string, unknown> }).Key;
        if (context.commandName === "GetItemCommand" && key?.sk === "JOB") {
          const job = (await f.jobs()).find((j) => j.jobId === String(key.pk).slice(4));
          if (job?.tenantId === tenant) {
            failed.push(job.name);
            throw Object.assign(new Error("the read timed out"), { name: "TimeoutError" });
          }
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    const perSecond = (label: string) =>
      testJob({
        tenantId: tenant,
        name: label,
        schedule: { every: "PT5S", startAt: new Date().toISOString() },
      });
    try {
      const outcomes = await createJobs(f.engine, tenant, [
        { input: perSecond("batched every 5 s") },
        { input: testJob({ tenantId: tenant, name: "one-off", schedule: now() }) },
      ]);
      expect(outcomes.map(createdName)).toEqual(["batched every 5 s", "one-off"]);
      const single = await createJob(f.engine, perSecond("single every 5 s"));
      expect(single).toMatchObject({ created: true, job: { name: "single every 5 s" } });
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    // The reads did fail: the answers are the jobs as written.
    expect(failed.sort()).toEqual(["batched every 5 s", "single every 5 s"]);
    const jobs = (await f.jobs()).filter((j) => j.tenantId === tenant);
    expect(jobs.map((j) => j.name).sort()).toEqual([
      "batched every 5 s",
      "one-off",
      "single every 5 s",
    ]);
  });

  it("idempotency records DynamoDB keeps leaving unread fail only the jobs with a key, as busy; the others are created", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "records-unread";
    // DynamoDB's answer under throttling: none of the keys read, all of them UnprocessedKeys.
    const unread = leaveBatchGetsUnprocessed(f.engine.doc);
    let outcomes: BatchCreateOutcome[];
    try {
      outcomes = await createJobs(f.engine, tenant, [
        { input: testJob({ tenantId: tenant, name: "plain", schedule: now() }) },
        {
          input: testJob({ tenantId: tenant, name: "keyed", schedule: later() }),
          idempotency: { key: "unread", requestHash: "h" },
        },
        { input: testJob({ tenantId: tenant, name: "per minute" }) },
      ]);
    } finally {
      unread.restore();
    }
    expect(unread.requests()).toBe(6);
    expect(outcomes.map(createdName)).toEqual(["plain", null, "per minute"]);
    const keyed = outcomes[1];
    expect(keyed && "error" in keyed && keyed.error).toBeInstanceOf(ConcurrentUpdateError);
    const jobs = (await f.jobs()).filter((j) => j.tenantId === tenant);
    expect(jobs.map((j) => j.name).sort()).toEqual(["per minute", "plain"]);
  });
});

/** The waits between a batch request's rounds: 50 ms before the second, doubling after. */
const ROUND_WAITS_MS = [50, 100, 200, 400, 800];

// Apart from the concurrent cases above, which would stretch these waits.
describe("a batch create's batch requests DynamoDB keeps leaving unprocessed", () => {
  it("a job due now whose runs stay unwritten is sent in 6 rounds, 50 ms doubling between, and not created", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const tenant = "runs-unwritten";
    const unwritten = leaveBatchWritesUnprocessed(f.engine.doc);
    const [outcome] = await createJobs(f.engine, tenant, [
      { input: testJob({ tenantId: tenant, name: "due now", schedule: now() }) },
    ]);
    unwritten.restore();
    expect(unwritten.requests()).toBe(6);
    expect(strayWaits(unwritten.waits(), ROUND_WAITS_MS)).toEqual([]);
    expect(outcome && "error" in outcome && outcome.error).toBeInstanceOf(ConcurrentUpdateError);
    expect((await f.jobs()).filter((j) => j.tenantId === tenant)).toEqual([]);
  });

  it("idempotency records left unread are asked again in 6 rounds, 50 ms doubling between", async ({
    expect,
    onTestFinished,
  }) => {
    const f = await caseFixture(onTestFinished, SETTINGS);
    const unread = leaveBatchGetsUnprocessed(f.engine.doc);
    await expect(readIdempotencyRecords(f.engine, "records-unread-waits", ["k"])).rejects.toThrow(
      ConcurrentUpdateError,
    );
    expect(unread.requests()).toBe(6);
    expect(strayWaits(unread.waits(), ROUND_WAITS_MS)).toEqual([]);
  });
});
