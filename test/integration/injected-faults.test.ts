import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { reap } from "../../shared/dispatch/reaper.js";
import { cancelRun, createJob, pauseJob, resumeJob, triggerJob } from "../../shared/jobs/index.js";
import { shardOf } from "../../shared/keys.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { readQuotaUsage, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { readWebhookSecrets } from "../../shared/storage/webhook-secrets.js";
import {
  rotateWebhookSecret,
  signingSecrets,
  tenantWebhookSecrets,
} from "../../shared/webhooks/secrets.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { type LostAnswerPlan, withLostAnswers, withSqsFaults } from "../support/faults.js";

/**
 * Writes that DynamoDB applied but whose answer never reached the caller (a dropped connection,
 * a 500 past the commit). The SDK sends such a request again, and a conditional write then meets
 * its own earlier write: each of these must tell that apart from someone else's change.
 */
describe("a write applied with its answer lost", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  type Received = Awaited<ReturnType<EngineFixture["nextDelivery"]>>;
  /** Processes a delivery as a worker whose one matching UpdateItem loses its answer. */
  async function processLosingOneUpdate(
    received: Received,
    workerId: string,
    match: NonNullable<LostAnswerPlan["match"]>,
  ) {
    const lossy = withLostAnswers(f.engine, { operation: "UpdateItem", times: 1, match });
    try {
      expect(await f.process({ ...f.workerDeps(workerId), engine: lossy.engine }, received)).toBe(
        "ack",
      );
    } finally {
      lossy.destroy();
    }
    expect(lossy.injected.count).toBe(1);
  }

  it("a run's ending still writes its job: a one-off completes", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await processLosingOneUpdate(
      received,
      "lossy",
      (input) =>
        input.TableName === f.engine.tables.runs &&
        String(input.UpdateExpression).includes("finishedAt = :finishedAt"),
    );
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => r.status)).toEqual(["SUCCEEDED"]);
    const stored = await getJob(f.engine, job.jobId);
    expect(stored?.status).toBe("COMPLETED");
    expect(stored?.lastRun?.runId).toBe(runs[0]?.runId);
  });
  it("a create's job put still answers the job it wrote, and sends its run", async () => {
    const lossy = withLostAnswers(f.engine, {
      operation: "PutItem",
      times: 1,
      match: (input) =>
        input.TableName === f.engine.tables.jobs &&
        JSON.stringify(input.Item).includes('"pk":{"S":"JOB#'),
    });
    try {
      const { job, created } = await createJob(
        lossy.engine,
        testJob({ schedule: { runAt: new Date().toISOString() } }),
      );
      expect(lossy.injected.count).toBe(1);
      expect(created).toBe(true);
      expect((await getJob(f.engine, job.jobId))?.status).toBe("ACTIVE");
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(received.message.jobId).toBe(job.jobId);
      await f.process(f.workerDeps("after-create"), received);
    } finally {
      lossy.destroy();
    }
  });

  it("a keyed create whose transaction was applied with every answer lost answers the job it wrote, and sends its run", async () => {
    // More lost answers than the SDK's sends of one request: it gives up with the 500.
    const lossy = withLostAnswers(f.engine, {
      operation: "TransactWriteItems",
      times: 20,
      match: (input) => JSON.stringify(input.TransactItems ?? []).includes("every answer lost"),
    });
    try {
      const { job, created } = await createJob(
        lossy.engine,
        testJob({ name: "every answer lost", schedule: { runAt: new Date().toISOString() } }),
        { idempotency: { key: "every-answer-lost", requestHash: "h" } },
      );
      expect(lossy.injected.count).toBeGreaterThan(1);
      expect(created).toBe(true);
      expect((await getJob(f.engine, job.jobId))?.status).toBe("ACTIVE");
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      expect(received.message.jobId).toBe(job.jobId);
      await f.process(f.workerDeps("after-lost-create"), received);
    } finally {
      lossy.destroy();
    }
  });

  it("a run cancel answers the run it cancelled, and completes its one-off", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date(Date.now() + 60_000).toISOString() } }),
    );
    const [queued] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(queued?.status).toBe("QUEUED");
    const lossy = withLostAnswers(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) =>
        input.TableName === f.engine.tables.runs &&
        String(input.UpdateExpression).includes("cancelledBy"),
    });
    try {
      const cancelled = await cancelRun(lossy.engine, "tenant-a", job.jobId, queued?.runId ?? "");
      expect(lossy.injected.count).toBe(1);
      expect(cancelled.status).toBe("CANCELLED");
    } finally {
      lossy.destroy();
    }
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  });

  it("a redelivery's start still runs the run it started", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    // A message that came back unacknowledged writes its start at once.
    await processLosingOneUpdate({ ...received, receiveCount: 2 }, "lossy-start", (input) =>
      String(input.UpdateExpression).includes("fence = fence + :one"),
    );
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => [r.status, r.fence])).toEqual([["SUCCEEDED", 1]]);
    expect((await getJob(f.engine, job.jobId))?.status).toBe("COMPLETED");
  });

  it("a recurring run's admission still runs the run it admitted", async () => {
    const { job } = await createJob(f.engine, testJob({ schedule: { every: "PT1H" } }));
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await processLosingOneUpdate(received, "lossy-admission", (input) =>
      String(input.UpdateExpression).includes("activeRuns.#runId = :leaseUntil"),
    );
    const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(runs.map((r) => r.status)).toContain("SUCCEEDED");
  });

  it("a run sent back to wait for its tenant's quota still gets its fresh message", async () => {
    await writeQuotaOverride(f.engine, "quota-zero", { concurrentRuns: 0 }, new Date());
    const { job } = await createJob(
      f.engine,
      testJob({ tenantId: "quota-zero", schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await processLosingOneUpdate(received, "lossy-requeue", (input) =>
      String(input.UpdateExpression).includes("#status = :queued, reason"),
    );
    const [waiting] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(waiting).toMatchObject({ status: "QUEUED", fence: 1 });
    // Its fresh message, a second or so later: not left to the reaper a lease on.
    const again = await f.nextDelivery(f.engine.queues.normal, job.jobId, 10_000);
    expect(again.message.scheduledFor).toBe(waiting?.scheduledFor);
  });

  // A first delivery writes its start with the park (held unwritten); a redelivery writes it first.
  it.each([1, 2])(
    "a run parked for its paused job is still listed for resume, not left to the reaper (delivery %i)",
    async (receiveCount) => {
      const { job } = await createJob(
        f.engine,
        testJob({ schedule: { runAt: new Date().toISOString() } }),
      );
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      await pauseJob(f.engine, "tenant-a", job.jobId);
      await processLosingOneUpdate({ ...received, receiveCount }, "lossy-park", (input) =>
        String(input.UpdateExpression).includes("parkedFence = :fence"),
      );
      const [parked] = (await f.runs()).filter((r) => r.jobId === job.jobId);
      expect(parked).toMatchObject({ status: "QUEUED", reason: "waiting: job paused" });
      // Listed on the job, for resume to send at once.
      const paused = await getJob(f.engine, job.jobId);
      expect(Object.keys(paused?.parkedRuns ?? {})).toEqual([parked?.runId]);
      await resumeJob(f.engine, "tenant-a", job.jobId);
      const again = await f.nextDelivery(f.engine.queues.normal, job.jobId, 10_000);
      expect(again.message.scheduledFor).toBe(parked?.scheduledFor);
    },
  );

  it("a give-back of a refused create's quota share takes it off once", async () => {
    const tenantId = "gives-back";
    await writeQuotaOverride(f.engine, tenantId, { activeJobs: 10 }, new Date());
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const idempotency = { key: "same-key", requestHash: "first" };
    await createJob(f.engine, testJob({ tenantId, schedule: { runAt: later } }), { idempotency });
    expect((await readQuotaUsage(f.engine, tenantId))?.activeJobs).toBe(1);
    // Another body under the key: its write is refused, and its reserved share given back.
    const lossy = withLostAnswers(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => String(input.ConditionExpression).includes("recount"),
    });
    try {
      await expect(
        createJob(
          lossy.engine,
          testJob({ tenantId, name: "another", schedule: { runAt: later } }),
          {
            idempotency: { key: "same-key", requestHash: "second" },
          },
        ),
      ).rejects.toThrow(/idempotency/i);
    } finally {
      lossy.destroy();
    }
    expect(lossy.injected.count).toBe(1);
    expect((await readQuotaUsage(f.engine, tenantId))?.activeJobs).toBe(1);
  });
});

