import { describe, expect, it } from "vitest";
import { claimDueEntry } from "../../shared/dispatch/claim.js";
import { horizonOf } from "../../shared/dispatch/dispatcher.js";
import { type TickPass, tickOnce } from "../../shared/dispatch/tick.js";
import type { Engine } from "../../shared/engine.js";
import type { JobContext } from "../../shared/execution/job-contract.js";
import { minuteOf } from "../../shared/keys.js";
import type { DueEntry } from "../../shared/model.js";
import { METRICS } from "../../shared/observability.js";
import { acquireShardLease } from "../../shared/storage/lease.js";
import { caseFixture, type EngineFixture } from "../support/engine-fixture.js";
import { seedJobs } from "../support/seed.js";

/**
 * The rollback rule for plain one-off claims (docs/deploy.md, "Upgrade and rollback"): a claimer
 * that dies between its plain commit and its entry's delete leaves the entry behind, and a claimer
 * of a version before plain claims that meets it deletes the committed claim's run
 * (claim-plain-races, the earlier-version case). So a rollback goes first to this version at
 * `transaction`, then waits 20 minutes. These cases measure that wait on a clock of their own: the
 * stage's ticks (the dispatcher's pass over the shard, then the reaper) a minute apart, 50 s into
 * each minute, plain for STEADY_TICKS minutes before (the passes' line and look-back as in steady
 * state);
 * then the claimer's death; then the ticks of the deploy at `transaction`, with a worker taking
 * what they send, until the entry is gone and its occurrence has run (a one-off: nothing of the
 * job is left for a later tick to read or send), or, while the entry stays, until the first tick
 * past the rule's wait. Each case names how long after the death the first tick found the entry
 * gone, and the occurrence runs once, sent by the reaper (the claimer died before its send).
 */

const SECOND = 1000;
const MINUTE = 60 * SECOND;
/** How far into its minute each tick runs. */
const PHASE_MS = 50 * SECOND;
/** The wait docs/deploy.md asks for between the deploy at `transaction` and the rollback. */
const RULE_WAIT_MS = 20 * MINUTE;
/**
 * The plain ticks before a case's minute. The first scans the shard; from the second on, a pass
 * reads from the line the last completed pass recorded (its backlog), its recent window and the
 * look-back 15 minutes behind that line (lookback.ts), so what a pass reads depends on the last
 * pass's line alone, not on how long passes have run: the shard's line and lease are one item
 * each, overwritten by every pass. Three ticks after the scan leave the state 20 did (each
 * case's exact removal time, backlog and look-back counts hold), for a seventh of the ticks.
 */
const STEADY_TICKS = 4;
/**
 * How long a worker's receive after a tick waits for no more messages. A tick awaits its sends
 * before it returns, so what it sent is in the queue when the receive starts, and one empty
 * receive finds it all: the wait only ends the receive (400 ms a tick was 10 s of a case's time).
 */
const SENT_QUIET_MS = 100;

type Input = Record<string, unknown>;

interface RollbackCase {
  readonly f: EngineFixture;
  /** The case's minute: the steady ticks ran in the 20 minutes before it. */
  readonly m: number;
  /** The stage before the rollback's first step: one-off claims written plain. */
  readonly atPlain: Engine;
  /** The stage after it: this version at `transaction`. */
  readonly atTransaction: Engine;
  /** Sets the case's clock: every component reads it. */
  at(ms: number): void;
  /** One tick at `ms`: the shard's pass, then the reaper. */
  tick(engine: Engine, ms: number): Promise<TickPass>;
}

/** A case's stage, with STEADY_TICKS plain ticks behind it (the first one scans the shard). */
async function rollbackCase(atEnd: (cleanup: () => Promise<void>) => void): Promise<RollbackCase> {
  const time = { ms: Date.now() };
  const f = await caseFixture(atEnd, {
    clock: () => new Date(time.ms),
    settings: {
      shardCount: 1,
      maxShardCount: 1,
      leaseMs: MINUTE,
      // The shortest lookahead: every entry here is due before the tick that reads it, and a
      // pass's line and look-back do not depend on how far ahead its window reaches.
      lookaheadMs: MINUTE,
      // The run starts minutes after its occurrence here (the reaper sends it): still on time.
      misfireGraceMs: 60 * MINUTE,
      oneOffClaimWrites: "plain",
    },
  });
  const atPlain = f.engine;
  const atTransaction: Engine = {
    ...f.engine,
    settings: { ...f.engine.settings, oneOffClaimWrites: "transaction" },
  };
  const at = (ms: number) => {
    time.ms = ms;
  };
  const tick = async (engine: Engine, ms: number): Promise<TickPass> => {
    at(ms);
    const { passes } = await tickOnce(engine, `tick-${ms}`);
    const [pass, ...more] = passes;
    if (!pass || more.length > 0) throw new Error("expected one shard's pass");
    return pass;
  };
  const m = Math.floor(Date.now() / MINUTE) * MINUTE;
  for (let minute = -STEADY_TICKS; minute < 0; minute++) {
    expect((await tick(atPlain, m + minute * MINUTE + PHASE_MS)).outcome).toBe("swept");
  }
  return { f, m, atPlain, atTransaction, at, tick };
}

