import { beforeAll, describe, expect, it } from "vitest";
import { createJob, editJob } from "../../shared/jobs/index.js";
import type { MisfirePolicy } from "../../shared/policies.js";
import { type EngineFixture, testJob } from "../support/engine-fixture.js";
import { useLateStarts } from "../support/late-starts.js";

const MINUTE = 60_000;

/**
 * A first attempt of the schedule a job had before an edit that said `inFlight: "complete"`
 * meets the misfire policy when it starts late (the workers were down), as any first attempt of
 * an occurrence does: `inFlight` decides whether it runs at all, not whether it runs late.
 */
describe("a late first attempt of the old schedule, kept by an edit with inFlight complete", () => {
  const { fixture, ran, forget, deliverAt } = useLateStarts();
  let f: EngineFixture;
  beforeAll(() => {
    f = fixture();
  });

  async function editedWithQueuedRun(misfire: MisfirePolicy) {
    forget();
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
    await deliverAt(queued, startAt + 10 * MINUTE);
    const ended = (await f.runs()).find((r) => r.runId === queued.runId);
    expect([ended?.status, ended?.reason]).toEqual([
      "SKIPPED",
      "misfire: started 600 s late, past the 60 s grace; policy skip",
    ]);
    expect(ran()).toEqual([]);
  });

  it("skip: started inside the grace, it runs", async () => {
    const { queued, startAt } = await editedWithQueuedRun("skip");
    await deliverAt(queued, startAt + 30_000);
    expect(ran()).toEqual([queued.runId]);
  });

  it("fire_once: started ten minutes late, it runs (no occurrence of the old schedule runs in its place)", async () => {
    const { queued, startAt } = await editedWithQueuedRun("fire_once");
    await deliverAt(queued, startAt + 10 * MINUTE);
    expect(ran()).toEqual([queued.runId]);
  });
});
