import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS, type EngineSettings } from "../../shared/config.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import type { Engine } from "../../shared/engine.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { createJob } from "../../shared/jobs/index.js";
import type { ReceivedRun } from "../../shared/queue/work-queue.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { waitFor } from "../support/wait.js";

const SECOND = 1_000;
const MINUTE = 60 * SECOND;

/** The same tables and queues under a later deploy's settings, its clock at `instant`. */
function redeployed(engine: Engine, settings: Partial<EngineSettings>, instant: number): Engine {
  return { ...engineAt(engine, instant), settings: { ...engine.settings, ...settings } };
}

/**
 * A per-minute job's occurrences queued across a deploy that changes `lookaheadSeconds`: claims of
 * either deploy queue each occurrence once, one after the other, with none left out.
 */
describe("a deploy that changes lookaheadSeconds under a per-minute job", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  /** The job's runs by occurrence, checked to be one a minute from the first, each once. */
  async function occurrencesQueued(jobId: string): Promise<string[]> {
    const runs = (await f.runs()).filter((r) => r.jobId === jobId);
    const times = runs.map((r) => r.scheduledFor).sort();
    expect(new Set(times).size).toBe(times.length);
    expect(runs.every((r) => r.status === "QUEUED" && r.attempt === 1)).toBe(true);
    const first = Date.parse(times[0] ?? "");
    expect(times).toEqual(times.map((_, i) => new Date(first + i * MINUTE).toISOString()));
    return times;
  }

  it("lowered from 600 to 60 s: the new dispatcher claims on from where the old API's claim stopped", async () => {
    const old = { ...f.engine, settings: { ...f.engine.settings, lookaheadMs: 600 * SECOND } };
    const startAt = new Date(Math.ceil((Date.now() + 5 * MINUTE) / MINUTE) * MINUTE);
    // Inside the old API's fast-path window: the create claims at once, 14 minutes ahead.
    const { job } = await createJob(
      old,
      testJob({ schedule: { every: "PT1M", startAt: startAt.toISOString() } }),
    );
    const claimed = await occurrencesQueued(job.jobId);
    const [stored] = (await f.jobs()).filter((j) => j.jobId === job.jobId);
    const nextDue = Date.parse(stored?.nextRunAt ?? "");
    expect(nextDue).toBe(Date.parse(claimed.at(-1) ?? "") + MINUTE);

    // The new deploy's passes, every minute from now until past that entry.
    for (let at = Date.now(); at <= nextDue; at += MINUTE) {
      const pass = await dispatchShard(
        redeployed(f.engine, { lookaheadMs: 60 * SECOND }, at),
        0,
        "new",
      );
      expect(pass.outcome).not.toBe("lease-held");
    }
    const all = await occurrencesQueued(job.jobId);
    expect(all.slice(0, claimed.length)).toEqual(claimed);
    expect(all.length).toBeGreaterThan(claimed.length);
  }, 60_000);

  it("raised from 60 to 600 s: an old dispatcher's pass after the new one's claim queues nothing again", async () => {
    const old = { ...f.engine, settings: { ...f.engine.settings, lookaheadMs: 60 * SECOND } };
    const startAt = new Date(Math.ceil((Date.now() + 5 * MINUTE) / MINUTE) * MINUTE);
    // Past the old API's fast-path window (three minutes): left for the dispatcher.
    const { job } = await createJob(
      old,
      testJob({ schedule: { every: "PT1M", startAt: startAt.toISOString() } }),
    );
    expect((await f.runs()).filter((r) => r.jobId === job.jobId)).toEqual([]);
    const now = Date.now();
    const raised = redeployed(f.engine, { lookaheadMs: 600 * SECOND }, now);
    await dispatchShard(raised, 0, "new");
    const claimed = await occurrencesQueued(job.jobId);
    expect(claimed[0]).toBe(startAt.toISOString());
    // Old and new passes alike over the next minutes.
    for (let at = now + MINUTE; at <= now + 10 * MINUTE; at += MINUTE) {
      const settings = { lookaheadMs: (at % (2 * MINUTE) < MINUTE ? 60 : 600) * SECOND };
      await dispatchShard(redeployed(f.engine, settings, at), 0, "either");
    }
    const all = await occurrencesQueued(job.jobId);
    expect(all.slice(0, claimed.length)).toEqual(claimed);
  }, 60_000);
});

/**
 * `misfireGraceSeconds` is read when a run starts: a run queued under the earlier grace follows its
 * job's misfire policy under the grace of the worker that starts it. It is recorded once either way.
 */