/** A one-off due at `dueAt`, its entry filed by a writer at `filedAt` (its minute's bucket). */
async function oneOff(f: EngineFixture, jobId: string, dueAt: Date, filedAt: Date) {
  const [job] = await seedJobs(
    f,
    [{ jobId, schedule: { runAt: dueAt.toISOString() }, dueAt, filedAt }],
    filedAt,
  );
  const entry = (await f.dueEntries()).find((e) => e.jobId === jobId);
  if (!job || !entry) throw new Error("not seeded");
  return entry;
}

const entriesOf = async (f: EngineFixture, jobId: string) =>
  (await f.dueEntries()).filter((e) => e.jobId === jobId);

/**
 * While `work` runs, the first delete of `entry` fails: its plain claimer died there (a claim
 * outside a pass stops there; a pass's claim logs it and the pass goes on).
 */
async function withEntryDeleteFailing<T>(
  f: EngineFixture,
  entry: DueEntry,
  work: () => Promise<T>,
): Promise<{ result: T; failed: number }> {
  const name = "entryDeleteFails";
  let failed = 0;
  f.engine.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Input;
      const key = input.Key as Input | undefined;
      if (
        failed === 0 &&
        context.commandName === "DeleteItemCommand" &&
        input.TableName === f.engine.tables.jobs &&
        key?.pk === entry.key.pk &&
        key.sk === entry.key.sk
      ) {
        failed++;
        throw new Error("the claimer died before its entry's delete");
      }
      return next(args);
    },
    { step: "initialize", name },
  );
  try {
    return { result: await work(), failed };
  } finally {
    f.engine.doc.middlewareStack.remove(name);
  }
}

/** A claimer outside the passes (an API's fast path) on a clock at `nowMs`, dying after its commit. */
async function claimAndDie(c: RollbackCase, entry: DueEntry, nowMs: number): Promise<void> {
  c.at(nowMs);
  const now = new Date(nowMs);
  const { result, failed } = await withEntryDeleteFailing(c.f, entry, () =>
    claimDueEntry(c.atPlain, entry, {
      now,
      horizonEnd: horizonOf(now, c.atPlain.settings.lookaheadMs).end,
    }),
  );
  expect(failed).toBe(1);
  expect(result.outcome).toBe("claimed");
  // Its runs are never sent: it died.
}

/**
 * Ticks at `transaction`, a minute apart from the first after `deathMs`, each followed by a worker
 * taking the job's messages, until the entry is gone and the job's handler has run, or until the
 * first tick more than RULE_WAIT_MS after the death: how long after the death the first tick that
 * found the entry gone ran (null: none within the rule's wait did), and the calls of the job's
 * handler by occurrence.
 */
async function ticksUntilGone(
  c: RollbackCase,
  jobId: string,
  deathMs: number,
): Promise<{ goneAfterMs: number | null; calls: [string, number][] }> {
  const calls = new Map<string, number>();
  const counting = async (ctx: JobContext) => {
    calls.set(ctx.scheduledFor, (calls.get(ctx.scheduledFor) ?? 0) + 1);
    return { ok: true };
  };
  const deps = c.f.workerDeps("worker", { noop: counting });
  const first = Math.floor((deathMs - PHASE_MS) / MINUTE) * MINUTE + MINUTE + PHASE_MS;
  let goneAfterMs: number | null = null;
  for (let at = first; ; at += MINUTE) {
    const pass = await c.tick(c.atTransaction, at);
    if (pass.outcome === "swept") expect(pass.failed).toBe(0);
    for (const received of await c.f.receiveAll(c.f.engine.queues.normal, {
      quietMs: SENT_QUIET_MS,
    })) {
      if (received.message.jobId === jobId) await c.f.process(deps, received);
    }
    if (goneAfterMs === null && (await entriesOf(c.f, jobId)).length === 0) {
      goneAfterMs = at - deathMs;
    }
    if ((goneAfterMs !== null && calls.size > 0) || at - deathMs > RULE_WAIT_MS) break;
  }
  return { goneAfterMs, calls: [...calls] };
}

