import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { offsetClock, sleep } from "../../shared/clock.js";
import type { Engine } from "../../shared/engine.js";
import type { JobContext, JobHandler } from "../../shared/execution/job-contract.js";
import type { WorkerDeps } from "../../shared/execution/worker.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { waitFor } from "../support/wait.js";

/**
 * Every process reads its own host's clock. These cases give each component a clock of its own,
 * ahead of or behind the others, at the design's default lease (60 s, a heartbeat every 10 s;
 * some holders beat faster so that the case takes seconds, not minutes).
 */
const SECOND = 1000;

/** The engine as a host whose clock is `skewMs` ahead of the others (behind when negative). */
const skewed = (engine: Engine, skewMs: number): Engine => ({
  ...engine,
  clock: offsetClock(skewMs),
});

/** A handler that runs until `release` is called (or its signal aborts), recording each call. */
function heldHandler() {
  const contexts: JobContext[] = [];
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const handler = async (ctx: JobContext) => {
    contexts.push(ctx);
    await Promise.race([
      released,
      new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true })),
    ]);
  };
  return { handler, contexts, release: () => release() };
}

describe("hosts whose clocks disagree", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  async function runOf(jobId: string): Promise<Run> {
    const runs = (await f.runs()).filter((r) => r.jobId === jobId);
    expect(runs).toHaveLength(1);
    const [run] = runs;
    if (!run) throw new Error("no run");
    return run;
  }

  /** A worker of `type`'s handler on a host `skewMs` off the others. */
  function workerOn(
    skewMs: number,
    workerId: string,
    handlers: Record<string, JobHandler>,
    heartbeatEveryMs?: number,
  ): WorkerDeps {
    return {
      ...f.workerDeps(workerId, handlers, heartbeatEveryMs),
      engine: skewed(f.engine, skewMs),
    };
  }

  describe("a duplicate first delivery on a clock ahead, while the holder's start is unwritten", () => {
    it("2 s ahead, a second before the holder's first write: the job's admission still lets only the holder run", async () => {
      const holder = heldHandler();
      const duplicate = heldHandler();
      const { job } = await createJob(
        f.engine,
        testJob({
          type: "held",
          schedule: { every: "PT1H", startAt: new Date(Date.now() + 200).toISOString() },
        }),
      );
      const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
      // The holder beats every 2 s, so its first write (the start's) is owed 2 s after its start.
      const first = processRun(
        workerOn(0, "worker-a", { held: holder.handler }, 2 * SECOND),
        received,
      );
      await waitFor("the holder's handler", () => holder.contexts.length === 1);
      // SQS delivers the same message again a moment before the holder's first write, to a host
      // whose clock is 2 s ahead: by that clock the holder is past the write it owed.
      await sleep(1200);
      expect(await runOf(job.jobId)).toMatchObject({ status: "QUEUED", fence: 0 });
      const second = processRun(
        workerOn(2 * SECOND, "worker-b", { held: duplicate.handler }),
        received,
      );
      const secondDone = await Promise.race([
        second.then(() => true),
        sleep(1500).then(() => false),
      ]);
      holder.release();
      duplicate.release();
      await Promise.all([first, second]);
      // The duplicate is acknowledged, its handler never entered: one run of the occurrence.
      expect(duplicate.contexts).toHaveLength(0);
      expect(secondDone).toBe(true);
      expect(await runOf(job.jobId)).toMatchObject({
        status: "SUCCEEDED",
        workerId: "worker-a",
        fence: 1,
      });
    }, 30_000);
  });
});