describe("SQS refusing a send after the write it follows committed", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("a trigger answers its run, and the reaper sends it", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { cron: "0 0 1 1 *", timezone: "UTC" } }),
    );
    const refusing = withSqsFaults(f.engine, {
      operation: "SendMessageBatch",
      kind: "refuseEntries",
      times: 3,
    });
    try {
      const run = await triggerJob(refusing.engine, "tenant-a", job.jobId);
      expect(refusing.injected.count).toBe(3);
      const stored = (await f.runs()).find((r) => r.runId === run.runId);
      expect(stored?.status).toBe("QUEUED");
      const pastDeadline = Date.parse(run.dueAt) + f.engine.settings.leaseMs + 10_000;
      expect((await reap(f.engine, { now: new Date(pastDeadline) })).resent).toBe(1);
    } finally {
      refusing.destroy();
    }
  });
});

describe("a heartbeat whose message's receipt handle expired", () => {
  const LEASE_MS = 3_000;
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
  });
  afterAll(() => f.destroy());

  it("still extends the run's admission on its job", async () => {
    const { job } = await createJob(
      f.engine,
      testJob({ type: "outlives-its-lease", schedule: { every: "PT1H" } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const expired = withSqsFaults(f.engine, {
      operation: "ChangeMessageVisibility",
      kind: "expiredReceipt",
      times: Number.POSITIVE_INFINITY,
    });
    const listedLeases: string[] = [];
    const outlivesItsLease = async (ctx: { jobId: string; runId: string }) => {
      await sleep(LEASE_MS + 1_000);
      const stored = await getJob(f.engine, ctx.jobId);
      listedLeases.push(stored?.activeRuns[ctx.runId] ?? "not listed");
    };
    try {
      const deps = f.workerDeps("beating", { "outlives-its-lease": outlivesItsLease }, 300);
      expect(await f.process({ ...deps, engine: expired.engine }, received)).toBe("ack");
    } finally {
      expired.destroy();
    }
    expect(expired.injected.count).toBeGreaterThan(0);
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(run?.status).toBe("SUCCEEDED");
    // Listed under a lease from a beat after its start, not the one its admission gave it.
    const [listed] = listedLeases;
    expect(Date.parse(listed ?? "")).toBeGreaterThan(Date.parse(run?.startedAt ?? "") + LEASE_MS);
  });
});

describe("the reaper's deadline write applied with its answer lost", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("still sends the run it moved on", async () => {
    // The create's send is refused: the run is QUEUED with no message, for the reaper to find.
    const refusing = withSqsFaults(f.engine, {
      operation: "SendMessageBatch",
      kind: "refuseEntries",
      times: 3,
    });
    const { job } = await createJob(
      refusing.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    ).finally(() => refusing.destroy());
    const [run] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(run?.status).toBe("QUEUED");
    const lossy = withLostAnswers(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => String(input.UpdateExpression).startsWith("SET inflightSk = :deadline"),
    });
    try {
      const pastDeadline = Date.parse(run?.dueAt ?? "") + f.engine.settings.leaseMs + 10_000;
      const { resent } = await reap(lossy.engine, { now: new Date(pastDeadline) });
      expect(lossy.injected.count).toBe(1);
      expect(resent).toBe(1);
    } finally {
      lossy.destroy();
    }
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    expect(received.message.scheduledFor).toBe(run?.scheduledFor);
  });
});

