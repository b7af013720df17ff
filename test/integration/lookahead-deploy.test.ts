import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import type { Engine } from "../../shared/engine.js";
import { createJob } from "../../shared/jobs/index.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";

const MINUTE = 60_000;

/**
 * A deploy that raises `lookaheadSeconds` runs dispatchers with the new lookahead beside API
 * instances that still have the old one. Such an API writes a job whose entry lies past its own
 * fast-path window as two plain puts, the entry first; a pass with the longer lookahead already
 * sweeps that bucket, and may read the entry before the job's put lands.
 */
describe("a create swept between its entry's put and its job's by a pass with a longer lookahead", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { shardCount: 1, maxShardCount: 1, lookaheadMs: MINUTE },
    });
  });
  afterAll(() => f.destroy());

  it("leaves the entry for the job's put: the job still runs", async () => {
    const dispatcher: Engine = {
      ...f.engine,
      settings: { ...f.engine.settings, lookaheadMs: 10 * MINUTE },
    };
    // A pass has run on the shard before (no first-pass scan).
    await dispatchShard(dispatcher, 0, "before");
    const clients = createTestClients({ maxSockets: 8 });
    let passBetween = false;
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const { Item } = args.input as { Item?: { pk?: unknown } };
        const jobPut =
          (context.commandName ?? "").startsWith("PutItem") && String(Item?.pk).startsWith("JOB#");
        if (jobPut && !passBetween) {
          passBetween = true;
          await dispatchShard(dispatcher, 0, "between-the-puts");
        }
        return next(args);
      },
      { step: "initialize", name: "passBetweenThePuts" },
    );
    const api: Engine = { ...f.engine, doc: clients.doc };
    try {
      // Past the API's window (a minute and two), inside the dispatcher's horizon (ten minutes).
      const runAt = new Date(Date.now() + 5 * MINUTE);
      const { job } = await createJob(api, testJob({ schedule: { runAt: runAt.toISOString() } }));
      expect(passBetween).toBe(true);
      const stored = await getJob(f.engine, job.jobId);
      expect(stored?.nextDueKey).not.toBeNull();
      expect((await f.dueEntries()).map((entry) => entry.key)).toEqual([stored?.nextDueKey]);
      // The next pass claims it as any other.
      await dispatchShard(dispatcher, 0, "after");
      expect((await f.runs()).map((run) => [run.jobId, run.status])).toEqual([
        [job.jobId, "QUEUED"],
      ]);
    } finally {
      clients.destroy();
    }
  }, 30_000);
});
