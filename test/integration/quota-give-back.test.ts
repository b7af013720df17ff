import {
  InternalServerError,
  ProvisionedThroughputExceededException,
} from "@aws-sdk/client-dynamodb";
import { GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import { VersionMismatchError } from "../../shared/errors.js";
import { createJob, editJob, pauseJob } from "../../shared/jobs/index.js";
import { newJobId } from "../../shared/keys.js";
import type { QuotaExceededError } from "../../shared/quotas/limits.js";
import { MAX_CONTENTION_ATTEMPTS } from "../../shared/storage/dynamo-errors.js";
import { shardHighWaterKey } from "../../shared/storage/items.js";
import { giveBackUsage } from "../../shared/storage/quota-give-back.js";
import { readRecountToken } from "../../shared/storage/quota-recount.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { decodeSeenUsage } from "../../shared/storage/seen-usage.js";
import {
  forgetQuotaUsage,
  readQuotaUsage,
  reserveUsage,
  writeQuotaOverride,
  writeRecountedUsage,
} from "../../shared/storage/tenant-quotas.js";
import { ValidationError } from "../../shared/validation.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { withFaults, withLostAnswers } from "../support/faults.js";

/** The tenant's usage item as a recount's claim reads it: counters, `changes` and token. */
async function readSeenUsage(f: EngineFixture, tenant: string) {
  const { Item: item } = await f.engine.doc.send(
    new GetCommand({
      TableName: f.engine.tables.jobs,
      Key: { pk: `QUOTA#${tenant}`, sk: "USAGE" },
      ConsistentRead: true,
    }),
  );
  return item === undefined ? null : decodeSeenUsage(item);
}

const far = () => ({ runAt: new Date(Date.now() + 3_600_000).toISOString() });
const hourly = { cron: "0 * * * *", timezone: "UTC" };

describe("a refused create or edit reserves nothing of the tenant's quotas", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    // Overrides are written here and must apply at once: no cached override.
    f = await createEngineFixture({ settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 0 } });
  });
  afterAll(() => f.destroy());

  /** Runs `during` once, just before the next transaction the engine sends. */
  const beforeNextTransaction = (name: string, during: () => Promise<unknown>) => {
    let ran = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        if (!ran && "TransactItems" in (args.input as object)) {
          ran = true;
          await during();
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    return {
      ran: () => ran,
      remove: () => f.engine.doc.middlewareStack.remove(name),
    };
  };

  it("a create refused with a 400 for its upstreams leaves the usage as it was, and the quota's creates still pass", async () => {
    const tenant = "bad-upstreams";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 3 }, new Date());
    await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }));
    const others = await createJob(f.engine, testJob({ tenantId: "other", schedule: far() }));
    const before = await readQuotaUsage(f.engine, tenant);
    expect(before).toEqual({ activeJobs: 1, runsPerMinute: 0 });

    // More refusals than the quota has room for: each reserving a job would reach it.
    for (let i = 0; i < 4; i++) {
      for (const upstream of [newJobId(new Date()), others.job.jobId]) {
        const refused = await createJob(
          f.engine,
          testJob({ tenantId: tenant, schedule: { after: { jobs: [upstream], on: "success" } } }),
        ).catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(ValidationError);
        expect((refused as ValidationError).issues[0]?.field).toBe("schedule.after.jobs");
        expect(await readQuotaUsage(f.engine, tenant)).toEqual(before);
      }
    }

    for (let i = 0; i < 2; i++) {
      expect(
        (await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }))).created,
      ).toBe(true);
    }
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 3, runsPerMinute: 0 });
    const over = await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() })).catch(
      (e: unknown) => e,
    );
    expect((over as QuotaExceededError).context.quota).toBe("activeJobs");
  });

  it("a repeated create with an idempotency key returns the first job and reserves nothing more", async () => {
    const tenant = "repeats";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 2 }, new Date());
    const input = testJob({ tenantId: tenant, schedule: far() });
    const idempotency = { key: "the-one-job", requestHash: "h1" };
    const first = await createJob(f.engine, input, { idempotency });
    expect(first.created).toBe(true);
    for (let i = 0; i < 4; i++) {
      const repeat = await createJob(f.engine, input, { idempotency });
      expect([repeat.created, repeat.job.jobId]).toEqual([false, first.job.jobId]);
      expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 0 });
    }
    expect(
      (await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }))).created,
    ).toBe(true);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 2, runsPerMinute: 0 });
  });

  it("an edit whose write loses to a pause is planned again and reserves its share once", async () => {
    const tenant = "edit-retried";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 100 }, new Date());
    const { job } = await createJob(f.engine, testJob({ tenantId: tenant, schedule: hourly }));
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 1 });

    const pause = beforeNextTransaction("pauseBeforeEdit", () =>
      pauseJob(f.engine, tenant, job.jobId),
    );
    try {
      // Every two seconds: 30 runs a minute at its peak, 29 more than hourly.
      const edited = await editJob(f.engine, tenant, job.jobId, job.version, {
        schedule: { every: "PT2S" },
      });
      expect([edited.status, edited.version]).toEqual(["PAUSED", 2]);
    } finally {
      pause.remove();
    }
    expect(pause.ran()).toBe(true);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 1, runsPerMinute: 30 });
  });

  it("an edit refused with a 409 because another edit came first gives its share back", async () => {
    const tenant = "edit-refused";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 100 }, new Date());
    const { job } = await createJob(f.engine, testJob({ tenantId: tenant, schedule: hourly }));
    const before = await readQuotaUsage(f.engine, tenant);

    const rename = beforeNextTransaction("renameBeforeEdit", () =>
      editJob(f.engine, tenant, job.jobId, job.version, { name: "renamed first" }),
    );
    try {
      const refused = await editJob(f.engine, tenant, job.jobId, job.version, {
        schedule: { every: "PT2S" },
      }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(VersionMismatchError);
    } finally {
      rename.remove();
    }
    expect(rename.ran()).toBe(true);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(before);
  });

  it("an edit whose shard mark cannot be raised writes nothing and keeps nothing of the tenant's quotas", async () => {
    const tenant = "edit-mark-unwritten";
    await writeQuotaOverride(f.engine, tenant, { runsPerMinute: 100 }, new Date());
    const { job } = await createJob(f.engine, testJob({ tenantId: tenant, schedule: hourly }));
    const before = await readQuotaUsage(f.engine, tenant);
    // A mark of its own: this process has not raised it yet (recordShardCount raises once).
    const faulty = withFaults(
      { ...f.engine, settings: { ...f.engine.settings, maxShardCount: 14 } },
      {
        operation: "UpdateItem",
        times: 1,
        match: (input) => (input.Key as { pk?: unknown } | undefined)?.pk === shardHighWaterKey.pk,
        error: () => new InternalServerError({ message: "Internal server error", $metadata: {} }),
      },
    );
    try {
      const failed = await editJob(faulty.engine, tenant, job.jobId, job.version, {
        schedule: { every: "PT2S" },
      }).catch((e: unknown) => e);
      expect(failed).toBeInstanceOf(InternalServerError);
      expect(faulty.injected.count).toBe(1);
    } finally {
      faulty.destroy();
    }
    expect((await getJob(f.engine, job.jobId))?.version).toBe(job.version);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(before);
  });

  it("a create whose transaction stays in conflict past its retries (503 busy) gives its share back", async () => {
    const tenant = "busy";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 3 }, new Date());
    await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }));
    const before = await readQuotaUsage(f.engine, tenant);
    const faulty = withFaults(f.engine, {
      operation: "TransactWriteItems",
      times: MAX_CONTENTION_ATTEMPTS,
    });
    try {
      const busy = await createJob(faulty.engine, testJob({ tenantId: tenant, schedule: far() }), {
        idempotency: { key: "under-conflict", requestHash: "h1" },
      }).catch((e: unknown) => e);
      expect((busy as Error).name).toBe("TransactionCanceledException");
      expect(faulty.injected.count).toBe(MAX_CONTENTION_ATTEMPTS);
    } finally {
      faulty.destroy();
    }
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(before);
  }, 30_000);

  it("a create whose answer is lost after its transaction was applied answers the job it wrote and keeps its share: the usage never counts less than the jobs", async () => {
    const tenant = "lost-answer";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 3 }, new Date());
    await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }));
    const name = "loseTheAnswer";
    let lost = false;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        const result = await next(args);
        if (!lost && "TransactItems" in (args.input as object)) {
          lost = true;
          throw Object.assign(new Error("socket hang up"), { name: "TimeoutError" });
        }
        return result;
      },
      { step: "initialize", name },
    );
    let written: Awaited<ReturnType<typeof createJob>>;
    try {
      // The job read back after the lost answer says the write was made: the create answers it.
      written = await createJob(f.engine, testJob({ tenantId: tenant, schedule: far() }), {
        idempotency: { key: "answer-lost", requestHash: "h1" },
      });
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect([lost, written.created]).toEqual([true, true]);
    const mine = (await f.jobs()).filter((j) => j.tenantId === tenant);
    expect(mine.map((j) => j.jobId)).toContain(written.job.jobId);
    expect(mine).toHaveLength(2);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 2, runsPerMinute: 0 });
  });
});

