import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdempotencyConflictError } from "../../shared/errors.js";
import { createJob, idempotentCreate, type NewJob, requestHash } from "../../shared/jobs/index.js";
import { idempotencyKey } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

const HOUR = 3_600_000;

/**
 * During a deploy the previous version's functions answer requests beside today's, and a rollback
 * puts them back alone: a client's retry of a create may reach either. The previous version
 * compares the record's `requestHash` with the hash of the body as sent; today's create hashes
 * the job the body normalizes to. A record today's create writes must still answer the previous
 * version's check for the same body, and today's check for it spelled either way.
 */
describe("a create's idempotency record across versions", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  const oneOff = (): NewJob =>
    testJob({ schedule: { runAt: new Date(Date.now() + HOUR).toISOString() } });
  const storedRecord = async (key: string) =>
    (
      await f.engine.doc.send(
        new GetCommand({
          TableName: f.engine.tables.jobs,
          Key: idempotencyKey("tenant-a", key),
          ConsistentRead: true,
        }),
      )
    ).Item;

  it("the previous version's check (requestHash against the body as sent) holds for a record today's create writes", async () => {
    const job = oneOff();
    const body = { name: job.name, type: job.type, schedule: job.schedule, payload: job.payload };
    await createJob(f.engine, job, { idempotency: idempotentCreate("across-deploy", job, body) });
    const record = await storedRecord("across-deploy");
    // The previous version's replayOf: `record.requestHash !== requestHash(body)` is a 409.
    expect(record?.requestHash).toBe(requestHash(body));
  });

  it("today's create answers a repeat spelled either way, whichever hash the record holds", async () => {
    const job = oneOff();
    const body = { name: job.name, type: job.type, schedule: job.schedule, payload: job.payload };
    const { job: first } = await createJob(f.engine, job, {
      idempotency: idempotentCreate("spelled-either-way", job, body),
    });
    const spelled = { ...body, priority: "normal" };
    const repeat = await createJob(f.engine, job, {
      idempotency: idempotentCreate("spelled-either-way", job, spelled),
    });
    expect(repeat).toMatchObject({ created: false, job: { jobId: first.jobId } });

    // A record as this version wrote it before: the normalized hash in requestHash.
    const { earlierHash: _asSent, ...normalizedOnly } = idempotentCreate(
      "normalized-only",
      job,
      body,
    );
    const { job: second } = await createJob(f.engine, job, { idempotency: normalizedOnly });
    const again = await createJob(f.engine, job, {
      idempotency: idempotentCreate("normalized-only", job, spelled),
    });
    expect(again).toMatchObject({ created: false, job: { jobId: second.jobId } });

    const other = { ...job, priority: "high" as const };
    await expect(
      createJob(f.engine, other, {
        idempotency: idempotentCreate("spelled-either-way", other, { ...body, priority: "high" }),
      }),
    ).rejects.toBeInstanceOf(IdempotencyConflictError);
  });
});
