import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import type { Engine } from "../../shared/engine.js";
import { createJob } from "../../shared/jobs/index.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";

const MINUTE = 60_000;

/**
 * The edge of lookahead-deploy's case: an API on the shortest lookahead (60 s) puts a job's entry
 * before its job when it is due at its fast-path window's end or later (`now + 3 min`), and a pass
 * with a longer lookahead that reads it between the two puts began after the create read its clock
 * (milliseconds later, or on a host whose clock is a little ahead).
 */
describe("a create due exactly at its fast-path window's end, swept between its puts", () => {
  let f: EngineFixture;
  const time = { ms: Date.now() };
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { shardCount: 1, maxShardCount: 1, lookaheadMs: MINUTE },
      clock: () => new Date(time.ms),
    });
  });
  afterAll(() => f.destroy());

  it("leaves the entry for the job's put: the job runs at its time", async () => {
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
          // The pass begins 250 ms after the create read its clock.
          time.ms += 250;
          await dispatchShard(dispatcher, 0, "between-the-puts");
        }
        return next(args);
      },
      { step: "initialize", name: "passBetweenThePuts" },
    );
    const api: Engine = { ...f.engine, doc: clients.doc };
    try {
      // Exactly at the API's window's end (a minute and two): the entry is put before the job.
      const runAt = new Date(time.ms + 3 * MINUTE);
      const { job } = await createJob(api, testJob({ schedule: { runAt: runAt.toISOString() } }));
      expect(passBetween).toBe(true);
      const stored = await getJob(f.engine, job.jobId);
      expect(stored?.nextDueKey).not.toBeNull();
      expect((await f.dueEntries()).map((entry) => entry.key)).toEqual([stored?.nextDueKey]);
      // The next pass claims it as any other, its run due at its runAt.
      await dispatchShard(dispatcher, 0, "after");
      expect((await f.runs()).map((run) => [run.jobId, run.status, run.dueAt])).toEqual([
        [job.jobId, "QUEUED", runAt.toISOString()],
      ]);
    } finally {
      clients.destroy();
    }
  }, 30_000);
});
