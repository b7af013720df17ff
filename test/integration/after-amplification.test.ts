import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkNewDependent } from "../../shared/jobs/dependencies.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import { MAX_LEVELS_BELOW_EDIT } from "../../shared/jobs/path-bound.js";
import { triggerJob } from "../../shared/jobs/trigger.js";
import { newJobId } from "../../shared/keys.js";
import type { Job } from "../../shared/model.js";
import type { ScheduleSpec } from "../../shared/schedule/index.js";
import { MAX_RUNS_PER_RUN_ABOVE } from "../../shared/schedule/parse.js";
import { encodeJob, jobKey } from "../../shared/storage/items.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { ValidationError } from "../../shared/validation.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  storedJob,
  testJob,
} from "../support/engine-fixture.js";
import { putItems } from "../support/seed.js";

/**
 * A tenant's `after` graph where several paths lead from one job down to another: each run of the
 * upstream queues one run of each dependent, so a job runs once per path from the job above it.
 * A lattice of width 2 (each layer's two jobs after both jobs of the layer above) runs its layer k
 * 2^(k-1) times per run of its root: 40 layers within the 80 jobs a create reads above a job would
 * queue about 2^40 runs from one trigger, written by the workers into the tables every tenant shares.
 */

const far = (): ScheduleSpec => ({ runAt: new Date(Date.now() + 3_600_000).toISOString() });
const runsAfter = (...jobs: Pick<Job, "jobId">[]): ScheduleSpec => ({
  after: { jobs: jobs.map((j) => j.jobId), on: "success" },
});

