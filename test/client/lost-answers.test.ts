import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SchedulerClient } from "../../client/index.js";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { JOB_TYPES } from "../api/support.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";

/**
 * The typed client against the real API app (on DynamoDB Local) when the answer to a request the
 * API applied never reaches it: API Gateway answers 504 (the function ran out of time after its
 * write), or the connection breaks. The client sends the request again as it was, and the API's
 * answer to that repeat (docs/api.md "Retrying requests") is what the caller gets.
 */
const KEY = "lost-answers-key";
const TENANT = "tenant-lost-answers";

let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture();
});
afterAll(async () => {
  await f.destroy();
});

/** How the answer of the request that `loses` picks is lost once the app has applied it. */
type Loss = "gateway timeout" | "connection reset";

/**
 * A client whose requests the API app answers in-process; the first request `loses` picks is
 * applied by the app, and its answer replaced by `loss`.
 */
function clientLosing(loss: Loss, loses: (request: Request) => boolean) {
  const app = createApiApp({
    engine: f.engine,
    jobTypes: JOB_TYPES,
    authenticate: bearerAuthenticator(new Map([[KEY, TENANT]])),
    adminTenants: [],
  });
  const sent: string[] = [];
  let lost = false;
  const appFetch: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    sent.push(`${request.method} ${new URL(request.url).pathname}`);
    const answer = await app.request(request);
    if (lost || !loses(request)) return answer;
    lost = true;
    await answer.body?.cancel();
    if (loss === "gateway timeout")
      return Response.json({ message: "Endpoint request timed out" }, { status: 504 });
    throw new TypeError("fetch failed", {
      cause: Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }),
    });
  };
  const client = new SchedulerClient({
    baseUrl: "http://api.test",
    auth: { kind: "bearer", key: KEY },
    fetch: appFetch,
    retry: { sleep: async () => undefined },
  });
  return { client, sent, wasLost: () => lost };
}

const inMinutes = (minutes: number) => new Date(Date.now() + minutes * 60_000).toISOString();

describe("an edit whose first answer was lost", () => {
  for (const loss of ["gateway timeout", "connection reset"] as const) {
    it(`(${loss}): the client's retry ends in 200 with the job it edited, edited once`, async () => {
      const { client, sent, wasLost } = clientLosing(loss, (r) => r.method === "PATCH");
      const handle = await client.jobs.create({
        type: "noop",
        name: "before",
        schedule: { runAt: inMinutes(600) },
      });
      const edited = await handle.edit({ name: "after" });
      expect(wasLost()).toBe(true);
      expect(edited).toMatchObject({ id: handle.id, name: "after", version: 2 });
      expect(handle.job?.version).toBe(2);
      expect(sent.filter((s) => s.startsWith("PATCH"))).toEqual(
        Array(2).fill(`PATCH /jobs/${handle.id}`),
      );
      // Written once: the repeat answered the first attempt's edit and wrote nothing.
      expect((await getJob(f.engine, handle.id))?.version).toBe(2);
      // The handle edits on from the version the retry answered.
      expect((await handle.edit({ name: "later" })).version).toBe(3);
    });
  }
});

describe("a pause and a run's cancel whose first answer was lost", () => {
  it("the retry answers the job paused, and the run cancelled", async () => {
    const { client, wasLost } = clientLosing("gateway timeout", (r) => r.url.endsWith("/pause"));
    const handle = await client.jobs.create({
      type: "noop",
      schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
    });
    expect((await handle.pause()).status).toBe("paused");
    expect(wasLost()).toBe(true);

    const runCancel = clientLosing("connection reset", (r) => r.url.endsWith("/cancel"));
    const other = await runCancel.client.jobs.create({
      type: "noop",
      schedule: { runAt: inMinutes(600) },
    });
    const run = await other.trigger();
    expect((await runCancel.client.runs.cancel(other.id, run.runId)).status).toBe("cancelled");
    expect(runCancel.wasLost()).toBe(true);
  });
});

/** The jobs of the test's tenant, each once, by the listing. */
async function jobIdsOf(client: SchedulerClient): Promise<string[]> {
  const ids: string[] = [];
  for await (const job of client.jobs.list()) ids.push(job.id);
  return ids;
}

describe("a create or trigger without a key whose first answer was lost", () => {
  for (const loss of ["gateway timeout", "connection reset"] as const) {
    it(`(${loss}): the create is retried under the key the client made for it, and makes one job`, async () => {
      const { client, sent, wasLost } = clientLosing(
        loss,
        (r) => r.method === "POST" && r.url.endsWith("/jobs"),
      );
      const before = await jobIdsOf(client);
      const handle = await client.jobs.create({
        type: "noop",
        name: `lost create ${loss}`,
        schedule: { runAt: inMinutes(600) },
      });
      expect(wasLost()).toBe(true);
      expect(sent.filter((s) => s === "POST /jobs")).toHaveLength(2);
      // The retry answered the job the lost attempt made (200): made by this call all the same.
      expect(handle.created).toBe(true);
      const made = (await jobIdsOf(client)).filter((id) => !before.includes(id));
      expect(made).toEqual([handle.id]);
    });

    it(`(${loss}): the trigger is retried under the key the client made for it, and queues one run`, async () => {
      const { client, sent, wasLost } = clientLosing(loss, (r) => r.url.endsWith("/trigger"));
      const handle = await client.jobs.create({
        type: "noop",
        schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
      });
      const run = await handle.trigger();
      expect(wasLost()).toBe(true);
      expect(sent.filter((s) => s.endsWith("/trigger"))).toHaveLength(2);
      const runs: string[] = [];
      for await (const listed of handle.runs()) runs.push(listed.runId);
      expect(runs).toEqual([run.runId]);
    });
  }

  it("a batch whose every job carries a key is retried and makes each job once", async () => {
    const { client, sent, wasLost } = clientLosing("gateway timeout", (r) =>
      r.url.endsWith("/jobs:batch"),
    );
    const before = await jobIdsOf(client);
    const keys = ["lost-batch-a", "lost-batch-b"];
    const results = await client.jobs.createBatch(
      keys.map((idempotencyKey) => ({
        type: "noop",
        schedule: { runAt: inMinutes(600) },
        idempotencyKey,
      })),
    );
    expect(wasLost()).toBe(true);
    expect(sent.filter((s) => s === "POST /jobs:batch")).toHaveLength(2);
    expect(results.map((r) => r.status)).toEqual([200, 200]);
    const made = (await jobIdsOf(client)).filter((id) => !before.includes(id));
    expect(made.sort()).toEqual(results.map((r) => r.job?.id).sort());
  });
});
