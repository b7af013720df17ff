import { describe, expect, it } from "vitest";
import { CallCounter } from "../../bench/aws-counter.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { useBilledApi } from "../support/request-count.js";

/**
 * What an Idempotency-Key costs a create and a trigger in billed DynamoDB units (the client sends
 * one by default, docs/scaling.md): the API app on DynamoDB Local, counted by the requests bench's
 * counter (bench/aws-counter.ts), which books a transaction as AWS bills it (2 units per item and
 * KB, an index unit per index key a put carries) where DynamoDB Local reports one item per table.
 * The counts are docs/architecture.md's "Create" and trigger flows, item by item.
 */
const KEY = "key-write-units-key";

const counter = new CallCounter();
const { api } = useBilledApi(counter, { key: KEY, tenant: "tenant-key-units" });

const oneOff = (minutes: number) => ({
  type: "noop",
  schedule: { runAt: new Date(Date.now() + minutes * 60_000).toISOString() },
});

let keys = 0;
const keyHeader = (withKey: boolean): Record<string, string> =>
  withKey ? { "Idempotency-Key": `key-units-${++keys}` } : {};

/** The billed write and read units of `send`'s DynamoDB calls, by operation. */
async function unitsOf(send: () => Promise<{ status: number }>, status: number) {
  // The tenant's quota override, which the API reads once and caches for 10 s: read by an
  // uncounted create just before, so it is in no count.
  expect((await api("POST", "/jobs", { body: oneOff(600) })).status).toBe(201);
  counter.reset();
  counter.phase = "request";
  expect((await send()).status).toBe(status);
  counter.phase = null;
  const ops = Object.entries(counter.snapshot().request ?? {});
  const sum = (reads: boolean) =>
    ops
      .filter(
        ([op]) => ["GetItem", "Query", "BatchGetItem"].includes(op.split(".")[1] ?? "") === reads,
      )
      .reduce((total, [, count]) => total + count.capacityUnits, 0);
  const calls = Object.fromEntries(ops.map(([op, count]) => [op, count.calls]));
  return { write: sum(false), read: sum(true), calls };
}

describe("a one-off's create, with and without an Idempotency-Key", () => {
  it("due soon (the fast path): the run's write and the job's plain put (4 units) vs the run's, the record's read and a transaction of job and record (8, 1 read)", async () => {
    const create = (withKey: boolean) => () =>
      api("POST", "/jobs", { body: oneOff(1), headers: keyHeader(withKey) });
    // The claimed run is written first either way (BatchWriteItem: 1 unit, 1 for its index).
    expect(await unitsOf(create(false), 201)).toEqual({
      write: 4,
      read: 0,
      calls: { "DynamoDB.BatchWriteItem": 1, "DynamoDB.PutItem": 1 },
    });
    // The record is read first, so a repeat writes no runs; the transaction bills 2 an item.
    expect(await unitsOf(create(true), 201)).toEqual({
      write: 8,
      read: 1,
      calls: {
        "DynamoDB.GetItem": 1,
        "DynamoDB.BatchWriteItem": 1,
        "DynamoDB.TransactWriteItems": 1,
      },
    });
  });

  it("due far ahead: two plain puts, entry and job (3 units), vs a transaction of job, entry and record (8)", async () => {
    const create = (withKey: boolean) => () =>
      api("POST", "/jobs", { body: oneOff(600), headers: keyHeader(withKey) });
    expect(await unitsOf(create(false), 201)).toEqual({
      write: 3,
      read: 0,
      calls: { "DynamoDB.PutItem": 2 },
    });
    // No runs to write, so no read first: the transaction's condition on the record decides.
    expect(await unitsOf(create(true), 201)).toEqual({
      write: 8,
      read: 0,
      calls: { "DynamoDB.TransactWriteItems": 1 },
    });
  });
});

describe("a trigger, with and without an Idempotency-Key", () => {
  it("the key adds its record's read and the record's put in the trigger's transaction (2 units)", async () => {
    const job = await api("POST", "/jobs", {
      body: { type: "noop", schedule: { cron: "0 0 1 1 *", timezone: "UTC" } },
    });
    const trigger = (withKey: boolean) => () =>
      api("POST", `/jobs/${JobSchema.parse(job.body).id}/trigger`, { headers: keyHeader(withKey) });
    // Two reads, and a transaction of the run's put (1 index unit) and the job's check.
    expect(await unitsOf(trigger(false), 202)).toEqual({
      write: 6,
      read: 2,
      calls: { "DynamoDB.GetItem": 2, "DynamoDB.TransactWriteItems": 1 },
    });
    expect(await unitsOf(trigger(true), 202)).toEqual({
      write: 8,
      read: 3,
      calls: { "DynamoDB.GetItem": 3, "DynamoDB.TransactWriteItems": 1 },
    });
  });
});
