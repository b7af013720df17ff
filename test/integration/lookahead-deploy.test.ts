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
 * fast-path window (a minute and two at the shortest lookahead) as two plain puts, the entry first;
 * a pass with the longer lookahead already sweeps that bucket, and may read the entry before the
 * job's put lands. At the window's very end that pass may also have begun after the create read its
 * clock (milliseconds later, or on a host whose clock is a little ahead).
 */
describe.each([
  { due: "past the API's window", runAfterMs: 5 * MINUTE, passLateMs: 0 },
  { due: "exactly at the API's window's end", runAfterMs: 3 * MINUTE, passLateMs: 250 },
])(
  "a create due $due, swept between its entry's put and its job's by a pass with a longer lookahead, begun $passLateMs ms after the create's clock",
  ({ runAfterMs, passLateMs }) => {
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
            (context.commandName ?? "").startsWith("PutItem") &&
            String(Item?.pk).startsWith("JOB#");
          if (jobPut && !passBetween) {
            passBetween = true;
            time.ms += passLateMs;
            await dispatchShard(dispatcher, 0, "between-the-puts");
          }
          return next(args);
        },
        { step: "initialize", name: "passBetweenThePuts" },
      );
      const api: Engine = { ...f.engine, doc: clients.doc };
      try {
        const runAt = new Date(time.ms + runAfterMs);
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
  },
);
