import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorSchema } from "../../shared/api/schemas/errors.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema, RunSchema } from "../../shared/api/schemas/runs.js";
import type { Engine } from "../../shared/engine.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { type FaultyEngine, withFaults, withLostAnswers } from "../support/faults.js";
import { createTestClients, type TestClients } from "../support/namespace.js";
import { inProcessApi, type Reply } from "./support.js";

/**
 * A careful client sends a mutating request again when told to retry (a 503 `busy` with
 * Retry-After, a 5xx) or when its answer never came (a timeout, a dropped connection). Whatever
 * the first attempt wrote, the retry answers what that request did or the state it left, never a
 * 4xx the client's retry loop takes for a failure.
 */
const KEY = "retried-requests-key";
const TENANT = "tenant-retried";

let f: EngineFixture;
const faults: FaultyEngine[] = [];
const clients: TestClients[] = [];
beforeAll(async () => {
  f = await createEngineFixture();
});
afterAll(async () => {
  for (const faulty of faults) faulty.destroy();
  for (const made of clients) made.destroy();
  await f.destroy();
});

/** The API over `engine`, for tenant TENANT (its admin). */
const apiOver = (engine: Engine) => inProcessApi(engine, { key: KEY, tenant: TENANT, admin: true });

const call = (...args: Parameters<ReturnType<typeof apiOver>>) => apiOver(f.engine)(...args);

/** The API over an engine whose every UpdateItem of the jobs table meets another transaction. */
function apiWithJobWritesContended() {
  const faulty = withFaults(f.engine, {
    operation: "UpdateItem",
    times: Number.MAX_SAFE_INTEGER,
    match: (input) => input.TableName === f.engine.tables.jobs,
  });
  faults.push(faulty);
  return { call: apiOver(faulty.engine), injected: faulty.injected };
}

const inMinutes = (minutes: number) => new Date(Date.now() + minutes * 60_000).toISOString();

async function created(body: Record<string, unknown>) {
  const reply = await call("POST", "/jobs", { body });
  expect(reply.status, reply.text).toBe(201);
  return JobSchema.parse(reply.body);
}

async function runsOf(jobId: string) {
  const reply = await call("GET", `/jobs/${jobId}/runs`);
  expect(reply.status, reply.text).toBe(200);
  return RunPageSchema.parse(reply.body).items;
}

describe("POST /jobs/{id}/runs/{runId}/cancel sent again", () => {
  it("after a 503 that came once its run was cancelled: 200 with the run cancelled, the job's write made, then nothing written", async () => {
    // A one-off due within the fast path's window: its run is queued at once.
    const job = await created({ type: "noop", schedule: { runAt: inMinutes(1) } });
    const [queued] = await runsOf(job.id);
    expect(queued?.status).toBe("queued");
    const path = `/jobs/${job.id}/runs/${queued?.runId}/cancel`;

    // The run's write goes through; its job's (the one-off's completion) meets contention throughout.
    const contended = apiWithJobWritesContended();
    const first = await contended.call("POST", path);
    expect(first.status, first.text).toBe(503);
    expect(ErrorSchema.parse(first.body).error.code).toBe("busy");
    expect(first.headers.get("retry-after")).toBe("1");
    expect(contended.injected.count).toBeGreaterThan(0);
    const [cancelled] = await runsOf(job.id);
    expect(cancelled).toMatchObject({ status: "cancelled", cancelledBy: "api" });
    expect((await getJob(f.engine, job.id))?.status).toBe("ACTIVE");

    // The client's retry: the cancel's answer, and the write its first attempt did not make.
    const retried = await call("POST", path);
    expect(retried.status, retried.text).toBe(200);
    expect(RunSchema.parse(retried.body)).toEqual(cancelled);
    const completed = await getJob(f.engine, job.id);
    expect(completed?.status).toBe("COMPLETED");

    // Once more: the same answer, and nothing written.
    const again = await call("POST", path);
    expect(again.status, again.text).toBe(200);
    expect(RunSchema.parse(again.body)).toEqual(cancelled);
    expect(await getJob(f.engine, job.id)).toEqual(completed);
    expect(await runsOf(job.id)).toEqual([cancelled]);
  });
});