describe("a deploy that shortens misfireGraceSeconds under runs already queued", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { misfireGraceMs: 60 * SECOND } });
  });
  afterAll(() => f.destroy());

  async function queuedRun(misfire: "skip" | "fire_once") {
    const { job } = await createJob(
      f.engine,
      testJob({
        schedule: { every: "PT1H", startAt: new Date(Date.now() + 200).toISOString() },
        policies: { ...testJob().policies, misfire },
      }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    return { job, received };
  }

  it("skips a run 5 s late under a 1 s grace when its policy says skip, and runs one under fire_once", async () => {
    for (const [misfire, status] of [
      ["skip", "SKIPPED"],
      ["fire_once", "SUCCEEDED"],
    ] as const) {
      const { job, received } = await queuedRun(misfire);
      const late = Date.parse(received.message.dueAt) + 5 * SECOND;
      const worker = {
        ...f.workerDeps("new"),
        engine: redeployed(f.engine, { misfireGraceMs: SECOND }, late),
      };
      expect(await f.process(worker, received)).toBe("ack");
      const runs = (await f.runs()).filter((r) => r.jobId === job.jobId);
      expect(runs.map((r) => r.status)).toEqual([status]);
    }
    // Nothing of theirs is left on the queue.
    expect(await f.queueDepth(f.engine.queues.normal)).toMatchObject({ visible: 0, inFlight: 0 });
  });
});

/**
 * A deploy that lowers the default `quotaConcurrentRuns` below what a tenant has running: the runs
 * under way run on in their slots, and the tenant's next runs wait until enough of them have ended.
 */
describe("a deploy that lowers the concurrent-runs quota under runs already running", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { quotas: { ...DEFAULT_QUOTAS, concurrentRuns: 2 }, quotaCacheMs: 0 },
    });
  });
  afterAll(() => f.destroy());

  it("lets the two running finish and starts the third only once both have ended", async () => {
    const tenantId = "lowered-under-running";
    const jobIds: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { job } = await createJob(
        f.engine,
        testJob({ tenantId, type: "held", schedule: { runAt: new Date().toISOString() } }),
      );
      jobIds.push(job.jobId);
    }
    const [first, second, third] = await Promise.all(
      jobIds.map((jobId) => f.nextDelivery(f.engine.queues.normal, jobId)),
    );
    if (!first || !second || !third) throw new Error("no delivery");
    // By job: the two handlers start in whichever order the machine's load lets them.
    const releases = new Map<string, () => void>();
    const release = (d: ReceivedRun) => releases.get(d.message.jobId)?.();
    const calls = new Map<string, number>();
    const held = async (ctx: JobContext) => {
      calls.set(ctx.jobId, (calls.get(ctx.jobId) ?? 0) + 1);
      await new Promise<void>((resolve) => releases.set(ctx.jobId, resolve));
    };
    // Two running under the earlier deploy's quota (2).
    const running = [first, second].map((d) => f.process(f.workerDeps("old", { held }), d));
    await waitFor("both handlers", () => releases.size === 2);

    // The new deploy's default is 1: the third waits, and waits again while one still runs.
    const lowered: Engine = {
      ...f.engine,
      settings: { ...f.engine.settings, quotas: { ...DEFAULT_QUOTAS, concurrentRuns: 1 } },
    };
    const newWorker = { ...f.workerDeps("new", { held }), engine: lowered };
    const thirdRun = async () => (await f.runs()).find((r) => r.jobId === third.message.jobId);
    expect(await f.process(newWorker, third)).toBe("ack");
    expect((await thirdRun())?.reason).toMatch(/concurrentRuns quota \(1\)/);
    release(first);
    expect(await running[0]).toBe("ack");
    const again = await f.nextDelivery(f.engine.queues.normal, third.message.jobId);
    expect(await f.process(newWorker, again)).toBe("ack");
    expect(calls.get(third.message.jobId)).toBeUndefined();

    release(second);
    expect(await running[1]).toBe("ack");
    const last = await f.nextDelivery(f.engine.queues.normal, third.message.jobId);
    const runsLast = f.process(newWorker, last);
    await waitFor("the third's handler", () => releases.has(third.message.jobId));
    release(third);
    expect(await runsLast).toBe("ack");
    // Each ran once and is recorded once; none is left queued.
    expect(jobIds.map((id) => calls.get(id))).toEqual([1, 1, 1]);
    const runs = (await f.runs()).filter((r) => jobIds.includes(r.jobId));
    expect(runs.map((r) => r.status)).toEqual(["SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]);
  }, 60_000);
});