describe("SQS refusing the reaper's send for one shard", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it("still re-sends the runs of the shards after it", async () => {
    // Runs with no message (the creates' sends refused), on two shards.
    const refusing = withSqsFaults(f.engine, {
      operation: "SendMessageBatch",
      kind: "refuseEntries",
      times: Number.POSITIVE_INFINITY,
    });
    const byShard = new Map<number, string>();
    try {
      while (byShard.size < 2) {
        const { job } = await createJob(
          refusing.engine,
          testJob({ schedule: { runAt: new Date().toISOString() } }),
        );
        const shard = shardOf(job.jobId, f.engine.settings.shardCount);
        if (!byShard.has(shard)) byShard.set(shard, job.jobId);
      }
    } finally {
      refusing.destroy();
    }
    const [first, second] = [...byShard.entries()].sort(([a], [b]) => a - b);
    if (!first || !second) throw new Error("two shards expected");
    const runs = await f.runs();
    const lastDue = Math.max(...runs.map((r) => Date.parse(r.dueAt)));
    // The reaper reads the lower shard first: its send is refused, three rounds.
    const failing = withSqsFaults(f.engine, {
      operation: "SendMessageBatch",
      kind: "refuseEntries",
      times: 3,
    });
    try {
      const pastDeadline = new Date(lastDue + f.engine.settings.leaseMs + 10_000);
      await expect(reap(failing.engine, { now: pastDeadline })).rejects.toThrow(/SQS refused/);
      expect(failing.injected.count).toBe(3);
    } finally {
      failing.destroy();
    }
    const received = await f.nextDelivery(f.engine.queues.normal, second[1], 10_000);
    expect(received.message.jobId).toBe(second[1]);
  });
});

