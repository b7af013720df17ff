import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Clock, offsetClock } from "../../shared/clock.js";
import type { JobContext, JobHandler } from "../../shared/execution/job-contract.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, editJob } from "../../shared/jobs/index.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  testJob,
} from "../support/engine-fixture.js";

const MINUTE = 60_000;

/**
 * A first attempt of the schedule a job had before an edit that said `inFlight: "complete"`
 * meets the misfire policy when it starts late (the workers were down), as any first attempt of
 * an occurrence does: `inFlight` decides whether it runs at all, not whether it runs late.
 */
describe("a late first attempt of the old schedule, kept by an edit with inFlight complete", () => {
  let f: EngineFixture;
  let ran: string[];
  const handlers: Record<string, JobHandler> = {
    recorded: async (ctx: JobContext) => void ran.push(ctx.runId),
  };

  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const at = (ms: number): Clock => offsetClock(ms - Date.now());

  async function editedWithQueuedRun(misfire: MisfirePolicy) {
    ran = [];
    const startAt = Math.ceil((Date.now() + MINUTE) / 1000) * 1000;
    const { job } = await createJob(
      f.engine,
      testJob({
        type: "recorded",
        schedule: { every: "PT1H", startAt: new Date(startAt).toISOString() },
        policies: { ...testJob().policies, misfire, inFlight: "complete" },
      }),
    );
    const [queued] = (await f.runs()).filter((r) => r.jobId === job.jobId);
    expect(queued?.status).toBe("QUEUED");
    // The schedule moves 30 minutes on; the queued occurrence is no longer one of it.
    await editJob(f.engine, job.tenantId, job.jobId, job.version, {
      schedule: { every: "PT1H", startAt: new Date(startAt + 30 * MINUTE).toISOString() },
    });
    if (queued === undefined) throw new Error("the create queued no run");
    return { queued, startAt };
  }

  it("skip: started ten minutes late, it is skipped", async () => {
    const { queued, startAt } = await editedWithQueuedRun("skip");
    const late = at(startAt + 10 * MINUTE);
    await processRun(
      { ...f.workerDeps("w", handlers), engine: { ...f.engine, clock: late } },
      deliveryOfRun(f.engine, queued),
    );
    const ended = (await f.runs()).find((r) => r.runId === queued.runId);
    expect([ended?.status, ended?.reason]).toEqual([
      "SKIPPED",
      "misfire: started 600 s late, past the 60 s grace; policy skip",
    ]);
    expect(ran).toEqual([]);
  });

  it("skip: started inside the grace, it runs", async () => {
    const { queued, startAt } = await editedWithQueuedRun("skip");
    await processRun(
      { ...f.workerDeps("w", handlers), engine: { ...f.engine, clock: at(startAt + 30_000) } },
      deliveryOfRun(f.engine, queued),
    );
    expect(ran).toEqual([queued.runId]);
  });

  it("fire_once: started ten minutes late, it runs (no occurrence of the old schedule runs in its place)", async () => {
    const { queued, startAt } = await editedWithQueuedRun("fire_once");
    await processRun(
      {
        ...f.workerDeps("w", handlers),
        engine: { ...f.engine, clock: at(startAt + 10 * MINUTE) },
      },
      deliveryOfRun(f.engine, queued),
    );
    expect(ran).toEqual([queued.runId]);
  });
});