describe.concurrent("a one-off's plain claimer dead after its commit, before its entry's delete: when ticks at transaction remove the entry", () => {
  it("its bucket in the passes' window (an API's fast path claiming what is due now): the next tick's pass meets it, finds the claim recorded and removes it", async ({
    onTestFinished,
  }) => {
    const c = await rollbackCase(onTestFinished);
    const deathMs = c.m + 10 * SECOND;
    const due = new Date(deathMs - 5 * SECOND);
    const entry = await oneOff(c.f, "in-window", due, due);
    await claimAndDie(c, entry, deathMs);

    const { goneAfterMs, calls } = await ticksUntilGone(c, "in-window", deathMs);

    // The tick at m + 50 s: its recent window reads the bucket (m).
    expect(goneAfterMs).toBe(40 * SECOND);
    expect(calls).toEqual([[due.toISOString(), 1]]);
  }, 120_000);

  it("the claimer a pass that died mid-claim: its lease lapses first (a lease after it began), and the pass that takes it over reads on from the last completed pass's line and removes it", async ({
    onTestFinished,
  }) => {
    const c = await rollbackCase(onTestFinished);
    const deathMs = c.m + PHASE_MS;
    const due = new Date(c.m + 10 * SECOND);
    const entry = await oneOff(c.f, "pass-died", due, due);
    c.at(deathMs);
    expect(await acquireShardLease(c.atPlain, 0, "dead-pass", new Date(deathMs))).not.toBeNull();
    await claimAndDie(c, entry, deathMs);

    const { goneAfterMs, calls } = await ticksUntilGone(c, "pass-died", deathMs);

    // The tick a minute on meets the lease at its last instant (lease-held); the next takes it.
    expect(goneAfterMs).toBe(2 * MINUTE);
    expect(calls).toEqual([[due.toISOString(), 1]]);
  }, 120_000);

  /**
   * The claimer an API on a host `behind` minutes behind the passes: its fast path claims the
   * entry it filed in its own minute, behind the passes' line (m - 3: the last tick, at m - 10 s,
   * recorded two minutes before its start), and dies 40 s before the tick at m + 50 s.
   */
  const behindCases: { behind: number; goneAfterMs: number | null; why: string }[] = [
    {
      behind: 3,
      goneAfterMs: 40 * SECOND,
      why: "its bucket at the line: the next tick reads it as backlog",
    },
    {
      behind: 4,
      goneAfterMs: 14 * MINUTE + 40 * SECOND,
      why: "its bucket (m - 4) just behind the line: only the look-back reads it, by the tick whose line passes it by 15 minutes (m + 14 min 50 s); the latest of these cases",
    },
    {
      behind: 18,
      goneAfterMs: 40 * SECOND,
      why: "its bucket (m - 18) the oldest the look-back still reads: the next tick's",
    },
    {
      behind: 19,
      goneAfterMs: null,
      why: "its bucket (m - 19) behind every look-back to come: never read again (a host that far behind is past the clock bound, architecture.md Known limits)",
    },
  ];
  for (const { behind, goneAfterMs: expected, why } of behindCases) {
    it(`its bucket behind the passes' window (the claimer's clock ${behind} min behind): ${why}`, async ({
      onTestFinished,
    }) => {
      const c = await rollbackCase(onTestFinished);
      const jobId = `behind-${behind}`;
      const deathMs = c.m + 10 * SECOND;
      const writerNowMs = deathMs - behind * MINUTE;
      const due = new Date(writerNowMs - 5 * SECOND);
      const entry = await oneOff(c.f, jobId, due, new Date(writerNowMs));
      expect(entry.key.pk).toContain(new Date(c.m - behind * MINUTE).toISOString().slice(0, 16));
      await claimAndDie(c, entry, writerNowMs);

      const { goneAfterMs, calls } = await ticksUntilGone(c, jobId, deathMs);

      expect(goneAfterMs).toBe(expected);
      if (goneAfterMs !== null) expect(goneAfterMs).toBeLessThanOrEqual(RULE_WAIT_MS);
      // Removed or not, the occurrence runs once: the reaper sends the committed claim's run.
      expect(calls).toEqual([[due.toISOString(), 1]]);
    }, 120_000);
  }
});

/**
 * The claimer a pass of the plain deploy whose entry's delete failed (throttled, or failing
 * storage): the claim has committed, so the pass sends its run, logs the entry left "to the next
 * pass", and goes on to complete, recording its line past what it read. When what it read there
 * was behind the look-back's reach for every later pass, the entry is left where no pass reads.
 */
