import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorSchema } from "../../shared/api/schemas/errors.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import type { Engine } from "../../shared/engine.js";
import { editJob } from "../../shared/jobs/index.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { readQuotaUsage } from "../../shared/storage/tenant-quotas.js";
import { createQuotaFixture, type EngineFixture } from "../support/engine-fixture.js";
import { createTestClients, type TestClients } from "../support/namespace.js";
import { inProcessApi, type Reply } from "./support.js";

/**
 * An edit sent again at the version it was sent at (`Job.lastEdit`), attacked as a client would:
 * bodies that differ only in how they are written, another client's identical edit, a pause in
 * between, an edit by a version that writes no `lastEdit`, and the quota an overtaken repeat
 * reserved and gave back.
 */
const KEY = "edit-repeats-key";
const TENANT = "tenant-edit-repeats";

let f: EngineFixture;
const clients: TestClients[] = [];
beforeAll(async () => {
  f = await createQuotaFixture();
});
afterAll(async () => {
  for (const made of clients) made.destroy();
  await f.destroy();
});

/** The API over `engine` for TENANT (its admin); a string `body` is sent raw. */
const apiOver = (engine: Engine) => inProcessApi(engine, { key: KEY, tenant: TENANT, admin: true });

const call = (...args: Parameters<ReturnType<typeof apiOver>>) => apiOver(f.engine)(...args);
const patch = (jobId: string, body: unknown, version: number) =>
  call("PATCH", `/jobs/${jobId}`, { body, headers: { "If-Match": `"${version}"` } });
const inMinutes = (minutes: number) => new Date(Date.now() + minutes * 60_000).toISOString();

async function created(body: Record<string, unknown>) {
  const reply = await call("POST", "/jobs", { body });
  expect(reply.status, reply.text).toBe(201);
  return JobSchema.parse(reply.body);
}