describe("an after graph cannot multiply one run past the bound", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  const create = async (tenantId: string, schedule: ScheduleSpec) =>
    (await createJob(f.engine, testJob({ tenantId, schedule }))).job;

  /** `layers` layers of two jobs below `root`: the first after it, each next after both above. */
  async function lattice(tenantId: string, root: Job, layers: number): Promise<Job[][]> {
    const built: Job[][] = [];
    let above = [root];
    for (let k = 0; k < layers; k++) {
      const layer = [
        await create(tenantId, runsAfter(...above)),
        await create(tenantId, runsAfter(...above)),
      ];
      built.push(layer);
      above = layer;
    }
    return built;
  }

  const refusal = (attempt: Promise<unknown>) =>
    attempt.then(
      () => {
        throw new Error("accepted");
      },
      (e: unknown) => {
        expect(e).toBeInstanceOf(ValidationError);
        return (e as ValidationError).issues;
      },
    );

  it("one trigger of a one-off runs each job of a lattice once per path from it: 2^(k-1) at layer k", async () => {
    const tenant = "lattice-runs";
    const root = await create(tenant, far());
    const layers = await lattice(tenant, root, 4);
    await triggerJob(f.engine, tenant, root.jobId);
    // Every queued run is delivered and run, in order, until no more are queued.
    const deps = f.workerDeps("worker");
    for (;;) {
      const received = await f.receiveAll(f.engine.queues.normal);
      if (received.length === 0) break;
      for (const message of received) expect(await f.process(deps, message)).toBe("ack");
    }
    const runs = (await f.runs()).filter((r) => r.tenantId === tenant);
    const runsOf = (job: Job) => runs.filter((r) => r.jobId === job.jobId);
    expect(runsOf(root)).toHaveLength(1);
    layers.forEach((layer, k) => {
      for (const job of layer) {
        expect(runsOf(job)).toHaveLength(2 ** k);
        expect(runsOf(job).every((r) => r.status === "SUCCEEDED")).toBe(true);
      }
    });
  }, 60_000);

  it("refuses a create that would run the job more than 100 times per run of a job above it, naming schedule.after.jobs", async () => {
    const tenant = "lattice-create";
    const root = await create(tenant, far());
    // Layer 7 runs 64 times per root run: accepted.
    const layers = await lattice(tenant, root, 7);
    const last = layers.at(-1) ?? [];
    // A job after both jobs of layer 7 would run 128 times per root run.
    const issues = await refusal(create(tenant, runsAfter(...last)));
    expect(issues).toEqual([
      {
        field: "schedule.after.jobs",
        message: expect.stringContaining(`at most ${MAX_RUNS_PER_RUN_ABOVE}`),
      },
    ]);
    expect(issues[0]?.message).toContain(
      `one run of job ${root.jobId} would run this job 128 times`,
    );
    for (const job of last) expect((await getJob(f.engine, job.jobId))?.dependents).toEqual([]);
    // A preview of that schedule is refused the same way.
    expect(await refusal(checkNewDependent(f.engine, tenant, runsAfter(...last)))).toEqual(issues);
    // After one of them it runs 64 times per root run: accepted.
    await create(tenant, runsAfter(last[0] as Job));
  }, 60_000);

  it("refuses an edit that would run a job below it more than 100 times per run of a job above it", async () => {
    const tenant = "lattice-edit";
    const top = await create(tenant, far());
    const left = await create(tenant, runsAfter(top));
    const right = await create(tenant, runsAfter(top));
    // A one-off with a lattice of 7 layers below it: 64 runs of layer 7 per run of it.
    const root = await create(tenant, far());
    const layers = await lattice(tenant, root, 7);
    // After both `left` and `right`, each run of `top` would run layer 7 128 times.
    const issues = await refusal(
      editJob(f.engine, tenant, root.jobId, root.version, { schedule: runsAfter(left, right) }),
    );
    expect(issues).toEqual([
      {
        field: "schedule.after.jobs",
        message: expect.stringContaining(`at most ${MAX_RUNS_PER_RUN_ABOVE}`),
      },
    ]);
    const refusedBelow = layers[6]?.map(
      (job) => `one run of job ${top.jobId} would run job ${job.jobId} 128 times`,
    );
    expect(refusedBelow?.some((m) => issues[0]?.message.startsWith(m))).toBe(true);
    expect((await getJob(f.engine, root.jobId))?.schedule).toHaveProperty("runAt");
    expect((await getJob(f.engine, left.jobId))?.dependents).toEqual([]);
    // After one of them: 64 per run of `top`, accepted.
    const edited = await editJob(f.engine, tenant, root.jobId, root.version, {
      schedule: runsAfter(left),
    });
    expect(edited.schedule).toEqual(runsAfter(left));
  }, 60_000);

  it("counts, at an edit, the paths that pass by the edited job to the jobs below it", async () => {
    const tenant = "lattice-pass-by";
    const top = await create(tenant, far());
    const side = (await lattice(tenant, top, 7)).at(-1) ?? [];
    const root = await create(tenant, far());
    const below = (await lattice(tenant, root, 6)).at(-1) ?? [];
    // 64 paths from `top` (through `side`) and 64 from `root`.
    const bottom = await create(tenant, runsAfter(...below, side[0] as Job));
    // After `top`, `root` would add 64 more paths from `top` to `bottom`, which are 64 without it.
    const issues = await refusal(
      editJob(f.engine, tenant, root.jobId, root.version, { schedule: runsAfter(top) }),
    );
    expect(issues[0]?.message).toContain(
      `one run of job ${top.jobId} would run job ${bottom.jobId} 128 times`,
    );
    expect((await getJob(f.engine, top.jobId))?.dependents).not.toContain(root.jobId);
  }, 60_000);

  it("orders an edit that keeps an old upstream above the job by another path with an edit of that upstream", async () => {
    const tenant = "moved-upstream";
    const top = await create(tenant, far());
    const upper = await create(tenant, far());
    const eleven: Job[] = [];
    for (let i = 0; i < 11; i++) eleven.push(await create(tenant, runsAfter(top)));
    const ten: Job[] = [];
    for (let i = 0; i < 10; i++) ten.push(await create(tenant, runsAfter(upper)));
    const lower = await create(tenant, runsAfter(upper));
    // `upper` after the eleven: 11 paths from `top` to `lower`. Planned, its write waits while
    // `lower` moves from after `upper` to after the ten below it: 10 paths from `upper`, 110 from `top`.
    let moved: Promise<unknown> | undefined;
    const name = "moveLowerFirst";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const items = JSON.stringify(args.input);
        if (
          moved === undefined &&
          context.commandName === "TransactWriteItemsCommand" &&
          items.includes(upper.jobId) &&
          items.includes(eleven[0]?.jobId ?? "")
        ) {
          moved = editJob(f.engine, tenant, lower.jobId, lower.version, {
            schedule: runsAfter(...ten),
          });
          await moved;
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    const edit = editJob(f.engine, tenant, upper.jobId, upper.version, {
      schedule: runsAfter(...eleven),
    }).then(
      () => "accepted",
      (e: unknown) => String(e),
    );
    const outcome = await edit.finally(() => f.engine.doc.middlewareStack.remove(name));
    await moved;
    expect((await getJob(f.engine, lower.jobId))?.schedule).toHaveProperty(
      "after.jobs",
      ten.map((j) => j.jobId).sort(),
    );
    // Whichever commits first, the other sees it: `upper`'s edit, planned again, is refused.
    expect(outcome).toContain(`would run job ${lower.jobId} 110 times`);
  }, 60_000);

  it("plans again an edit whose due occurrence it claimed first when a job was linked in below it meanwhile", async () => {
    const tenant = "claimed-then-linked";
    const top = await create(tenant, far());
    const eleven: Job[] = [];
    for (let i = 0; i < 11; i++) eleven.push(await create(tenant, runsAfter(top)));
    // A job of times with ten jobs after it, its next minute's occurrence due when the edit runs.
    const job = await create(tenant, { cron: "* * * * *", timezone: "UTC" });
    const ten: Job[] = [];
    for (let i = 0; i < 10; i++) ten.push(await create(tenant, runsAfter(job)));
    const read = await getJob(f.engine, job.jobId);
    const due = read?.nextDueKey;
    expect(due).toBeTruthy();
    // The edit to after the eleven checks 11 paths from `top` to each of the ten. Between that
    // check and its claim of the due occurrence, a job is created after all ten: 10 paths from
    // `job`, 110 from `top` once the edit commits. The create holds `job` at its version (which
    // a claim leaves alone) and adds one to its linkRevision.
    let linked: Promise<Job> | undefined;
    const name = "linkBelowBeforeClaim";
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const key = (args.input as { Key?: { pk?: unknown; sk?: unknown } }).Key;
        if (
          linked === undefined &&
          context.commandName === "GetItemCommand" &&
          key?.pk === due?.pk &&
          key?.sk === due?.sk
        ) {
          linked = create(tenant, runsAfter(...ten));
          await linked;
        }
        return next(args);
      },
      { step: "initialize", name },
    );
    const later = engineAt(f.engine, Date.parse(read?.nextRunAt ?? "") + 60_000);
    const outcome = await editJob(later, tenant, job.jobId, job.version, {
      schedule: runsAfter(...eleven),
    })
      .then(
        () => "accepted",
        (e: unknown) => String(e),
      )
      .finally(() => f.engine.doc.middlewareStack.remove(name));
    const bottom = await linked;
    expect(bottom).toBeDefined();
    // The create committed first: the edit, planned again from a read that sees it, is refused.
    expect(outcome).toContain(`would run job ${bottom?.jobId} 110 times`);
    expect((await getJob(f.engine, job.jobId))?.schedule).toHaveProperty("cron");
  }, 60_000);

  it("takes ordinary graphs: a job after 20 jobs that all run after one, and diamonds below it", async () => {
    const tenant = "ordinary";
    const root = await create(tenant, far());
    const twenty: Job[] = [];
    for (let i = 0; i < 20; i++) twenty.push(await create(tenant, runsAfter(root)));
    const fanIn = await create(tenant, runsAfter(...twenty));
    const [b, c] = [await create(tenant, runsAfter(fanIn)), await create(tenant, runsAfter(fanIn))];
    // 20 paths to the fan-in, 40 to the diamond's bottom, 80 to the next one's.
    const d = await create(tenant, runsAfter(b, c));
    const [e, g] = [await create(tenant, runsAfter(d)), await create(tenant, runsAfter(d))];
    await create(tenant, runsAfter(e, g));
  }, 60_000);

  /*
   * Creates and edits read at most 80 jobs above a job's new upstreams. An edit of the upstreams
   * of a job with jobs after it also reads the jobs below it, one round trip a level: unbounded,
   * edits joined chains of 80 end to end, so a tenant's chain grew as deep as it had jobs and every
   * walk of it (this edit's, the quota's, a cancel's) ran out of the API's time some thousands deep.
   */

  /**
   * A chain of `levels` jobs below `above` (one job, or several the first runs after), written
   * straight into the table as creates would link them, each after the last; each of `above` lists
   * the first as its dependent. The chain's job ids, top first.
   */
  async function chainBelow(above: Job | readonly Job[], levels: number): Promise<string[]> {
    const uppers = Array.isArray(above) ? above : [above];
    const tenantId = uppers[0]?.tenantId ?? "";
    const now = new Date();
    const ids = Array.from({ length: levels }, () => newJobId(now));
    const items = ids.map((jobId, i) =>
      encodeJob({
        ...storedJob(jobId, now, testJob({ tenantId, schedule: far() })),
        schedule: runsAfter(...(i === 0 ? uppers : [{ jobId: ids[i - 1] ?? "" }])),
        dependents: i + 1 < ids.length ? [ids[i + 1] ?? ""] : [],
      }),
    );
    await putItems(f, f.engine.tables.jobs, items);
    for (const upper of uppers)
      await f.engine.doc.send(
        new UpdateCommand({
          TableName: f.engine.tables.jobs,
          Key: jobKey(upper.jobId),
          UpdateExpression: "ADD dependents :first, linkRevision :one",
          ExpressionAttributeValues: { ":first": new Set([ids[0]]), ":one": 1 },
        }),
      );
    return ids;
  }

  it(`takes an edit of the upstreams of a job with ${MAX_LEVELS_BELOW_EDIT} levels of jobs below it`, async () => {
    const tenant = "depth-at-bound";
    const upstream = await create(tenant, far());
    const top = await create(tenant, far());
    await chainBelow(top, MAX_LEVELS_BELOW_EDIT);
    const read = await getJob(f.engine, top.jobId);
    const edited = await editJob(f.engine, tenant, top.jobId, read?.version ?? 0, {
      schedule: runsAfter(upstream),
    });
    expect(edited.schedule).toEqual(runsAfter(upstream));
    expect((await getJob(f.engine, upstream.jobId))?.dependents).toEqual([top.jobId]);
  }, 60_000);

  it("refuses, naming schedule.after.jobs and writing nothing, one with a level more below it", async () => {
    const tenant = "depth-past-bound";
    const upstream = await create(tenant, far());
    const top = await create(tenant, far());
    await chainBelow(top, MAX_LEVELS_BELOW_EDIT + 1);
    const read = await getJob(f.engine, top.jobId);
    const issues = await refusal(
      editJob(f.engine, tenant, top.jobId, read?.version ?? 0, { schedule: runsAfter(upstream) }),
    );
    expect(issues).toEqual([
      {
        field: "schedule.after.jobs",
        message: `the jobs after this one reach more than ${MAX_LEVELS_BELOW_EDIT} levels below it: too deep to count the runs this edit would make them run`,
      },
    ]);
    const afterRefusal = await getJob(f.engine, top.jobId);
    expect(afterRefusal?.schedule).toHaveProperty("runAt");
    expect(afterRefusal?.version).toBe(read?.version);
    expect((await getJob(f.engine, upstream.jobId))?.dependents).toEqual([]);
  }, 60_000);
  it("takes an edit that only drops upstreams of a job with jobs deeper below it (a graph built before the bound)", async () => {
    const tenant = "depth-past-bound-drop";
    const [left, right] = [await create(tenant, far()), await create(tenant, far())];
    const top = await create(tenant, runsAfter(left, right));
    await chainBelow(top, MAX_LEVELS_BELOW_EDIT + 1);
    const read = await getJob(f.engine, top.jobId);
    // Fewer upstreams make fewer paths: the tenant can shorten what it can no longer deepen.
    const edited = await editJob(f.engine, tenant, top.jobId, read?.version ?? 0, {
      schedule: runsAfter(left),
    });
    expect(edited.schedule).toEqual(runsAfter(left));
    expect((await getJob(f.engine, right.jobId))?.dependents).toEqual([]);
  }, 60_000);

  it("refuses an edit of the upstreams of a job whose longest chain below passes the bound, though a link from it reaches the chain's middle at once", async () => {
    const tenant = "depth-shortcut";
    const upstream = await create(tenant, far());
    const top = await create(tenant, far());
    // 40 jobs below `top`, then 41 after both the 40th and `top` itself: 81 links on the long
    // side, 41 levels by the shortest paths, which is all a read level by level sees.
    const left = await chainBelow(top, 40);
    const leftEnd = (await getJob(f.engine, left.at(-1) ?? "")) as Job;
    await chainBelow([top, leftEnd], 41);
    const read = await getJob(f.engine, top.jobId);
    const issues = await refusal(
      editJob(f.engine, tenant, top.jobId, read?.version ?? 0, { schedule: runsAfter(upstream) }),
    );
    expect(issues).toEqual([
      {
        field: "schedule.after.jobs",
        message: expect.stringContaining(`more than ${MAX_LEVELS_BELOW_EDIT} levels below it`),
      },
    ]);
    expect((await getJob(f.engine, upstream.jobId))?.dependents).toEqual([]);
  }, 60_000);
});
