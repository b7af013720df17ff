import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { describe, expect, it } from "vitest";
import { AckBatcher } from "../../shared/execution/ack-batcher.js";
import { HandBacks } from "../../shared/execution/hand-back.js";
import { createJob } from "../../shared/jobs/index.js";
import { runKeyOf } from "../../shared/storage/run-reads.js";
import { createEngineFixture, testJob } from "../support/engine-fixture.js";
import { runOf } from "../support/held-runs.js";

const LEASE_MS = 6000;
/** How long the run had waited for its tenant's quota: out for 30 s at the most. */
const WAITED_MS = 30_000;

describe("a message handed back for longer than half a lease", () => {
  it("moves its QUEUED run's reaper deadline to a lease after the message is back", async ({
    onTestFinished,
  }) => {
    const f = await createEngineFixture({ settings: { leaseMs: LEASE_MS } });
    onTestFinished(() => f.destroy());
    // The longest time out its wait allows: 30 s.
    const engine = { ...f.engine, random: () => 0 };
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: new Date().toISOString() } }),
    );
    const received = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    const acks = new AckBatcher(f.engine.sqs, f.engine.obs.log);
    const handedAt = Date.now();
    await new HandBacks(engine, acks).handBack(received, handedAt - WAITED_MS);
    await acks.flush();
    const run = await runOf(f, job.jobId);
    const item = await f.engine.doc.send(
      new GetCommand({ TableName: f.engine.tables.runs, Key: runKeyOf(run), ConsistentRead: true }),
    );
    const deadline = Date.parse(String(item.Item?.inflightSk));
    // Out until 30 s from now: the reaper waits a lease past that, not a lease past its due time.
    expect(deadline).toBeGreaterThanOrEqual(handedAt + WAITED_MS + LEASE_MS);
  }, 30_000);
});
