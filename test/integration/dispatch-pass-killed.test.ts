import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dispatchShard, type PassResult } from "../../shared/dispatch/dispatcher.js";
import { bucketKey } from "../../shared/keys.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";
import { seedJobs } from "../support/seed.js";
import { waitFor } from "../support/wait.js";

/**
 * The rest of a pass's recent window (due from `aheadFromMs` on: a minute or more past half a
 * lease) is claimed after the backlog. With the default 60 s lease the dispatcher's Lambda stops
 * 60 s after the pass began, and the rest begins 90 to 150 s after it: a backlog chunk begun before
 * the budget (30 s) and still claiming at 60 s would have the pass stopped before the rest is read,
 * and the shard's lease (taken until 60 s on) keeps the next tick out, so the rest's first entries
 * would wait for the tick 120 s on. The pass claims the rest once its budget ends, beside the chunk.
 */
const SECOND = 1000;
const MINUTE = 60 * SECOND;

function swept(pass: PassResult) {
  if (pass.outcome !== "swept") throw new Error(`pass ended ${pass.outcome}`);
  return pass;
}

describe("a pass killed by its Lambda timeout in a backlog chunk", () => {
  let f: EngineFixture;
  const time = { ms: Math.floor(Date.now() / MINUTE) * MINUTE + 5 * SECOND };
  beforeAll(async () => {
    f = await createEngineFixture({
      settings: { shardCount: 1, maxShardCount: 1 },
      clock: () => new Date(time.ms),
    });
  });
  afterAll(() => f.destroy());

  it("has claimed the rest of its window's entries due before the next pass the shard's lease lets run", async () => {
    swept(await dispatchShard(f.engine, 0, "before-gap"));
    const before = new Date(time.ms);
    // Ten minutes without a pass; then the pass at T (5 s into its minute): its rest of the window
    // begins at T + 115 s.
    const T = before.getTime() + 10 * MINUTE;
    const lateDue = new Date(before.getTime() + 5 * MINUTE);
    const restDue = new Date(T + 118 * SECOND);
    await seedJobs(
      f,
      [
        { jobId: "backlog-dense", schedule: { runAt: lateDue.toISOString() }, dueAt: lateDue },
        { jobId: "window-rest", schedule: { runAt: restDue.toISOString() }, dueAt: restDue },
      ],
      before,
    );
    time.ms = T;
    // The backlog bucket's read stands for a chunk whose claims outlast the Lambda: it never ends.
    const clients = createTestClients();
    let reached: () => void = () => undefined;
    const inBacklog = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let kill: (error: Error) => void = () => undefined;
    const killed = new Promise<never>((_, reject) => {
      kill = reject;
    });
    killed.catch(() => undefined);
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { ExpressionAttributeValues?: Record<string, unknown> };
        if (
          (context.commandName ?? "").startsWith("Query") &&
          input.ExpressionAttributeValues?.[":pk"] === bucketKey(lateDue, 0)
        ) {
          reached();
          await killed;
        }
        return next(args);
      },
      { step: "initialize", name: "backlogOutlastsTheLambda" },
    );
    const dying = dispatchShard({ ...f.engine, doc: clients.doc }, 0, "killed-at-timeout");
    dying.catch(() => undefined);
    try {
      await inBacklog;
      const claimed = async () =>
        (await f.runs())
          .filter((r) => r.jobId === "window-rest" || r.jobId === "backlog-dense")
          .map((r) => r.jobId);
      // The tick a minute on: the Lambda has just been killed, its lease is taken until then.
      time.ms = T + 60 * SECOND;
      expect((await dispatchShard(f.engine, 0, "next-tick")).outcome).toBe("lease-held");
      // The next pass that can run comes at the tick 120 s on, after the entry was due (118 s on).
      expect(restDue.getTime()).toBeLessThan(T + 120 * SECOND);
      // The pass looks at its clock each second: past its budget, it claims the rest beside the
      // chunk still under way, half a lease before its Lambda would stop it.
      await waitFor(
        "the rest's entry claimed",
        async () => (await claimed()).includes("window-rest"),
        5_000,
      ).catch(() => undefined);
      expect(await claimed()).toContain("window-rest");
    } finally {
      kill(new Error("killed: the Lambda's timeout"));
      await dying.catch(() => undefined);
      clients.destroy();
    }
  });
});
