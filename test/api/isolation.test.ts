import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchResultsSchema, JobPageSchema, JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema, RunSchema } from "../../shared/api/schemas/runs.js";
import { newJobId, parseRunId, runId } from "../../shared/keys.js";
import { runKey } from "../../shared/storage/runs.js";
import { hourHalfADayAway } from "../support/time-of-day.js";
import {
  type ApiHarness,
  deadRunVia,
  expectError,
  KEY_A,
  KEY_B,
  laterJob,
  type Reply,
  recordStorageRequests,
  startApi,
} from "./support.js";

/**
 * Tenant B, holding a valid key of its own, tries everything on tenant A's
 * job, runs and dead letters. Every attempt must look exactly like asking for
 * something that does not exist (404, never 403), and A's data must not change.
 */
let api: ApiHarness;
let jobA: string;
let runA: string;
let deadRunA: string;
let deadJobA: string;
let batchJobA: string;

/**
 * 11 to 12 hours from now in Berlin: A's daily occurrence never falls due, and is never claimed
 * inside the lookahead, while the file runs (at 06:00 it ran at 05:00 UTC once, a second run of
 * A's job beside the one the test triggers).
 */
const halfADayAway = hourHalfADayAway("Europe/Berlin");

beforeAll(async () => {
  // The caller's quota override is read once per cache time: kept for the whole file, no
  // request's storage reads include it, so two requests' reads can be compared.
  api = await startApi({ settings: { quotaCacheMs: 3_600_000 } });
  const created = await api.call("POST", "/jobs", {
    key: KEY_A,
    body: laterJob({
      name: "a-secret",
      schedule: { cron: `0 ${halfADayAway} * * *`, timezone: "Europe/Berlin" },
    }),
    headers: { "Idempotency-Key": "shared-key" },
  });
  jobA = JobSchema.parse(created.body).id;
  runA = RunSchema.parse(
    (
      await api.call("POST", `/jobs/${jobA}/trigger`, {
        key: KEY_A,
        headers: { "Idempotency-Key": "shared-key" },
      })
    ).body,
  ).runId;
  batchJobA = batchedJob(
    await api.call("POST", "/jobs:batch", {
      key: KEY_A,
      body: { jobs: [laterJob({ idempotencyKey: "shared-batch-key" })] },
    }),
  );
  deadJobA = (await deadRunVia(api, KEY_A)).jobId;
  const dead = RunPageSchema.parse((await api.call("GET", "/dead-letters", { key: KEY_A })).body);
  deadRunA = dead.items[0]?.runId ?? "";
  expect(deadRunA).not.toBe("");
});
afterAll(() => api.close());

const asB = (
  method: string,
  path: string,
  options: { body?: unknown; headers?: Record<string, string> } = {},
) => api.call(method, path, { key: KEY_B, ...options });

