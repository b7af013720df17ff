import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { leaveBatchWritesUnprocessed, strayWaits } from "../support/faults.js";
import { createTestClients, type TestClients } from "../support/namespace.js";
import { inProcessApi } from "./support.js";

/**
 * A job created due inside the fast-path window has its first runs put with BatchWriteItem before
 * the job is written (`putRunsUnconditionally`). Under throttling DynamoDB answers such a request
 * with every item unprocessed; once they stay so past the last round, the create fails as
 * throttling, as a BatchGetItem whose keys stay unread does: a retryable 503 busy, not a 500.
 */
const KEY = "fast-path-throttled-key";
const TENANT = "tenant-fast-path-throttled";

describe("POST /jobs of a job due now while DynamoDB leaves its runs' BatchWriteItem unprocessed", () => {
  let f: EngineFixture;
  let clients: TestClients;
  beforeAll(async () => {
    f = await createEngineFixture();
    clients = createTestClients();
  });
  afterAll(async () => {
    clients.destroy();
    await f.destroy();
  });

  it("answers a retryable 503 busy and writes no job", async () => {
    const unwritten = leaveBatchWritesUnprocessed(clients.doc);
    const call = inProcessApi({ ...f.engine, doc: clients.doc }, { key: KEY, tenant: TENANT });
    const reply = await call("POST", "/jobs", {
      body: { type: "noop", schedule: { runAt: new Date().toISOString() } },
    });
    expect(unwritten.requests()).toBe(6);
    expect(reply.status, reply.text).toBe(503);
    expect(reply.body).toMatchObject({ error: { code: "busy" } });
    expect(reply.headers.get("Retry-After")).toBe("1");
    expect((await f.jobs()).filter((job) => job.tenantId === TENANT)).toEqual([]);
  }, 20_000);

  it("sends the runs again 50 ms after the first round, twice as long after each later one", async () => {
    // Clients of its own: the case above leaves its clients' batch writes unprocessed for good.
    const own = createTestClients();
    try {
      const unwritten = leaveBatchWritesUnprocessed(own.doc);
      const call = inProcessApi({ ...f.engine, doc: own.doc }, { key: KEY, tenant: TENANT });
      const reply = await call("POST", "/jobs", {
        body: { type: "noop", schedule: { runAt: new Date().toISOString() } },
      });
      expect(reply.status, reply.text).toBe(503);
      expect(strayWaits(unwritten.waits(), [50, 100, 200, 400, 800])).toEqual([]);
    } finally {
      own.destroy();
    }
  }, 20_000);
});