describe("PATCH /jobs/{id} sent again at the version it was sent at", () => {
  const patch = (jobId: string, body: unknown, version: number) =>
    call("PATCH", `/jobs/${jobId}`, { body, headers: { "If-Match": `"${version}"` } });

  it("after its answer was lost: 200 with the job it edited and its ETag, nothing written again", async () => {
    const job = await created({
      type: "noop",
      name: "before",
      schedule: { runAt: inMinutes(600) },
    });
    const rename = { name: "after" };
    // The first attempt is written; its answer never reaches the client.
    expect((await patch(job.id, rename, 1)).status).toBe(200);
    const written = await getJob(f.engine, job.id);
    expect(written?.version).toBe(2);

    const retried = await patch(job.id, rename, 1);
    expect(retried.status, retried.text).toBe(200);
    expect(retried.headers.get("etag")).toBe('"2"');
    expect(JobSchema.parse(retried.body)).toMatchObject({ name: "after", version: 2 });
    expect(await getJob(f.engine, job.id)).toEqual(written);
  });

  it("after every answer of its transaction was lost (a 500 past its commit): 200 with the job it edited", async () => {
    const job = await created({ type: "noop", name: "lossy", schedule: { runAt: inMinutes(600) } });
    const lossy = withLostAnswers(f.engine, {
      operation: "TransactWriteItems",
      times: Number.MAX_SAFE_INTEGER,
      match: (input) => JSON.stringify(input).includes("renamed after a lost answer"),
    });
    faults.push(lossy);
    const rename = { name: "renamed after a lost answer" };
    const first = await apiOver(lossy.engine)("PATCH", `/jobs/${job.id}`, {
      body: rename,
      headers: { "If-Match": '"1"' },
    });
    expect(first.status, first.text).toBe(500);
    expect(lossy.injected.count).toBeGreaterThan(0);
    const written = await getJob(f.engine, job.id);
    expect(written).toMatchObject({ name: rename.name, version: 2 });

    const retried = await patch(job.id, rename, 1);
    expect(retried.status, retried.text).toBe(200);
    expect(retried.headers.get("etag")).toBe('"2"');
    expect(JobSchema.parse(retried.body)).toMatchObject({ name: rename.name, version: 2 });
    expect(await getJob(f.engine, job.id)).toEqual(written);
  });

  it("sent again while its first attempt is still being written: 200 with the job that attempt wrote", async () => {
    const job = await created({
      type: "noop",
      name: "overtaken",
      schedule: { runAt: inMinutes(600) },
    });
    const rename = { name: "written by the first attempt" };
    // The retry reads the job at version 1 (the route's read); the first attempt commits before
    // the retry's edit reads it again to write.
    const overtaking = createTestClients();
    clients.push(overtaking);
    let reads = 0;
    let first: Reply | undefined;
    overtaking.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { Key?: { pk?: unknown } };
        if (context.commandName === "GetItemCommand" && input.Key?.pk === `JOB#${job.id}`) {
          reads++;
          if (reads === 2) first = await patch(job.id, rename, 1);
        }
        return next(args);
      },
      { step: "initialize", name: "firstAttemptCommitsMeanwhile" },
    );
    const retried = await apiOver({ ...f.engine, doc: overtaking.doc })(
      "PATCH",
      `/jobs/${job.id}`,
      {
        body: rename,
        headers: { "If-Match": '"1"' },
      },
    );
    expect(first?.status, first?.text).toBe(200);
    expect(retried.status, retried.text).toBe(200);
    expect(retried.headers.get("etag")).toBe('"2"');
    expect(JobSchema.parse(retried.body)).toMatchObject({ name: rename.name, version: 2 });
    expect((await getJob(f.engine, job.id))?.version).toBe(2);
  });

  it("another body at that version, or the same once another edit followed: 412 as before", async () => {
    const job = await created({
      type: "noop",
      name: "before",
      schedule: { runAt: inMinutes(600) },
    });
    expect((await patch(job.id, { name: "first" }, 1)).status).toBe(200);
    const other = await patch(job.id, { name: "other" }, 1);
    expect(other.status, other.text).toBe(412);
    expect(ErrorSchema.parse(other.body).error.code).toBe("version_mismatch");

    expect((await patch(job.id, { name: "second" }, 2)).status).toBe(200);
    const stale = await patch(job.id, { name: "first" }, 1);
    expect(stale.status, stale.text).toBe(412);
    expect((await getJob(f.engine, job.id))?.name).toBe("second");
  });
});

describe("PUT /tenants/{tenantId}/quotas sent again", () => {
  it("after every answer of its write was lost (a 500): 200 with the override it set, as a read shows it", async () => {
    const path = "/tenants/tenant-quota-retried/quotas";
    const override = { activeJobs: 7, runsPerMinute: 70 };
    const lossy = withLostAnswers(f.engine, {
      operation: "PutItem",
      times: Number.MAX_SAFE_INTEGER,
      match: (input) => JSON.stringify(input.Item ?? {}).includes("tenant-quota-retried"),
    });
    faults.push(lossy);
    const first = await apiOver(lossy.engine)("PUT", path, { body: override });
    expect(first.status, first.text).toBe(500);
    expect(lossy.injected.count).toBeGreaterThan(0);

    const retried = await call("PUT", path, { body: override });
    expect(retried.status, retried.text).toBe(200);
    const read = await call("GET", path);
    expect(read.status, read.text).toBe(200);
    expect(retried.body).toEqual(read.body);
    expect(read.body).toMatchObject({ override });
  });
});