describe.concurrent("a one-off's plain claim by a pass that completes with the entry's delete failed", () => {
  it("claimed by the look-back (its writer 5 min behind): the next tick at transaction removes it", async ({
    onTestFinished,
  }) => {
    const c = await rollbackCase(onTestFinished);
    const writerNowMs = c.m + 10 * SECOND - 5 * MINUTE;
    const due = new Date(writerNowMs - 5 * SECOND);
    const entry = await oneOff(c.f, "lookback-claim", due, new Date(writerNowMs));
    // The look-back reads its bucket (m - 5) at the tick whose line passes it by 15 minutes.
    const claimMs = c.m + 13 * MINUTE + PHASE_MS;
    for (let minute = 0; minute < 13; minute++) {
      expect(await c.tick(c.atPlain, c.m + minute * MINUTE + PHASE_MS)).toMatchObject({
        outcome: "swept",
        runs: 0,
      });
    }
    const { result: claiming, failed } = await withEntryDeleteFailing(c.f, entry, () =>
      c.tick(c.atPlain, claimMs),
    );
    expect(failed).toBe(1);
    expect(claiming).toMatchObject({ outcome: "swept", runs: 1, lookbackEntries: 1 });

    const { goneAfterMs, calls } = await ticksUntilGone(c, "lookback-claim", claimMs);

    expect(goneAfterMs).toBe(MINUTE);
    // How: the claiming pass held its line at the entry's bucket, which the next pass read again.
    expect(claiming).toMatchObject({ sweepFrom: minuteOf(new Date(writerNowMs)) });
    expect(calls).toEqual([[due.toISOString(), 1]]);
  }, 120_000);

  it("claimed from the backlog after 20 minutes without passes (past the look-back's reach): the next tick at transaction removes it", async ({
    onTestFinished,
  }) => {
    const c = await rollbackCase(onTestFinished);
    const due = new Date(c.m + 10 * SECOND);
    const entry = await oneOff(c.f, "backlog-claim", due, due);
    const claimMs = c.m + 20 * MINUTE + PHASE_MS;
    const { result: claiming, failed } = await withEntryDeleteFailing(c.f, entry, () =>
      c.tick(c.atPlain, claimMs),
    );
    expect(failed).toBe(1);
    expect(claiming).toMatchObject({ outcome: "swept", runs: 1, backlogBuckets: 21 });

    const { goneAfterMs, calls } = await ticksUntilGone(c, "backlog-claim", claimMs);

    expect(goneAfterMs).toBe(MINUTE);
    expect(claiming).toMatchObject({ sweepFrom: minuteOf(due) });
    expect(calls).toEqual([[due.toISOString(), 1]]);
  }, 120_000);
});

/**
 * The storage refusing every delete of `entry` (throttling that outlasted the SDK's retries, and
 * this claim's own, `retryOnContention`) until `stop()`: the table failing it pass after pass.
 */
function throttleEntryDeletes(f: EngineFixture, entry: DueEntry): { stop(): void } {
  const name = "entryDeleteThrottled";
  f.engine.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Input;
      const key = input.Key as Input | undefined;
      if (
        context.commandName === "DeleteItemCommand" &&
        input.TableName === f.engine.tables.jobs &&
        key?.pk === entry.key.pk &&
        key.sk === entry.key.sk
      ) {
        throw Object.assign(new Error("Rate of requests exceeds the allowed throughput"), {
          name: "ThrottlingException",
          $retryable: { throttling: true },
          $metadata: { httpStatusCode: 400 },
        });
      }
      return next(args);
    },
    { step: "initialize", name },
  );
  return { stop: () => f.engine.doc.middlewareStack.remove(name) };
}

/** A worker taking the job's messages after each tick, counting its handler's calls by occurrence. */
function countingWorker(c: RollbackCase, jobId: string) {
  const calls = new Map<string, number>();
  const deps = c.f.workerDeps("worker", {
    noop: async (ctx: JobContext) => {
      calls.set(ctx.scheduledFor, (calls.get(ctx.scheduledFor) ?? 0) + 1);
      return { ok: true };
    },
  });
  return {
    calls: () => [...calls],
    async drain() {
      for (const received of await c.f.receiveAll(c.f.engine.queues.normal, {
        quietMs: SENT_QUIET_MS,
      })) {
        if (received.message.jobId === jobId) await c.f.process(deps, received);
      }
    },
  };
}

/** What a pass did to the line and what it read for it: [sweepFrom, failed, backlog, look-back]. */
const lineOf = (pass: TickPass) =>
  pass.outcome === "swept"
    ? [pass.sweepFrom, pass.failed, pass.backlogBuckets, pass.lookbackBuckets]
    : pass.outcome;

