import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fanOutTick } from "../../shared/dispatch/tick-fan-out.js";
import type { DispatcherEvent } from "../../shared/dispatch/tick-shards.js";
import { LAMBDA_INVOKE_CONCURRENCY } from "../../shared/lambda-client.js";
import { METRICS } from "../../shared/observability.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";

/** The tick Lambda's timeout, and the time between ticks. */
const TICK_MS = 60_000;
/** One Invoke on a connection gone silent: Lambda's 3 attempts, each cut at 5 s. */
const SILENT_INVOKE_MS = 15_000;
/** More shards than 50-at-a-time Invokes of 15 s fit in a minute beside the reaper. */
const SHARDS = 120;

let nowMs = Date.parse("2026-12-06T10:00:00.000Z");
let f: EngineFixture;
beforeEach(async () => {
  nowMs = Date.parse("2026-12-06T10:00:00.000Z");
  f = await createEngineFixture({
    settings: { shardCount: SHARDS, maxShardCount: SHARDS },
    clock: () => new Date(nowMs),
  });
});
afterEach(() => f.destroy());

/**
 * One tick as a Lambda invocation whose fan-out begins with `startMs` left (less than the minute:
 * its read of the shards was slow) and whose dispatcher Invokes answer at once until `silentFrom`
 * have started, then hang on a silent connection until the client's limits end them: the Invokes
 * in flight at once end together, 15 s on its countdown (`remainingMs`), which nothing else moves.
 */
async function silentTick(startMs = TICK_MS, silentFrom = 0) {
  let elapsedMs = 0;
  const invoked: number[] = [];
  const errors: { message: string; fields: Record<string, unknown> }[] = [];
  const log = {
    ...f.engine.obs.log,
    error: (message: string, fields: Record<string, unknown> = {}) => {
      errors.push({ message, fields });
    },
  };
  const engine = { ...f.engine, obs: { ...f.engine.obs, log } };
  const outcome = await fanOutTick(engine, {
    invoke: async (event: DispatcherEvent) => {
      if (invoked.push(event.shard) <= silentFrom) return;
      const began = elapsedMs;
      // Every lane starts its Invoke before any of them ends: they are in flight together.
      await new Promise((resolve) => setImmediate(resolve));
      elapsedMs = Math.max(elapsedMs, began + SILENT_INVOKE_MS);
      throw Object.assign(new Error("connection timed out"), { name: "TimeoutError" });
    },
    remainingMs: () => startMs - elapsedMs,
  }).then(
    () => "returned",
    (error: unknown) => String(error),
  );
  const reached = f.metrics.points.filter((p) => p.name === METRICS.reaperShardsReached);
  return {
    outcome,
    invoked,
    errors,
    reached: reached.at(-1)?.value,
    reaperLeftMs: startMs - elapsedMs,
  };
}

describe("the tick's fan-out within its minute", () => {
  it("with every Invoke hanging, stops starting them in time for the reaper, and fails", async () => {
    const tick = await silentTick();
    // The reaper read every shard: it was left its time.
    expect(tick.reached).toBe(SHARDS);
    // One round of Invokes, then none: the rest would have ended past the reaper's time.
    expect(tick.invoked).toHaveLength(LAMBDA_INVOKE_CONCURRENCY);
    // The shards left are logged, and the tick fails (its errors alarm counts it).
    const left = tick.errors.find((e) => e.message.startsWith("tick ran out of time"));
    expect(left?.fields.shards).toHaveLength(SHARDS - LAMBDA_INVOKE_CONCURRENCY);
    expect(
      [...tick.invoked, ...((left?.fields.shards as number[] | undefined) ?? [])].sort(
        (a, b) => a - b,
      ),
    ).toEqual(Array.from({ length: SHARDS }, (_, shard) => shard));
    expect(tick.outcome).toMatch(/TimeoutError/);
  }, 60_000);

  it("the ticks after one that ran out of time invoke the shards it left", async () => {
    const invoked = new Set<number>();
    const rounds = Math.ceil(SHARDS / LAMBDA_INVOKE_CONCURRENCY);
    for (let tick = 0; tick < rounds; tick++) {
      for (const shard of (await silentTick()).invoked) invoked.add(shard);
      nowMs += TICK_MS;
    }
    // Every shard's pass is asked for within as many ticks as it takes rounds of Invokes.
    expect(SHARDS - invoked.size).toBe(0);
  }, 60_000);
});

describe("the tick's fan-out after a slow start", () => {
  it("a tick whose read of the shards took 15 s (DynamoDB's retries) still invokes the dispatchers, whose Invokes answer at once", async () => {
    const invoked: number[] = [];
    const outcome = await fanOutTick(f.engine, {
      invoke: async (event: DispatcherEvent) => {
        invoked.push(event.shard);
      },
      // 15 s of the minute gone before the fan-out: the shards' read met a timeout and its retry.
      remainingMs: () => TICK_MS - 15_000,
    }).then(
      () => "returned",
      (error: unknown) => String(error),
    );
    // Each Invoke answers in milliseconds: all 120 fit in a second beside the reaper's 30.
    expect(invoked).toHaveLength(SHARDS);
    expect(outcome).toBe("returned");
  }, 60_000);
});

describe("the tick's fan-out when the Invokes slow down", () => {
  it("a fan-out begun with less than an Invoke's longest and the reaper's margin (34 s) starts none, and the reaper reads every shard", async () => {
    // 26 s of the minute gone on the shards' read; the Invokes would answer at once, then hang.
    const tick = await silentTick(TICK_MS - 26_000, LAMBDA_INVOKE_CONCURRENCY);
    expect(tick.invoked).toEqual([]);
    // The reaper's least is its 20 s margin and 10 s of shards: 30 s.
    expect(tick.reaperLeftMs).toBeGreaterThanOrEqual(30_000);
    expect(tick.reached).toBe(SHARDS);
    const left = tick.errors.find((e) => e.message.startsWith("tick ran out of time"));
    expect(left?.fields.shards).toHaveLength(SHARDS);
  }, 60_000);

  it("every Invoke hanging after a slow read: the reaper still reaches the shards", async () => {
    const tick = await silentTick(TICK_MS - 26_000, 0);
    expect(tick.reached).toBe(SHARDS);
  }, 60_000);

  it("Invokes answering at once, then hanging, with 45 s left: the round started on the first's times still leaves the reaper its least", async () => {
    const tick = await silentTick(TICK_MS - 15_000, LAMBDA_INVOKE_CONCURRENCY);
    expect(tick.invoked).toHaveLength(2 * LAMBDA_INVOKE_CONCURRENCY);
    expect(tick.reaperLeftMs).toBeGreaterThanOrEqual(30_000);
    expect(tick.reached).toBe(SHARDS);
  }, 60_000);
});
