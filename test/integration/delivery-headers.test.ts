import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runWorkerLoop } from "../../shared/execution/worker-loop.js";
import { createJob, triggerJob } from "../../shared/jobs/index.js";
import type { Run } from "../../shared/model.js";
import type { ScheduleSpec } from "../../shared/schedule/types.js";
import { newWebhookSecret, tenantWebhookSecrets } from "../../shared/webhooks/secrets.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { type Receiver, startReceiver, verifyDelivery } from "../support/receiver.js";
import { waitFor } from "../support/wait.js";

/**
 * What a receiver is told about each delivery (docs/api.md, "Webhook deliveries"), read as a
 * receiver reads it: the occurrence key is the same on a retry, which is a new run with the next
 * attempt, and differs between occurrences; every delivery verifies with its tenant's secret alone.
 */
describe("the headers of a job's deliveries", () => {
  let f: EngineFixture;
  let receiver: Receiver;
  const stop = new AbortController();
  let loop: Promise<void>;
  const secrets = new Map<string, string>();

  beforeAll(async () => {
    f = await createEngineFixture();
    for (const tenantId of ["tenant-a", "tenant-b"])
      secrets.set(tenantId, (await tenantWebhookSecrets(f.engine, tenantId)).current);
    receiver = await startReceiver({
      secret: (path) => secrets.get(path.split("/")[2] ?? "") ?? newWebhookSecret(),
      // The first attempt of each occurrence fails retryably: its retry is delivered too.
      statusFor: ({ attempt }) => (attempt === 1 ? 503 : 200),
    });
    loop = runWorkerLoop(f.workerDeps("loop"), { concurrency: 4, signal: stop.signal });
  });
  afterAll(async () => {
    stop.abort();
    await loop;
    await receiver.close();
    await f.destroy();
  });

  const runsOf = async (jobId: string) =>
    (await f.runs()).filter((run) => run.jobId === jobId).sort((a, b) => a.attempt - b.attempt);
  const succeeded = (jobId: string, count: number) =>
    waitFor(`${count} succeeded runs of ${jobId}`, async () => {
      const runs = await runsOf(jobId);
      return runs.filter((run) => run.status === "SUCCEEDED").length === count ? runs : undefined;
    });

  const job = (tenantId: string, schedule: ScheduleSpec) =>
    createJob(
      f.engine,
      testJob({
        tenantId,
        type: "http",
        payload: { order: 7, note: "ünïcode ✓" },
        target: { url: `${receiver.url}/${tenantId}`, timeoutSeconds: 5 },
        schedule,
        policies: {
          ...testJob().policies,
          retry: { maxAttempts: 2, initialDelayMs: 200, maxDelayMs: 200 },
        },
      }),
    );

  const deliveriesOf = (jobId: string) => receiver.deliveries.filter((d) => d.jobId === jobId);

  it("a retry carries the occurrence's key, the next attempt and its own run id; each verifies by its tenant's secret only", async () => {
    const { job: created } = await job("tenant-b", { runAt: new Date().toISOString() });
    const runs = await succeeded(created.jobId, 1);
    expect(runs.map((run) => [run.attempt, run.status])).toEqual([
      [1, "FAILED"],
      [2, "SUCCEEDED"],
    ]);
    const deliveries = deliveriesOf(created.jobId);
    const key = `${created.jobId}@${runs[0]?.scheduledFor}`;
    expect(
      deliveries.map((d) => [d.idempotencyKey, d.webhookHeaders["webhook-id"], d.attempt, d.runId]),
    ).toEqual(runs.map((run) => [key, key, run.attempt, run.runId]));
    for (const delivery of deliveries) {
      expect(delivery.signatureValid).toBe(true);
      expect(JSON.parse(delivery.body)).toEqual({ order: 7, note: "ünïcode ✓" });
      expect(verifyDelivery(secrets.get("tenant-a") ?? "", delivery)).toBe(false);
    }
  });

  it("two occurrences (two triggers of one job) have keys of their own", async () => {
    const { job: created } = await job("tenant-a", { cron: "0 0 1 1 *", timezone: "UTC" });
    await triggerJob(f.engine, "tenant-a", created.jobId);
    await succeeded(created.jobId, 1);
    await triggerJob(f.engine, "tenant-a", created.jobId);
    const runs: Run[] = await succeeded(created.jobId, 2);
    const keys = new Set(deliveriesOf(created.jobId).map((d) => d.idempotencyKey));
    expect([...keys].sort()).toEqual(
      [...new Set(runs.map((run) => `${created.jobId}@${run.scheduledFor}`))].sort(),
    );
    expect(keys.size).toBe(2);
    expect(deliveriesOf(created.jobId).every((d) => d.signatureValid)).toBe(true);
  });
});
