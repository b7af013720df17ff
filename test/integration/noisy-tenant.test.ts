import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { horizonOf, sweepShard } from "../../shared/dispatch/dispatcher.js";
import { decodeRunMessage } from "../../shared/queue/work-queue.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { type SeedSpec, seedJobs } from "../support/seed.js";

const SECOND = 1000;
const MINUTE = 60 * SECOND;

/** The tenant of every run the engine sends, in the order sent. */
function recordSends(f: EngineFixture): { tenants: string[]; stop(): void } {
  const tenants: string[] = [];
  const name = `noisy-sends-${Math.random()}`;
  f.engine.sqs.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === "SendMessageBatchCommand") {
        const input = args.input as { Entries?: { MessageBody?: string }[] };
        for (const entry of input.Entries ?? []) {
          const message = decodeRunMessage(entry.MessageBody);
          if (message) tenants.push(message.tenantId);
        }
      }
      return next(args);
    },
    { step: "initialize", name },
  );
  return { tenants, stop: () => f.engine.sqs.middlewareStack.remove(name) };
}

const oneOffs = (tenantId: string, prefix: string, count: number, dueAt: Date): SeedSpec[] =>
  Array.from({ length: count }, (_, i) => ({
    jobId: `${prefix}${String(i).padStart(5, "0")}`,
    schedule: { runAt: dueAt.toISOString() },
    dueAt,
    tenantId,
  }));

/**
 * A tenant with many entries in a shard's recent buckets, beside a tenant with one: where in the
 * pass the quiet tenant's run is sent. The pass's clock is fixed 20 s into a minute, so which
 * bucket each entry sits in is known; the claims go one at a time, so the order of the sends is
 * the order of the claims.
 */
async function sweepRecent(
  f: EngineFixture,
  now: Date,
  concurrency: number,
): Promise<{ tenants: string[]; runs: number }> {
  const recording = recordSends(f);
  try {
    const horizon = horizonOf(now, f.engine.settings.lookaheadMs);
    const stats = await sweepShard(f.engine, 0, {
      from: new Date(now.getTime() - 2 * MINUTE),
      to: new Date(horizon.end.getTime() - 1),
      now,
      horizonEnd: horizon.end,
      concurrency,
    });
    return { tenants: recording.tenants, runs: stats.runs };
  } finally {
    recording.stop();
  }
}

describe("a noisy tenant's entries in a dispatcher pass", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { shardCount: 1, maxShardCount: 1 } });
  });
  afterAll(() => f.destroy());

  async function sweepAt(now: Date, specs: readonly SeedSpec[]): Promise<string[]> {
    await seedJobs(f, specs, now);
    const { tenants, runs } = await sweepRecent(f, now, 1);
    expect(runs).toBe(specs.length);
    return tenants;
  }

  it("does not hold another tenant's run due now behind its overdue entries in the minute before", async () => {
    // 20 s into a minute: the noisy tenant's 150 one-offs were due 25 s ago (the minute before's
    // bucket: fast-path claims that failed, say), the quiet tenant's is due in 5 s (this minute's).
    const now = new Date(Math.floor(Date.now() / MINUTE) * MINUTE + 20 * SECOND);
    const tenants = await sweepAt(now, [
      ...oneOffs("t-noisy-overdue", "a1-", 150, new Date(now.getTime() - 25 * SECOND)),
      ...oneOffs("t-quiet-due", "z1-", 1, new Date(now.getTime() + 5 * SECOND)),
    ]);
    // Both minutes have begun: their entries take turns, so the quiet run goes out among the first,
    // not after the noisy tenant's 150 (each claim here takes about 10 ms; 50,000 take minutes).
    expect(tenants.indexOf("t-quiet-due")).toBeLessThanOrEqual(2);
  }, 120_000);

  it("still claims a minute to come after every entry of the minute before it, whoever's", async () => {
    // Due first, claimed first: the quiet tenant's run of the next minute waits for the noisy
    // tenant's of this one, which are due before it (and are not late).
    const now = new Date(Math.floor(Date.now() / MINUTE) * MINUTE + 20 * SECOND);
    const tenants = await sweepAt(now, [
      ...oneOffs("t-noisy-now", "a2-", 30, new Date(now.getTime() + 10 * SECOND)),
      ...oneOffs("t-quiet-next", "z2-", 1, new Date(now.getTime() + 50 * SECOND)),
    ]);
    expect(tenants.indexOf("t-quiet-next")).toBe(30);
  }, 120_000);
});