/**
 * Reviewer's proof (branch rv-rollback): the held line attacked. A bucket held far behind costs
 * each pass that reads from it the backlog up to its window and the 15 look-back buckets behind
 * the held one again; the death of an API's claimer just after the pass that last read its bucket
 * is the latest removal, not the 14 min 40 s above.
 */
describe.concurrent("reviewer's attacks on a line held at a claimed entry's bucket", () => {
  it("the entry's delete throttled pass after pass (claimed by the look-back, its writer 5 min behind): the line stays at its bucket, each pass reads a backlog bucket more and the same 15 look-back buckets and counts the entry failed, the first pass whose delete goes through removes it and the line moves on; the occurrence runs once", async ({
    onTestFinished,
  }) => {
    const c = await rollbackCase(onTestFinished);
    const jobId = "throttled";
    const writerNowMs = c.m + 10 * SECOND - 5 * MINUTE;
    const due = new Date(writerNowMs - 5 * SECOND);
    const entry = await oneOff(c.f, jobId, due, new Date(writerNowMs));
    const held = minuteOf(new Date(writerNowMs));
    for (let minute = 0; minute < 13; minute++) {
      expect(await c.tick(c.atPlain, c.m + minute * MINUTE + PHASE_MS)).toMatchObject({ runs: 0 });
    }
    const worker = countingWorker(c, jobId);
    const throttled = throttleEntryDeletes(c.f, entry);
    const claimMs = c.m + 13 * MINUTE + PHASE_MS;
    let tick = 0;
    const next = async (engine: Engine) => {
      const pass = await c.tick(engine, claimMs + tick++ * MINUTE);
      await worker.drain();
      return pass;
    };
    try {
      const claiming = await next(c.atPlain);
      expect(claiming).toMatchObject({ runs: 1, lookbackEntries: 1, failed: 0, sweepFrom: held });
      // Counted as left from the claiming pass on, so the operator's rollback waits for it.
      expect(c.f.metrics.sum(METRICS.dueEntryFailures, { handling: "left" })).toBe(1);
      const stuck = [await next(c.atTransaction), await next(c.atTransaction)];
      const stuckPlain = await next(c.atPlain);
      // Held at m - 5: each pass reads from there to its window (m + 12, + 13, + 14), and no
      // look-back (it does not move the line).
      expect([...stuck, stuckPlain].map(lineOf)).toEqual([
        [held, 1, 17, 0],
        [held, 1, 18, 0],
        [held, 1, 19, 0],
      ]);
      expect(await entriesOf(c.f, jobId)).toHaveLength(1);
      expect(c.f.metrics.sum(METRICS.dueEntryFailures, { handling: "left" })).toBe(4);
    } finally {
      throttled.stop();
    }
    const removing = await next(c.atTransaction);
    expect(await entriesOf(c.f, jobId)).toHaveLength(0);
    expect(lineOf(removing)).toEqual([minuteOf(new Date(c.m + 15 * MINUTE)), 0, 20, 15]);
    // The line back in step: one backlog bucket and one look-back bucket a pass.
    expect(lineOf(await next(c.atTransaction))).toEqual([
      minuteOf(new Date(c.m + 16 * MINUTE)),
      0,
      1,
      1,
    ]);
    expect(worker.calls()).toEqual([[due.toISOString(), 1]]);
  }, 180_000);

  it("an API's claimer (its clock 3 min behind) dying 1 s after the tick that last read its bucket (m - 4, as backlog at m - 10 s): the look-back 15 ticks on removes it 14 min 59 s after the death, the latest a tick a minute allows, within 15 minutes and the rule's 20", async ({
    onTestFinished,
  }) => {
    const c = await rollbackCase(onTestFinished);
    const jobId = "behind-just-read";
    const deathMs = c.m - 9 * SECOND;
    const writerNowMs = deathMs - 3 * MINUTE;
    const due = new Date(writerNowMs - 5 * SECOND);
    const entry = await oneOff(c.f, jobId, due, new Date(writerNowMs));
    expect(entry.key.pk).toContain(minuteOf(new Date(c.m - 4 * MINUTE)));
    await claimAndDie(c, entry, writerNowMs);

    const { goneAfterMs, calls } = await ticksUntilGone(c, jobId, deathMs);

    expect(goneAfterMs).toBe(14 * MINUTE + 59 * SECOND);
    expect(goneAfterMs).toBeLessThanOrEqual(15 * MINUTE);
    expect(calls).toEqual([[due.toISOString(), 1]]);
  }, 120_000);
});
