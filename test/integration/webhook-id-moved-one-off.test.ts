import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob, editJob, triggerJob } from "../../shared/jobs/index.js";
import { getTenantJob } from "../../shared/jobs/queries.js";
import { tenantWebhookSecrets } from "../../shared/webhooks/secrets.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { type Receiver, startReceiver } from "../support/receiver.js";
import { refusedEditOnto } from "../support/triggered-instant.js";
import { waitFor } from "../support/wait.js";

/**
 * docs/api.md tells a receiver to "apply each `webhook-id` once". A triggered run's time is its
 * `webhook-id` (`<jobId>@<scheduledFor>`): a one-off moved to that time was filed as the run's next
 * attempt and delivered under its `webhook-id`, so the receiver took it for a duplicate and
 * dropped it while the run was recorded SUCCEEDED ('expected 1 to be 2', the webhook-id count
 * below). Such an edit is a 400 naming `schedule.runAt`, nothing written; a one-off moved a
 * millisecond off that time is its own delivery, under its own `webhook-id`.
 */
describe("a one-off moved to the time of a triggered run that succeeded", () => {
  let f: EngineFixture;
  let receiver: Receiver;
  const stop = new AbortController();
  let loop: Promise<void>;

  beforeAll(async () => {
    f = await createEngineFixture();
    const secret = (await tenantWebhookSecrets(f.engine, "tenant-a")).current;
    receiver = await startReceiver({ secret });
    loop = runWorkerLoop(f.workerDeps("loop"), { concurrency: 2, signal: stop.signal });
  });
  afterAll(async () => {
    stop.abort();
    await loop;
    await receiver.close();
    await f.destroy();
  });

  const succeededRuns = (jobId: string, count: number) =>
    waitFor(`${count} succeeded runs of ${jobId}`, async () => {
      const runs = (await f.runs()).filter((run) => run.jobId === jobId);
      return runs.filter((run) => run.status === "SUCCEEDED").length === count ? runs : undefined;
    });

  it("is refused (400 naming schedule.runAt and the run); moved elsewhere, it is its own delivery", async () => {
    const runAt = new Date(Date.now() + 3_600_000).toISOString();
    const { job } = await createJob(
      f.engine,
      testJob({
        tenantId: "tenant-a",
        type: "http",
        payload: { invoice: 42 },
        target: { url: `${receiver.url}/tenant-a`, timeoutSeconds: 5 },
        schedule: { runAt },
      }),
    );
    const triggered = await triggerJob(f.engine, "tenant-a", job.jobId);
    await succeededRuns(job.jobId, 1);

    const issue = await refusedEditOnto(f.engine, job, triggered);
    expect(issue.message).toContain(`a triggered run (${triggered.runId}, succeeded)`);
    expect(issue.message).toContain("give another runAt");
    // Nothing written: the job keeps its version and its runAt.
    const kept = await getTenantJob(f.engine, "tenant-a", job.jobId);
    expect([kept.version, kept.schedule]).toEqual([job.version, { runAt }]);

    // A millisecond off, the one-off's occurrence is its own run under its own webhook-id.
    const off = new Date(Date.parse(triggered.scheduledFor) + 1).toISOString();
    const moved = await editJob(f.engine, "tenant-a", job.jobId, job.version, {
      schedule: { runAt: off },
    });
    expect(moved.status).toBe("ACTIVE");
    const runs = await succeededRuns(job.jobId, 2);
    expect(runs.map((run) => [run.attempt, run.triggered ?? false]).sort()).toEqual([
      [1, false],
      [1, true],
    ]);

    const deliveries = receiver.deliveries.filter((d) => d.jobId === job.jobId);
    expect(deliveries).toHaveLength(2);
    // Two runs the tenant asked for (a trigger, then the one-off's own occurrence): two keys.
    expect(new Set(deliveries.map((d) => d.webhookHeaders["webhook-id"])).size).toBe(2);
    expect(deliveries.filter((d) => d.applied)).toHaveLength(2);
  });
});