describe("PATCH /jobs/{id} sent again", () => {
  it("written otherwise (keys reordered, other whitespace): the same edit, 200 with the job and an ETag its body's version", async () => {
    const job = await created({ type: "noop", name: "order", schedule: { runAt: inMinutes(600) } });
    const first = await patch(job.id, '{"name":"reordered","priority":"low"}', 1);
    expect(first.status, first.text).toBe(200);
    const written = await getJob(f.engine, job.id);

    const retried = await patch(job.id, '{\n  "priority": "low",\n  "name": "reordered"\n}', 1);
    expect(retried.status, retried.text).toBe(200);
    const answered = JobSchema.parse(retried.body);
    expect(retried.headers.get("etag")).toBe(`"${answered.version}"`);
    expect(answered).toMatchObject({ name: "reordered", priority: "low", version: 2 });
    expect(await getJob(f.engine, job.id)).toEqual(written);
  });

  it("by another client with the same body at the same version: 200 as the first's repeat, the job edited once", async () => {
    const job = await created({
      type: "noop",
      name: "shared",
      schedule: { runAt: inMinutes(600) },
    });
    const change = { name: "both asked for this" };
    const [one, other] = await Promise.all([patch(job.id, change, 1), patch(job.id, change, 1)]);
    expect([one.status, other.status]).toEqual([200, 200]);
    expect(one.headers.get("etag")).toBe('"2"');
    expect(other.headers.get("etag")).toBe('"2"');
    expect((await getJob(f.engine, job.id))?.version).toBe(2);
  });

  it("an edit that changed nothing, sent again: 200 at the version it wrote", async () => {
    const job = await created({ type: "noop", name: "same", schedule: { runAt: inMinutes(600) } });
    expect((await patch(job.id, { name: "same" }, 1)).status).toBe(200);
    const retried = await patch(job.id, { name: "same" }, 1);
    expect(retried.status, retried.text).toBe(200);
    expect(retried.headers.get("etag")).toBe('"2"');
    expect((await getJob(f.engine, job.id))?.version).toBe(2);
  });

  it("after a pause (which leaves the version): 200 with the job paused, its ETag its version", async () => {
    const job = await created({
      type: "noop",
      name: "paused",
      schedule: { runAt: inMinutes(600) },
    });
    expect((await patch(job.id, { name: "then paused" }, 1)).status).toBe(200);
    expect((await call("POST", `/jobs/${job.id}/pause`, { body: {} })).status).toBe(200);
    const retried = await patch(job.id, { name: "then paused" }, 1);
    expect(retried.status, retried.text).toBe(200);
    const answered = JobSchema.parse(retried.body);
    expect(answered).toMatchObject({ status: "paused", name: "then paused", version: 2 });
    expect(retried.headers.get("etag")).toBe('"2"');
  });

  it("after an edit by a version that writes no lastEdit (a deploy, a rollback): the stale mark answers no repeat", async () => {
    const job = await created({ type: "noop", name: "mixed", schedule: { runAt: inMinutes(600) } });
    expect((await patch(job.id, { name: "new code" }, 1)).status).toBe(200);
    // The older version's edit: no requestHash, so it leaves the mark of the edit before it.
    await editJob(f.engine, TENANT, job.id, 2, { name: "old code" });
    const stale = await getJob(f.engine, job.id);
    expect(stale).toMatchObject({ version: 3, lastEdit: { from: 1 } });

    const first = await patch(job.id, { name: "new code" }, 1);
    expect(first.status, first.text).toBe(412);
    const older = await patch(job.id, { name: "old code" }, 2);
    expect(older.status, older.text).toBe(412);
    expect(ErrorSchema.parse(older.body).error.code).toBe("version_mismatch");
    expect(await getJob(f.engine, job.id)).toEqual(stale);
  });

  it("overtaken by its first attempt at its write, under a runsPerMinute limit: the schedule's share reserved once", async () => {
    const quotas = await call("PUT", `/tenants/${TENANT}/quotas`, {
      body: { runsPerMinute: 100_000, activeJobs: 1_000 },
    });
    expect(quotas.status, quotas.text).toBe(200);
    const hourly = { cron: "0 * * * *", timezone: "UTC" };
    const everyFiveSeconds = { schedule: { every: "PT5S", startAt: "2026-01-01T00:00:00.000Z" } };
    const twin = await created({ type: "noop", name: "twin", schedule: hourly });
    const raced = await created({ type: "noop", name: "raced", schedule: hourly });
    const usage = async () => (await readQuotaUsage(f.engine, TENANT))?.runsPerMinute ?? 0;

    // What one edit of that schedule reserves, edited once with nothing racing it.
    const before = await usage();
    expect((await patch(twin.id, everyFiveSeconds, 1)).status).toBe(200);
    const once = (await usage()) - before;
    expect(once).toBeGreaterThan(0);

    // The repeat reads the job at version 1 and reserves its share; its first attempt commits
    // before the repeat's transaction, which then fails, gives its share back and finds it written.
    const overtaking = createTestClients();
    clients.push(overtaking);
    let first: Reply | undefined;
    overtaking.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (
          first === undefined &&
          context.commandName === "TransactWriteItemsCommand" &&
          JSON.stringify(args.input).includes(`JOB#${raced.id}`)
        )
          first = await patch(raced.id, everyFiveSeconds, 1);
        return next(args);
      },
      { step: "initialize", name: "firstAttemptCommitsBeforeTheRepeatsWrite" },
    );
    const start = await usage();
    const retried = await apiOver({ ...f.engine, doc: overtaking.doc })(
      "PATCH",
      `/jobs/${raced.id}`,
      { body: everyFiveSeconds, headers: { "If-Match": '"1"' } },
    );
    expect(first?.status, first?.text).toBe(200);
    expect(retried.status, retried.text).toBe(200);
    expect(retried.headers.get("etag")).toBe('"2"');
    expect((await usage()) - start).toBe(once);
  });

  it("sent while its first attempt, holding its share, is still being written, at the tenant's runsPerMinute limit: the 403 (Known limits), the first's edit stands", async () => {
    const tenant = "tenant-edit-repeats-full";
    const every = (seconds: number) => ({
      schedule: { every: `PT${seconds}S`, startAt: "2026-01-01T00:00:00.000Z" },
    });
    const send = (engine: Engine, method: string, path: string, body: unknown, ifMatch = "") =>
      inProcessApi(engine, { key: KEY, tenant, admin: true })(method, path, {
        body,
        headers: ifMatch ? { "If-Match": ifMatch } : {},
      });
    const made = await send(f.engine, "POST", "/jobs", {
      type: "noop",
      name: "full",
      schedule: { cron: "0 * * * *", timezone: "UTC" },
    });
    expect(made.status, made.text).toBe(201);
    const jobId = JobSchema.parse(made.body).id;
    // Room for the edit (every 10 s: 6 runs a minute, 5 more than hourly) once.
    const set = await send(f.engine, "PUT", `/tenants/${tenant}/quotas`, { runsPerMinute: 6 });
    expect(set.status, set.text).toBe(200);
    // A create over the limit recounts the tenant: for 5 s a refusal is answered from the usage.
    const over = await send(f.engine, "POST", "/jobs", { type: "noop", ...every(1) });
    expect(over.status, over.text).toBe(403);

    // The first attempt reserves its share and stalls before its write; its repeat comes meanwhile.
    let release = () => {};
    const stalled = new Promise<void>((resolve) => {
      release = resolve;
    });
    let reachedWrite = () => {};
    const atWrite = new Promise<void>((resolve) => {
      reachedWrite = resolve;
    });
    const slow = createTestClients();
    clients.push(slow);
    slow.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (
          context.commandName === "TransactWriteItemsCommand" &&
          JSON.stringify(args.input).includes(`JOB#${jobId}`)
        ) {
          reachedWrite();
          await stalled;
        }
        return next(args);
      },
      { step: "initialize", name: "firstAttemptStallsBeforeItsWrite" },
    );
    const edit = every(10);
    const first = send({ ...f.engine, doc: slow.doc }, "PATCH", `/jobs/${jobId}`, edit, '"1"');
    await atWrite;
    const retried = await send(f.engine, "PATCH", `/jobs/${jobId}`, edit, '"1"');
    release();
    expect(retried.status, retried.text).toBe(403);
    expect(ErrorSchema.parse(retried.body).error.code).toBe("quota_exceeded");
    const written = await first;
    expect(written.status, written.text).toBe(200);
    // The job read shows the edit: a repeat of it now is answered as the first attempt was.
    const again = await send(f.engine, "PATCH", `/jobs/${jobId}`, edit, '"1"');
    expect(again.status, again.text).toBe(200);
    expect(JobSchema.parse(again.body)).toMatchObject({ version: 2, schedule: edit.schedule });
  });
});
