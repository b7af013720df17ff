import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { ErrorSchema } from "../../shared/api/schemas/errors.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { jobKey } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { JOB_TYPES } from "./support.js";

/** `"schedule": {"after": …}` over HTTP: create, the upstream's dependents, the run's trigger, the 400s. */
const KEYS = new Map([
  ["key-a", "tenant-after-a"],
  ["key-b", "tenant-after-b"],
]);
let f: EngineFixture;
let app: ReturnType<typeof createApiApp>;

beforeAll(async () => {
  f = await createEngineFixture();
  app = createApiApp({
    engine: f.engine,
    jobTypes: JOB_TYPES,
    authenticate: bearerAuthenticator(KEYS),
  });
});
afterAll(() => f.destroy());

async function send(
  method: string,
  path: string,
  body?: unknown,
  options: { key?: string; headers?: Record<string, string> } = {},
) {
  const response = await app.request(path, {
    method,
    headers: {
      Authorization: `Bearer ${options.key ?? "key-a"}`,
      "Content-Type": "application/json",
      ...options.headers,
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  return { status: response.status, text, json: JSON.parse(text) as unknown };
}

async function created(schedule: unknown, key = "key-a") {
  const answer = await send("POST", "/jobs", { type: "noop", schedule }, { key });
  expect(answer.status, answer.text).toBe(201);
  return JobSchema.parse(answer.json);
}

function errorOf(answer: { status: number; json: unknown }, status: number) {
  expect(answer.status).toBe(status);
  return ErrorSchema.parse(answer.json).error;
}

describe("jobs with an after schedule", () => {
  it("creates a dependent, lists it on the upstream, and shows the upstream run on the dependent's run", async () => {
    const upstream = await created({ runAt: new Date().toISOString() });
    const dependent = await created({ after: { jobs: [upstream.id] } });
    expect(dependent.schedule).toEqual({ after: { jobs: [upstream.id], on: "success" } });
    expect(dependent.status).toBe("active");
    expect(dependent.nextRunAt).toBeNull();
    expect(dependent.dependents).toEqual([]);
    const read = JobSchema.parse((await send("GET", `/jobs/${upstream.id}`)).json);
    expect(read.dependents).toEqual([dependent.id]);

    const deps = f.workerDeps("api-worker");
    await f.process(deps, await f.nextDelivery(f.engine.queues.normal, upstream.id));
    const upstreamRuns = RunPageSchema.parse((await send("GET", `/jobs/${upstream.id}/runs`)).json);
    const [upstreamRun] = upstreamRuns.items;
    const runs = RunPageSchema.parse((await send("GET", `/jobs/${dependent.id}/runs`)).json);
    expect(runs.items).toHaveLength(1);
    expect(runs.items[0]?.trigger).toEqual({
      jobId: upstream.id,
      runId: upstreamRun?.runId,
      scheduledFor: upstreamRun?.scheduledFor,
    });
    expect(upstreamRun?.trigger).toBeNull();
  });

  it.each([
    ["no jobs", { after: { jobs: [] } }, "schedule.after.jobs"],
    [
      "a bad on",
      { after: { jobs: ["01JD0000000000000000000000"], on: "always" } },
      "schedule.after.on",
    ],
    ["an unknown job", { after: { jobs: ["01JD0000000000000000000000"] } }, "schedule.after.jobs"],
  ])("400 naming the field: %s", async (_name, schedule, field) => {
    const error = errorOf(await send("POST", "/jobs", { type: "noop", schedule }), 400);
    expect(error.field).toBe(field);
  });

  it("400 for another tenant's upstream, which does not learn of it", async () => {
    const theirs = await created({ cron: "0 0 1 1 *", timezone: "UTC" }, "key-b");
    const error = errorOf(
      await send("POST", "/jobs", { type: "noop", schedule: { after: { jobs: [theirs.id] } } }),
      400,
    );
    expect(error.field).toBe("schedule.after.jobs");
    const read = JobSchema.parse(
      (await send("GET", `/jobs/${theirs.id}`, undefined, { key: "key-b" })).json,
    );
    expect(read.dependents).toEqual([]);
  });

  it("400 for one id where the list of them belongs: says a list is wanted, not that the id is too long", async () => {
    const upstream = await created({ cron: "0 0 1 1 *", timezone: "UTC" });
    const schedule = { after: { jobs: upstream.id, on: "success" } };
    for (const [path, body] of [
      ["/jobs", { type: "noop", schedule }],
      ["/schedules/preview", { schedule }],
    ] as const) {
      const error = errorOf(await send("POST", path, body), 400);
      expect(error.field, path).toBe("schedule.after.jobs");
      expect(error.message, path).toBe(
        `schedule.after.jobs: must be a list of 1 to 20 job ids; got a string`,
      );
    }
  });

  it("POST /schedules/preview refuses the upstreams create refuses, in the same answer, and tells no other tenant's job from none", async () => {
    const theirs = await created({ cron: "0 0 1 1 *", timezone: "UTC" }, "key-b");
    const unknown = "01JD0000000000000000000000";
    for (const id of [unknown, theirs.id]) {
      const schedule = { after: { jobs: [id] } };
      const preview = await send("POST", "/schedules/preview", { schedule });
      const create = await send("POST", "/jobs", { type: "noop", schedule });
      const error = errorOf(preview, 400);
      expect(error.field).toBe("schedule.after.jobs");
      expect(error.message).toBe(`schedule.after.jobs: no job ${id} of this tenant`);
      expect(preview.json).toEqual(create.json);
    }
    const mine = await created({ cron: "0 0 1 1 *", timezone: "UTC" });
    const fine = await send("POST", "/schedules/preview", {
      schedule: { after: { jobs: [mine.id] } },
    });
    expect(fine.status, fine.text).toBe(200);
    expect(fine.json).toMatchObject({ occurrences: [] });
  });

  it("400 for a cancelled upstream (it runs no more) at create, preview and an edit that links it; a dependent linked before its cancel stays editable", async () => {
    const yearly = { cron: "0 0 1 1 *", timezone: "UTC" };
    const [cancelled, other] = [await created(yearly), await created(yearly)];
    const before = await created({ after: { jobs: [cancelled.id] } });
    const cancel = await send("POST", `/jobs/${cancelled.id}/cancel`);
    expect(cancel.status, cancel.text).toBe(200);
    const schedule = { after: { jobs: [cancelled.id] } };
    const create = await send("POST", "/jobs", { type: "noop", schedule });
    const error = errorOf(create, 400);
    expect(error.field).toBe("schedule.after.jobs");
    expect(error.message).toContain(`job ${cancelled.id} is cancelled`);
    expect((await send("POST", "/schedules/preview", { schedule })).json).toEqual(create.json);
    const mine = await created({ after: { jobs: [other.id] } });
    const edit = await send(
      "PATCH",
      `/jobs/${mine.id}`,
      { schedule: { after: { jobs: [other.id, cancelled.id] } } },
      { headers: { "If-Match": String(mine.version) } },
    );
    expect(errorOf(edit, 400).field).toBe("schedule.after.jobs");
    // Nothing was linked: the cancelled job lists only the dependent it had before its cancel.
    const read = JobSchema.parse((await send("GET", `/jobs/${cancelled.id}`)).json);
    expect(read.dependents).toEqual([before.id]);
    const kept = await send(
      "PATCH",
      `/jobs/${before.id}`,
      { schedule: { after: { jobs: [cancelled.id, other.id] } } },
      { headers: { "If-Match": String(before.version) } },
    );
    expect(kept.status, kept.text).toBe(200);
  });

  /** Creates one noop job a schedule in one batch request; their ids. */
  const batch = async (schedules: unknown[]) => {
    const answer = await send("POST", "/jobs:batch", {
      jobs: schedules.map((schedule) => ({ type: "noop", schedule })),
    });
    const { results } = answer.json as { results: { status: number; job?: { id: string } }[] };
    expect(results.map((r) => r.status)).toEqual(schedules.map(() => 201));
    return results.map((r) => r.job?.id ?? "");
  };

  it("a graph above too wide to check is refused after about as many reads as the check may hold, not one for each job it names", async () => {
    const yearly = { cron: "0 0 1 1 *", timezone: "UTC" };
    const base: string[] = [];
    for (let i = 0; i < 16; i++)
      base.push(...(await batch(Array.from({ length: 25 }, () => yearly))));
    // 20 upstreams, each after 20 of the 400: the level above them names 400 jobs, the check holds 80.
    const upstreams = await batch(
      Array.from({ length: 20 }, (_, i) => ({ after: { jobs: base.slice(20 * i, 20 * i + 20) } })),
    );
    const name = "countJobReads";
    let reads = 0;
    f.engine.doc.middlewareStack.add(
      (next) => async (args) => {
        const key = (args.input as { Key?: { pk?: unknown } }).Key;
        if (String(key?.pk).startsWith("JOB#")) reads++;
        return next(args);
      },
      { step: "initialize", name },
    );
    try {
      const schedule = { after: { jobs: upstreams } };
      const create = await send("POST", "/jobs", { type: "noop", schedule });
      expect(errorOf(create, 400).message).toContain("more than 80");
    } finally {
      f.engine.doc.middlewareStack.remove(name);
    }
    expect(reads).toBeLessThanOrEqual(81);
  }, 60_000);

  it("POST /schedules/preview answers as create for a deleted upstream, upstreams with more than 80 jobs above, and a repeated id, and writes nothing", async () => {
    const gone = await created({ cron: "0 0 1 1 *", timezone: "UTC" });
    const deleted = await app.request(`/jobs/${gone.id}`, {
      method: "DELETE",
      headers: { Authorization: "Bearer key-a" },
    });
    expect(deleted.status).toBe(204);
    // 20 upstreams, each after 4 of 80 others: the walk above them reads 100 jobs, past its 80.
    const yearly = { cron: "0 0 1 1 *", timezone: "UTC" };
    const base = [
      ...(await batch(Array.from({ length: 25 }, () => yearly))),
      ...(await batch(Array.from({ length: 25 }, () => yearly))),
      ...(await batch(Array.from({ length: 25 }, () => yearly))),
      ...(await batch(Array.from({ length: 5 }, () => yearly))),
    ];
    const wide = await batch(
      Array.from({ length: 20 }, (_, i) => ({ after: { jobs: base.slice(4 * i, 4 * i + 4) } })),
    );
    const listed = async () => (await send("GET", "/jobs?limit=100")).text;
    for (const jobs of [[gone.id], wide, [wide[0] ?? "", gone.id, gone.id]]) {
      const schedule = { after: { jobs } };
      const before = await listed();
      const preview = await send("POST", "/schedules/preview", { schedule });
      expect(await listed()).toBe(before);
      const create = await send("POST", "/jobs", { type: "noop", schedule });
      expect(errorOf(preview, 400).field).toBe("schedule.after.jobs");
      expect(preview.json).toEqual(create.json);
    }
  });

  it("400 naming the cycle when an edit would close one", async () => {
    const a = await created({ cron: "0 0 1 1 *", timezone: "UTC" });
    const b = await created({ after: { jobs: [a.id], on: "completion" } });
    const answer = await send(
      "PATCH",
      `/jobs/${a.id}`,
      { schedule: { after: { jobs: [b.id] } } },
      { headers: { "If-Match": `"${a.version}"` } },
    );
    const error = errorOf(answer, 400);
    expect(error.field).toBe("schedule.after.jobs");
    expect(error.message).toContain(`${a.id} → ${b.id} → ${a.id}`);
    const unchanged = JobSchema.parse((await send("GET", `/jobs/${a.id}`)).json);
    expect(unchanged.version).toBe(a.version);
    expect(unchanged.schedule).toEqual({ cron: "0 0 1 1 *", timezone: "UTC" });
  });
  it("400 for an upstream that already has 1,000 jobs after it; one already after it stays editable", async () => {
    const upstream = await created({ cron: "0 0 1 1 *", timezone: "UTC" });
    const linked = await created({ after: { jobs: [upstream.id] } });
    const other = await created({ cron: "0 0 1 1 *", timezone: "UTC" });
    // 999 more dependents: each id is 26 bytes on the upstream's item, which DynamoDB holds to
    // 400 KB. Unbounded, the item filled, and every later write of the upstream failed (a 500).
    const fake = Array.from(
      { length: 999 },
      (_, i) => `01ZZZZZZZZZZZZZZZZZZ${String(i).padStart(6, "0")}`,
    );
    for (let i = 0; i < fake.length; i += 500) {
      await f.engine.doc.send(
        new UpdateCommand({
          TableName: f.engine.tables.jobs,
          Key: jobKey(upstream.id),
          UpdateExpression: "ADD dependents :d",
          ExpressionAttributeValues: { ":d": new Set(fake.slice(i, i + 500)) },
        }),
      );
    }
    const before = (await send("GET", "/jobs?limit=100")).text;

    const refused = errorOf(
      await send("POST", "/jobs", { type: "noop", schedule: { after: { jobs: [upstream.id] } } }),
      400,
    );
    expect(refused.field).toBe("schedule.after.jobs");
    expect(refused.message).toMatch(/1,?000 jobs after it/);
    const edited = errorOf(
      await send(
        "PATCH",
        `/jobs/${other.id}`,
        { schedule: { after: { jobs: [upstream.id] } } },
        { headers: { "If-Match": String(other.version) } },
      ),
      400,
    );
    expect(edited.field).toBe("schedule.after.jobs");
    const previewed = await send("POST", "/schedules/preview", {
      schedule: { after: { jobs: [upstream.id] } },
    });
    expect(errorOf(previewed, 400)).toEqual(refused);
    // Nothing written: no new job, the upstream still has its 1,000, the other job its schedule.
    expect((await send("GET", "/jobs?limit=100")).text).toBe(before);
    const read = JobSchema.parse((await send("GET", `/jobs/${upstream.id}`)).json);
    expect(read.dependents).toHaveLength(1_000);

    const renamed = await send(
      "PATCH",
      `/jobs/${linked.id}`,
      { name: "still after it" },
      { headers: { "If-Match": String(linked.version) } },
    );
    expect(renamed.status, renamed.text).toBe(200);
  });

  it("moves a job from 20 upstreams to 20 others with 60 jobs above them: one transaction within DynamoDB's 100", async () => {
    const yearly = { cron: "0 0 1 1 *", timezone: "UTC" };
    const old = await batch(Array.from({ length: 20 }, () => yearly));
    const top = [
      ...(await batch(Array.from({ length: 25 }, () => yearly))),
      ...(await batch(Array.from({ length: 25 }, () => yearly))),
      ...(await batch(Array.from({ length: 10 }, () => yearly))),
    ];
    // Each new upstream runs after three of the 60: the walk above them reads 80 jobs, its limit.
    const fresh = await batch(
      Array.from({ length: 20 }, (_, i) => ({ after: { jobs: top.slice(3 * i, 3 * i + 3) } })),
    );
    const job = await created({ after: { jobs: old } });
    const moved = await send(
      "PATCH",
      `/jobs/${job.id}`,
      { schedule: { after: { jobs: fresh } } },
      { headers: { "If-Match": String(job.version) } },
    );
    expect(moved.status, moved.text).toBe(200);
    expect(JobSchema.parse(moved.json).schedule).toEqual({
      after: { jobs: [...fresh].sort(), on: "success" },
    });
    const [left, joined] = await Promise.all([
      send("GET", `/jobs/${old[0]}`),
      send("GET", `/jobs/${fresh[0]}`),
    ]);
    expect(JobSchema.parse(left.json).dependents).toEqual([]);
    expect(JobSchema.parse(joined.json).dependents).toEqual([job.id]);
  });
});