describe("tenant B against tenant A's data", () => {
  it("cannot see A's job, its runs, or its preview: 404 like a missing job", async () => {
    const missing = await asB("GET", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ");
    const hidden = await asB("GET", `/jobs/${jobA}`);
    expectError(hidden, 404, { code: "not_found" });
    expect(hidden.text.replaceAll(jobA, "ID")).toBe(
      missing.text.replaceAll("01ZZZZZZZZZZZZZZZZZZZZZZZZ", "ID"),
    );
    expectError(await asB("GET", `/jobs/${jobA}/runs`), 404);
    expectError(await asB("GET", `/jobs/${jobA}/runs/${runA}`), 404);
    expectError(await asB("GET", `/jobs/${jobA}/preview`), 404);
  });

  it("cannot list A's jobs or dead letters", async () => {
    const jobs = JobPageSchema.parse((await asB("GET", "/jobs?limit=100")).body);
    expect(jobs.items).toEqual([]);
    const dead = RunPageSchema.parse((await asB("GET", "/dead-letters")).body);
    expect(dead.items).toEqual([]);
  });

  it("cannot use A's cursors to read A's pages", async () => {
    await api.call("POST", "/jobs", { key: KEY_A, body: laterJob() });
    const pageA = JobPageSchema.parse(
      (await api.call("GET", "/jobs?limit=1", { key: KEY_A })).body,
    );
    expect(pageA.nextCursor).not.toBeNull();
    expectError(await asB("GET", `/jobs?cursor=${pageA.nextCursor}`), 400, { field: "cursor" });
    const runsA = RunPageSchema.parse(
      (await api.call("GET", `/jobs/${jobA}/runs?limit=1`, { key: KEY_A })).body,
    );
    expect(runsA.items).toHaveLength(1);
    const forged = Buffer.from(
      JSON.stringify({ deadPk: "DEAD#tenant-a", deadSk: "x", pk: `JOB#${deadJobA}`, sk: "RUN#x" }),
    ).toString("base64url");
    expectError(await asB("GET", `/dead-letters?cursor=${forged}`), 400, { field: "cursor" });
  });

  it("cannot edit, pause, resume, cancel or trigger A's job", async () => {
    expectError(
      await asB("PATCH", `/jobs/${jobA}`, {
        body: { name: "mine" },
        headers: { "If-Match": '"1"' },
      }),
      404,
    );
    expectError(await asB("PATCH", `/jobs/${jobA}`, { body: { name: "mine" } }), 404);
    for (const action of ["pause", "resume", "cancel", "trigger"]) {
      expectError(await asB("POST", `/jobs/${jobA}/${action}`), 404);
    }
  });

  it("cannot delete A's job, nor read the history of A's deleted job", async () => {
    expectError(await asB("DELETE", `/jobs/${jobA}`), 404);
    const doomed = JobSchema.parse(
      (await api.call("POST", "/jobs", { key: KEY_A, body: laterJob() })).body,
    ).id;
    const doomedRun = RunSchema.parse(
      (await api.call("POST", `/jobs/${doomed}/trigger`, { key: KEY_A })).body,
    ).runId;
    expect((await api.call("DELETE", `/jobs/${doomed}`, { key: KEY_A })).status).toBe(204);
    const ownHistory = RunPageSchema.parse(
      (await api.call("GET", `/jobs/${doomed}/runs`, { key: KEY_A })).body,
    );
    expect(ownHistory.items.map((r) => r.runId)).toEqual([doomedRun]);
    const missing = await asB("GET", "/jobs/01ZZZZZZZZZZZZZZZZZZZZZZZZ/runs");
    const hidden = await asB("GET", `/jobs/${doomed}/runs`);
    expectError(hidden, 404, { code: "not_found" });
    expect(hidden.text.replaceAll(doomed, "ID")).toBe(
      missing.text.replaceAll("01ZZZZZZZZZZZZZZZZZZZZZZZZ", "ID"),
    );
    expectError(await asB("GET", `/jobs/${doomed}/runs/${doomedRun}`), 404);
    expectError(await asB("DELETE", `/jobs/${doomed}`), 404);
  });

  it("cannot replay A's dead letters", async () => {
    expectError(await asB("POST", `/dead-letters/${deadRunA}/replay`), 404);
    const dead = RunPageSchema.parse((await api.call("GET", "/dead-letters", { key: KEY_A })).body);
    expect(dead.items.map((r) => r.runId)).toContain(deadRunA);
  });

  it("its idempotency keys are its own: with A's keys B creates, batches and triggers its own", async () => {
    const reply = await asB("POST", "/jobs", {
      body: laterJob(),
      headers: { "Idempotency-Key": "shared-key" },
    });
    expect(reply.status).toBe(201);
    const ownJob = JobSchema.parse(reply.body).id;
    expect(ownJob).not.toBe(jobA);
    const batched = await asB("POST", "/jobs:batch", {
      body: { jobs: [laterJob({ idempotencyKey: "shared-batch-key" })] },
    });
    expect(BatchResultsSchema.parse(batched.body).results[0]?.status).toBe(201);
    expect(batchedJob(batched)).not.toBe(batchJobA);
    // A's trigger of its job took this key too: B's trigger of its own job queues B's run.
    const triggered = await asB("POST", `/jobs/${ownJob}/trigger`, {
      headers: { "Idempotency-Key": "shared-key" },
    });
    expect(triggered.status, triggered.text).toBe(202);
    expect(RunSchema.parse(triggered.body).jobId).toBe(ownJob);
  });

  it("left A's job exactly as it was", async () => {
    const reply = await api.call("GET", `/jobs/${jobA}`, { key: KEY_A });
    expect(JobSchema.parse(reply.body)).toMatchObject({
      name: "a-secret",
      status: "active",
      version: 1,
    });
    const runs = RunPageSchema.parse(
      (await api.call("GET", `/jobs/${jobA}/runs`, { key: KEY_A })).body,
    );
    expect(runs.items.map((r) => r.runId)).toEqual([runA]);
    const stored = (await api.fixture.jobs()).filter((j) => j.tenantId === "tenant-b");
    expect(stored).toHaveLength(2);
  });
});

/**
 * Every route that takes a job or run id with tenant credentials, called by B with one of A's ids
 * and with an id of the same shape that nothing has: the status, headers and body (each id written
 * as a placeholder) must be the same, and so must the storage requests made to answer (a request
 * more is time B can measure). The run-token routes are compared so in long-jobs.test.ts.
 */
describe("tenant B's view of A's ids is the view of ids that do not exist", () => {
  type Target = { readonly job: string; readonly run: string };
  type Route = readonly [
    name: string,
    method: string,
    path: (target: Target) => string,
    options?: { body?: unknown; headers?: Record<string, string> },
  ];
  let ownJob: string;
  const routes: Route[] = [
    ["read", "GET", ({ job }) => `/jobs/${job}`],
    [
      "edit",
      "PATCH",
      ({ job }) => `/jobs/${job}`,
      { body: { name: "x" }, headers: { "If-Match": '"1"' } },
    ],
    ["edit without If-Match", "PATCH", ({ job }) => `/jobs/${job}`, { body: { name: "x" } }],
    ["pause", "POST", ({ job }) => `/jobs/${job}/pause`, { body: { running: "cancel" } }],
    ["resume", "POST", ({ job }) => `/jobs/${job}/resume`],
    ["cancel", "POST", ({ job }) => `/jobs/${job}/cancel`],
    [
      "trigger",
      "POST",
      ({ job }) => `/jobs/${job}/trigger`,
      { headers: { "Idempotency-Key": "k" } },
    ],
    ["preview", "GET", ({ job }) => `/jobs/${job}/preview`],
    ["runs", "GET", ({ job }) => `/jobs/${job}/runs`],
    ["runs by status", "GET", ({ job }) => `/jobs/${job}/runs?status=queued`],
    [
      "runs from a cursor",
      "GET",
      ({ job, run }) => `/jobs/${job}/runs?limit=1&cursor=${runsCursor(job, run)}`,
    ],
    ["run", "GET", ({ job, run }) => `/jobs/${job}/runs/${run}`],
    ["run cancel", "POST", ({ job, run }) => `/jobs/${job}/runs/${run}/cancel`],
    ["run under B's job", "GET", ({ run }) => `/jobs/${ownJob}/runs/${run}`],
    ["run cancel under B's job", "POST", ({ run }) => `/jobs/${ownJob}/runs/${run}/cancel`],
    [
      "replay",
      "POST",
      ({ run }) => `/dead-letters/${run}/replay`,
      { headers: { "Idempotency-Key": "k" } },
    ],
    ["delete", "DELETE", ({ job }) => `/jobs/${job}`],
  ];
  const requests: string[] = [];
  let stopRecording = () => {};

  beforeAll(async () => {
    ownJob = JobSchema.parse((await asB("POST", "/jobs", { body: laterJob() })).body).id;
    stopRecording = recordStorageRequests(api.fixture.engine, requests);
  });
  afterAll(() => stopRecording());

  const runsCursor = (job: string, run: string) => {
    const { scheduledFor, attempt } = refOf(run);
    return Buffer.from(JSON.stringify(runKey(job, scheduledFor, attempt))).toString("base64url");
  };

  /** What B sees of one request, with the target's ids as placeholders. */
  async function seen(route: Route, target: Target) {
    const [, method, path, options] = route;
    requests.length = 0;
    const reply = await asB(method, path(target), options);
    const headers = [...reply.headers].filter(([name]) => name !== "date");
    const blind = (text: string) =>
      text.replaceAll(target.run, "RUN").replaceAll(target.job, "JOB");
    return { status: reply.status, headers, body: blind(reply.text), requests: [...requests] };
  }

  /** A's ids of each kind: a live job, a deleted job whose runs remain, a dead letter. */
  async function targetsOfA(): Promise<Record<string, Target>> {
    const doomed = JobSchema.parse((await api.call("POST", "/jobs", { body: laterJob() })).body).id;
    const doomedRun = RunSchema.parse(
      (await api.call("POST", `/jobs/${doomed}/trigger`)).body,
    ).runId;
    expect((await api.call("DELETE", `/jobs/${doomed}`)).status).toBe(204);
    return {
      live: { job: jobA, run: runA },
      deleted: { job: doomed, run: doomedRun },
      dead: { job: deadJobA, run: deadRunA },
    };
  }

  it("answers and reads alike for every route, and changes none of A's items", async () => {
    const targets = await targetsOfA();
    const before = await itemsOfA();
    const differences: string[] = [];
    for (const [kind, target] of Object.entries(targets)) {
      const { scheduledFor, attempt } = refOf(target.run);
      const missingJob = newJobId(new Date());
      const missing = { job: missingJob, run: runId(missingJob, scheduledFor, attempt) };
      for (const route of routes) {
        const hidden = await seen(route, target);
        expect(hidden.status, `${kind} ${route[0]}`).toBeGreaterThanOrEqual(400);
        expect(hidden.requests, `${kind} ${route[0]}`).not.toEqual([]);
        const absent = await seen(route, missing);
        if (JSON.stringify(hidden) !== JSON.stringify(absent)) {
          differences.push(`${kind}, ${route[0]}: ${JSON.stringify({ hidden, absent })}`);
        }
      }
    }
    expect(differences).toEqual([]);
    expect(await itemsOfA()).toEqual(before);
  });

  it("refuses A's job as an upstream as it refuses an unknown id: create, batch, edit", async () => {
    const { version } = JobSchema.parse((await asB("GET", `/jobs/${ownJob}`)).body);
    const dependentOn = (job: string) => ({
      type: "noop",
      schedule: { after: { jobs: [ownJob, job] } },
    });
    const before = await itemsOfA();
    const missing = newJobId(new Date());
    for (const [name, send] of [
      ["create", (job: string) => asB("POST", "/jobs", { body: dependentOn(job) })],
      [
        "batch",
        (job: string) => asB("POST", "/jobs:batch", { body: { jobs: [dependentOn(job)] } }),
      ],
      [
        "edit",
        (job: string) =>
          asB("PATCH", `/jobs/${ownJob}`, {
            body: { schedule: { after: { jobs: [job] } } },
            headers: { "If-Match": `"${version}"` },
          }),
      ],
    ] as const) {
      const answers = [];
      for (const job of [jobA, missing]) {
        requests.length = 0;
        const reply = await send(job);
        answers.push({
          status: reply.status,
          body: reply.text.replaceAll(job, "JOB"),
          requests: [...requests],
        });
      }
      expect(answers[0]?.body, name).toContain("no job JOB of this tenant");
      expect(answers[0], name).toEqual(answers[1]);
    }
    expect(JobSchema.parse((await asB("GET", `/jobs/${ownJob}`)).body).version).toBe(version);
    expect(await itemsOfA()).toEqual(before);
  });
});

/**
 * A job id in a path that no job can have (too long for a key, holding a key's separator, not
 * ASCII) is a 404 like any unknown job on every route, and reaches no storage request: a key
 * DynamoDB refuses would be a 500, and a `#` in one would name a key of another shape.
 */
describe("a job id no job can have", () => {
  const inputs: string[] = [];
  beforeAll(() => {
    api.fixture.engine.doc.middlewareStack.add(
      (next) => (args) => {
        inputs.push(JSON.stringify(args.input));
        return next(args);
      },
      { step: "initialize", name: "recordInputs" },
    );
  });
  afterAll(() => {
    api.fixture.engine.doc.middlewareStack.remove("recordInputs");
  });

  const badIds = [
    ["past 64 characters", "a".repeat(3000)],
    ["holding a '#'", "a#b"],
    ["holding an '@'", "a@b"],
    ["not ASCII", "é"],
  ] as const;
  const routes = [
    ["GET", (id: string) => `/jobs/${id}`],
    ["POST", (id: string) => `/jobs/${id}/pause`],
    ["POST", (id: string) => `/jobs/${id}/resume`],
    ["POST", (id: string) => `/jobs/${id}/cancel`],
    ["POST", (id: string) => `/jobs/${id}/trigger`],
    ["DELETE", (id: string) => `/jobs/${id}`],
    ["GET", (id: string) => `/jobs/${id}/preview`],
    ["GET", (id: string) => `/jobs/${id}/runs`],
    ["GET", (id: string) => `/jobs/${id}/runs/${runA}`],
    ["POST", (id: string) => `/jobs/${id}/runs/${runA}/cancel`],
  ] as const;

  it.each(badIds)("(%s) is a 404 on every route and no storage key", async (_name, badId) => {
    const answers: string[] = [];
    for (const [method, path] of routes) {
      inputs.length = 0;
      const reply = await api.call(method, path(encodeURIComponent(badId)));
      answers.push(`${method} ${path("ID")}: ${reply.status} ${reply.text.slice(0, 120)}`);
      const reached = inputs.filter((input) => input.includes(JSON.stringify(badId).slice(1, -1)));
      if (reached.length > 0) answers.push(`${method} ${path("ID")} reached storage`);
    }
    expect(answers.filter((a) => !/: 404 /.test(a) || a.endsWith("reached storage"))).toEqual([]);
  });
});

/**
 * The parts of the tenant surface the sweeps above leave out: a schedule preview naming A's job
 * as an upstream, every operation of the OpenAPI document called without good credentials, and
 * the admin routes called by a tenant that is not an admin. Each compares what the caller sees and
 * the storage requests made to answer.
 */
describe("the rest of the surface", () => {
  const surfaceRequests: string[] = [];
  let stopRecording = () => {};
  let deletedA: string;
  beforeAll(async () => {
    deletedA = JobSchema.parse(
      (await api.call("POST", "/jobs", { key: KEY_A, body: laterJob() })).body,
    ).id;
    await api.call("POST", `/jobs/${deletedA}/trigger`, { key: KEY_A });
    expect((await api.call("DELETE", `/jobs/${deletedA}`, { key: KEY_A })).status).toBe(204);
    // B's quota override is cached already (quotaCacheMs): no request below reads it and another not.
    await asB("GET", "/quotas");
    stopRecording = recordStorageRequests(api.fixture.engine, surfaceRequests);
  });
  afterAll(() => stopRecording());

  /** What the caller sees of a request, and the storage requests made to answer it. */
  async function seenAsked(
    method: string,
    path: string,
    options: { key?: string | null; body?: unknown; headers?: Record<string, string> },
    blind: (text: string) => string = (text) => text,
  ) {
    surfaceRequests.length = 0;
    const reply = await api.call(method, path, options);
    const headers = [...reply.headers].filter(([name]) => name !== "date");
    return {
      status: reply.status,
      headers,
      body: blind(reply.text),
      requests: [...surfaceRequests],
    };
  }

  describe("POST /schedules/preview naming another tenant's job as an upstream", () => {
    it("answers and reads as for a job that does not exist, live or deleted", async () => {
      const preview = (id: string) =>
        seenAsked(
          "POST",
          "/schedules/preview",
          { key: KEY_B, body: { schedule: { after: { jobs: [id] } } } },
          (text) => text.replaceAll(id, "ID"),
        );
      const absent = await preview(newJobId(new Date()));
      expect(absent.status).toBe(400);
      expect(await preview(jobA)).toEqual(absent);
      expect(await preview(deletedA)).toEqual(absent);
    });
  });

  describe("every operation without good credentials", () => {
    /** The operations of the OpenAPI document, their path parameters filled with A's ids. */
    async function operations(): Promise<[string, string][]> {
      const document = (await api.call("GET", "/openapi.json", { key: null })).body as {
        paths: Record<string, Record<string, { security?: Record<string, unknown>[] }>>;
      };
      const out: [string, string][] = [];
      for (const [template, methods] of Object.entries(document.paths)) {
        for (const [method, operation] of Object.entries(methods)) {
          const security = operation.security ?? [];
          // The public documents take none; the run-token routes take the run token (long-jobs.test.ts).
          if (security.length === 0 || security.some((s) => "runToken" in s)) continue;
          const path = template
            .replace("{id}", jobA)
            .replace("{runId}", runA)
            .replace("{tenantId}", "tenant-a");
          out.push([method.toUpperCase(), path]);
        }
      }
      return out;
    }

    const credentials: [string, Record<string, string>][] = [
      ["none", {}],
      ["another scheme", { Authorization: `Basic ${Buffer.from(`${KEY_A}:`).toString("base64")}` }],
      ["the key in another case", { Authorization: `Bearer ${KEY_A.toUpperCase()}` }],
      ["the key with a character more", { Authorization: `Bearer ${KEY_A}x` }],
      ["two keys in one header", { Authorization: `Bearer ${KEY_A}, Bearer ${KEY_B}` }],
      ["the key as a query-like token", { Authorization: `Bearer key=${KEY_A}` }],
      ["a tenant header", { "X-Tenant-Id": "tenant-a", "X-Scheduler-Tenant": "tenant-a" }],
    ];

    it("is a 401 that reads and writes nothing, whatever the credentials are short of", async () => {
      const ops = await operations();
      expect(ops.length).toBeGreaterThan(15);
      const wrong: string[] = [];
      for (const [name, headers] of credentials) {
        for (const [method, path] of ops) {
          const body = method === "GET" || method === "DELETE" ? undefined : {};
          const answer = await seenAsked(method, path, {
            key: null,
            headers,
            ...(body ? { body } : {}),
          });
          if (answer.status !== 401 || answer.requests.length > 0)
            wrong.push(
              `${name}: ${method} ${path} → ${answer.status} ${answer.requests.join(",")}`,
            );
        }
      }
      expect(wrong).toEqual([]);
    });
  });

  describe("the admin routes called by a tenant that is not an admin", () => {
    it("are the same 403 for an existing tenant and an unknown one, and read nothing", async () => {
      const override = { activeJobs: 3 };
      const adminRoute = async (method: string, tenant: string) =>
        seenAsked(
          method,
          `/tenants/${encodeURIComponent(tenant)}/quotas`,
          { key: KEY_B, ...(method === "PUT" ? { body: override } : {}) },
          (text) => text.replaceAll(tenant, "TENANT"),
        );
      for (const method of ["GET", "PUT"]) {
        const unknown = await adminRoute(method, "tenant-nobody");
        expect(unknown.status).toBe(403);
        expect(unknown.requests).toEqual([]);
        expect(await adminRoute(method, "tenant-a"), method).toEqual(unknown);
        expect(await adminRoute(method, "tenant-b"), method).toEqual(unknown);
      }
      // A's override is as it was: none.
      const quotasOfA = await api.call("GET", "/quotas", { key: KEY_A });
      expect((quotasOfA.body as { override: unknown }).override).toEqual({});
    });
  });
});

/** The id of the one job a batch created. */
function batchedJob(reply: Reply): string {
  const [result] = BatchResultsSchema.parse(reply.body).results;
  if (result?.job === undefined) throw new Error(`no job created: ${reply.text}`);
  return result.job.id;
}

function refOf(run: string) {
  const ref = parseRunId(run);
  if (ref === null) throw new Error(`not a run id: ${run}`);
  return ref;
}

/** A's jobs, runs and due entries as stored. */
async function itemsOfA() {
  const mine = <T extends { tenantId: string }>(items: T[]) =>
    items.filter((i) => i.tenantId === "tenant-a");
  return {
    jobs: mine(await api.fixture.jobs()),
    runs: mine(await api.fixture.runs()),
    due: mine(await api.fixture.dueEntries()),
  };
}