describe("giving a reservation back in storage", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const limits = { activeJobs: 10, runsPerMinute: 100 };
  const oneJob = { activeJobs: 1, runsPerMinute: 5 };

  it("takes the share off while no recount has replaced the usage, and nothing once one has", async () => {
    const tenant = "give-back";
    const now = new Date();
    expect(await reserveUsage(f.engine, tenant, oneJob, limits)).toBeNull();
    expect(await writeRecountedUsage(f.engine, tenant, oneJob, null, now)).toBe(true);

    const given = await reserveUsage(f.engine, tenant, oneJob, limits);
    if (given === null) throw new Error("the reservation was refused");
    expect(await readQuotaUsage(f.engine, tenant)).toEqual({ activeJobs: 2, runsPerMinute: 10 });
    expect(await giveBackUsage(f.engine, given)).toBe(true);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(oneJob);

    // A recount meanwhile counted the jobs without the refused one: taking it off again would undercount.
    const recounted = await reserveUsage(f.engine, tenant, oneJob, limits);
    if (recounted === null) throw new Error("the reservation was refused");
    const seen = await readSeenUsage(f, tenant);
    expect(await writeRecountedUsage(f.engine, tenant, oneJob, seen, now)).toBe(true);
    expect(await giveBackUsage(f.engine, recounted)).toBe(false);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(oneJob);

    // Dropped (an override was set): the next reservation recounts, nothing to take off.
    const dropped = await reserveUsage(f.engine, tenant, oneJob, limits);
    if (dropped === null) throw new Error("the reservation was refused");
    await forgetQuotaUsage(f.engine, tenant);
    expect(await giveBackUsage(f.engine, dropped)).toBe(false);
    expect(await readQuotaUsage(f.engine, tenant)).toBeNull();
    // And a recount that wrote it afresh is not the one the reservation was added to.
    expect(await writeRecountedUsage(f.engine, tenant, oneJob, null, now)).toBe(true);
    expect(await giveBackUsage(f.engine, dropped)).toBe(false);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(oneJob);
  });

  it("gives back on a usage item written before recounts were marked, until a recount marks it", async () => {
    const tenant = "unmarked";
    await f.engine.doc.send(
      new PutCommand({
        TableName: f.engine.tables.jobs,
        Item: { pk: `QUOTA#${tenant}`, sk: "USAGE", tenantId: tenant, ...oneJob },
      }),
    );
    const given = await reserveUsage(f.engine, tenant, oneJob, limits);
    expect(given?.recount).toBeNull();
    if (given === null) throw new Error("the reservation was refused");
    expect(await giveBackUsage(f.engine, given)).toBe(true);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(oneJob);

    const again = await reserveUsage(f.engine, tenant, oneJob, limits);
    if (again === null) throw new Error("the reservation was refused");
    const seen = await readSeenUsage(f, tenant);
    expect(await writeRecountedUsage(f.engine, tenant, oneJob, seen, new Date())).toBe(true);
    expect(await giveBackUsage(f.engine, again)).toBe(false);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(oneJob);
  });
  /** A usage at `usage` under a fresh recount token, and a reservation of `oneJob` on top. */
  const reservedOn = async (tenant: string, usage: typeof oneJob) => {
    expect(await writeRecountedUsage(f.engine, tenant, usage, null, new Date())).toBe(true);
    const reservation = await reserveUsage(f.engine, tenant, oneJob, limits);
    if (reservation === null) throw new Error("the reservation was refused");
    return reservation;
  };

  /**
   * Fails the next give-back send as DynamoDB answers it, inside the SDK's retry loop (after the
   * give-back's own guard), once: `refuse` before it reaches DynamoDB, or `lose` its answer after.
   */
  const failNextSend = (how: "refuse" | "lose") => {
    const name = `giveBackSend-${how}`;
    let failed = 0;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = JSON.stringify(args.input);
        if (failed > 0 || context.commandName !== "UpdateItemCommand" || !input.includes(":less_"))
          return next(args);
        failed++;
        if (how === "refuse")
          throw new ProvisionedThroughputExceededException({
            message: "The level of configured provisioned throughput for the table was exceeded",
            $metadata: { httpStatusCode: 400 },
          });
        await next(args);
        throw new InternalServerError({
          message: "answer lost",
          $metadata: { httpStatusCode: 500 },
        });
      },
      { step: "deserialize", name },
    );
    return { failed: () => failed, remove: () => f.engine.doc.middlewareStack.remove(name) };
  };

  it("a give-back DynamoDB refused (throttled) is sent again and takes the share off", async () => {
    const tenant = "give-back-throttled";
    const given = await reservedOn(tenant, oneJob);
    const fault = failNextSend("refuse");
    try {
      expect(await giveBackUsage(f.engine, given)).toBe(true);
    } finally {
      fault.remove();
    }
    expect(fault.failed()).toBe(1);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(oneJob);
  });

  it("a give-back whose answer is lost is not sent again: the share is taken off once, never twice", async () => {
    const tenant = "give-back-answer-lost";
    const given = await reservedOn(tenant, oneJob);
    const fault = failNextSend("lose");
    try {
      await expect(giveBackUsage(f.engine, given)).rejects.toThrow(/may have been applied/);
    } finally {
      fault.remove();
    }
    expect(fault.failed()).toBe(1);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(oneJob);

    // Lost outside the give-back's guard (the whole exchange, as a dropped connection): the same.
    const again = await reserveUsage(f.engine, tenant, oneJob, limits);
    if (again === null) throw new Error("the reservation was refused");
    const lossy = withLostAnswers(f.engine, {
      operation: "UpdateItem",
      times: 1,
      match: (input) => String(input.UpdateExpression).includes(":less_"),
    });
    try {
      await expect(giveBackUsage(lossy.engine, again)).rejects.toThrow(/may have been applied/);
    } finally {
      lossy.destroy();
    }
    expect(lossy.injected.count).toBe(1);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(oneJob);
  });

  it("a give-back that would take a counter below zero takes nothing off", async () => {
    const tenant = "give-back-below-zero";
    // A recount that missed the reserved job (still being written): the usage below its share.
    const given = await reservedOn(tenant, { activeJobs: 0, runsPerMinute: 0 });
    const seen = await readSeenUsage(f, tenant);
    const missed = { activeJobs: 0, runsPerMinute: 2 };
    expect(await writeRecountedUsage(f.engine, tenant, missed, seen, new Date())).toBe(true);
    const token = await readRecountToken(f.engine, tenant);
    expect(await giveBackUsage(f.engine, { ...given, recount: token ?? null })).toBe(false);
    expect(await readQuotaUsage(f.engine, tenant)).toEqual(missed);
  });
});