describe("a webhook secret's rotation applied with its answer lost", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  // Without a key: the caller sent once, so nothing but the write itself can tell its own rotation.
  it.each([
    ["without a key", undefined],
    ["with a key", "lost-rotation"],
  ])(
    "%s rotates once: it answers the secret its write made, and the one it replaced still signs",
    async (_, key) => {
      const tenantId = `rotates-once-${key ?? "unkeyed"}`;
      const before = await tenantWebhookSecrets(f.engine, tenantId);
      const lossy = withLostAnswers(f.engine, {
        operation: "UpdateItem",
        times: 1,
        match: (input) => input.TableName === f.engine.tables.webhookSecrets,
      });
      let answered: string;
      try {
        answered = (await rotateWebhookSecret(lossy.engine, tenantId, key)).current;
      } finally {
        lossy.destroy();
      }
      expect(lossy.injected.count).toBe(1);
      const stored = await readWebhookSecrets(f.engine, tenantId);
      expect(stored?.current).toBe(answered);
      expect(stored?.version).toBe(before.version + 1);
      expect(signingSecrets(stored ?? before, f.engine.clock())).toEqual([
        answered,
        before.current,
      ]);
    },
  );

  // Another caller's rotation lands between the write and the repeat the SDK sends of it: the
  // repeat's failed condition shows another secret, which is not this rotation's.
  it("without a key, beside another rotation that lands before its repeat: two rotations, each caller told a secret that signs, the later one's current", async () => {
    const tenantId = "rotates-beside-another";
    const before = await tenantWebhookSecrets(f.engine, tenantId);
    let other: string | undefined;
    const lossy = withLostAnswers(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => input.TableName === f.engine.tables.webhookSecrets,
      meanwhile: async () => {
        other = (await rotateWebhookSecret(f.engine, tenantId)).current;
      },
    });
    let answered: string;
    try {
      answered = (await rotateWebhookSecret(lossy.engine, tenantId)).current;
    } finally {
      lossy.destroy();
    }
    expect(lossy.injected.count).toBe(1);
    if (other === undefined) throw new Error("the other rotation did not run");
    const stored = await readWebhookSecrets(f.engine, tenantId);
    // Its lost write, the other's, and its own again once it read the other's.
    expect(stored?.version).toBe(before.version + 3);
    expect(stored?.current).toBe(answered);
    expect(answered).not.toBe(other);
    expect(signingSecrets(stored ?? before, f.engine.clock())).toEqual([answered, other]);
  });
});
