import { UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { describe, expect, it } from "vitest";
import { createJob } from "../../shared/jobs/index.js";
import { extendAdmission, recordAdmission } from "../../shared/storage/admission.js";
import { jobKey } from "../../shared/storage/items.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";

/**
 * A run's `activeRuns` entry (its lease as its job's overlap reads it) against two holders of the
 * run: a stale worker, whose heartbeat's extension of the entry was under way as its lease lapsed,
 * and the worker that took the run over since. The stale extension landing last must not move the
 * listed lease back under the new holder's, or the run would read lapsed to overlap while it runs.
 */
const LEASE_MS = 60_000;

/** A job listing `runId` under a lease from the stale holder's admission, then the new holder's. */
async function takenOver(f: EngineFixture, runId: string, t0: number) {
  const { job } = await createJob(f.engine, testJob());
  const staleLease = new Date(t0 + LEASE_MS);
  await recordAdmission(
    f.engine,
    job,
    { kind: "start", runId, leaseUntil: staleLease },
    { dropped: [] },
  );
  const read = await getJob(f.engine, job.jobId);
  if (read === null) throw new Error("job gone");
  // The new holder starts once the stale one's lease lapsed, and is admitted under its own.
  const newLease = new Date(t0 + 2 * LEASE_MS + 1000);
  await recordAdmission(
    f.engine,
    read,
    { kind: "start", runId, leaseUntil: newLease },
    { dropped: [] },
  );
  return { job, staleLease, newLease };
}

const listedLease = async (f: EngineFixture, jobId: string, runId: string) =>
  (await getJob(f.engine, jobId))?.activeRuns[runId];

describe("a stale worker's extension of its run's admission", () => {
  it("landing after the new holder's admission does not move the listed lease back", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const t0 = Date.now();
    const { job, newLease } = await takenOver(f, "run-taken-over", t0);
    // The stale worker's beat, sent before its lease lapsed, lands now: a lease before the new one's.
    await extendAdmission(f.engine, job.jobId, "run-taken-over", new Date(t0 + LEASE_MS + 500));
    expect(await listedLease(f, job.jobId, "run-taken-over")).toBe(newLease.toISOString());
    // The new holder's own beats still move it on, and the same lease sent again stands.
    const next = new Date(newLease.getTime() + LEASE_MS);
    await extendAdmission(f.engine, job.jobId, "run-taken-over", next);
    await extendAdmission(f.engine, job.jobId, "run-taken-over", next);
    expect(await listedLease(f, job.jobId, "run-taken-over")).toBe(next.toISOString());
  });

  it("moves on an entry an earlier version wrote, and brings back none that went", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture();
    onTestFinished(() => f.destroy());
    const { job } = await createJob(f.engine, testJob());
    const t0 = Date.now();
    // An entry as any version writes it: the run's lease, an ISO instant.
    await f.engine.doc.send(
      new UpdateCommand({
        TableName: f.engine.tables.jobs,
        Key: jobKey(job.jobId),
        UpdateExpression: "SET activeRuns.#runId = :leaseUntil",
        ExpressionAttributeNames: { "#runId": "run-old" },
        ExpressionAttributeValues: { ":leaseUntil": new Date(t0 + LEASE_MS).toISOString() },
      }),
    );
    const later = new Date(t0 + 2 * LEASE_MS);
    await extendAdmission(f.engine, job.jobId, "run-old", later);
    expect(await listedLease(f, job.jobId, "run-old")).toBe(later.toISOString());
    await extendAdmission(f.engine, job.jobId, "run-gone", later);
    expect(await listedLease(f, job.jobId, "run-gone")).toBeUndefined();
  });
});
