import fc from "fast-check";
import { afterAll, beforeAll, describe, it } from "vitest";
import { commandArbitrary, currentVersion, newModel } from "./commands.js";
import {
  checkAttempts,
  checkInvariants,
  checkLastRuns,
  checkReplays,
  checkStarts,
} from "./invariants.js";
import { modelSettings } from "./settings.js";
import { type Expectation, ModelSystem, ModelViolation } from "./system.js";

/**
 * Model-based test (issue 13, item 15): fast-check drives random sequences of
 * API calls (triggers repeated under one `Idempotency-Key` among them; dead letters made and
 * replayed, keyed or not, repeated, sent at once, racing the job's changes), cancels asked of runs
 * whose handler is running, dispatcher and
 * reaper passes, worker deliveries (duplicated, crashing at each seam), clock jumps, injected
 * transaction conflicts, writes applied with their answer lost, and SQS refusing or losing
 * sends and visibility changes, against DynamoDB Local and the SQS emulator, then lets the system settle
 * and checks the scheduler's promises.
 *
 * What the model accepts of the API: no 5xx, but for a trigger with an `Idempotency-Key` whose
 * writes all had their answers (a 5xx then may mean nothing was written) and whose repeat under
 * the key answers a run, one run per key (checked once settled). A write that lost its answer
 * was applied, and the SDK's resend of it gets an answer: a 5xx after that is a broken promise,
 * keyed or not. A pass or a delivery may fail on an SQS failure the model injected; what it left
 * undone must be done by the time the system settles.
 *
 * `npm test` runs twenty short sequences with jumps up to a day (under a minute);
 * `npm run test:model` runs thousands with jumps up to a week (MODEL_RUNS,
 * MODEL_LONG), hours, and says how far it is every 25 sequences. A failure prints its seed and path and the shrunk command
 * list; `MODEL_SEED=<seed> MODEL_PATH=<path> MODEL_REPLAY=<replayPath>` replays it. MODEL_SURVEY and
 * MODEL_ONLY (below) help map failures to defects; MODEL_PROFILE prints the
 * time each sequence and each slow command took. Every run prints what its sequences reached
 * (`model reached`: a dead letter, each answer a replay gave, each race), counted per sequence:
 * a promise whose case no sequence reaches is not checked, whatever the test says.
 */
const env = process.env;
const { long, runs, limits, timeLimitMs, survey, maxCommands, seed } = modelSettings(env);
/** Counts only the violations whose invariant or detail contains this text (to shrink towards one defect). */
const only = env.MODEL_ONLY;
const surveyed = new Map<
  string,
  { count: number; seed: number; run: number; detail: string; commands: string }
>();
/**
 * Enough quiet time for retries (backoff up to 8 min), the reaper and the redrive DLQ to act, and
 * for the message of a Lambda worker that died to come back (the queue's visibility, 15 min): its
 * delivery makes the job's write that the dead worker left (docs/architecture.md, "Result").
 */
const SETTLE_MS = 16 * 60_000;
/** The long run takes hours: it says how far it is every so many sequences. */
const PROGRESS_EVERY = 25;
/** The first instant of every sequence: a fixed day, shifted by the seed within it. */
const EPOCH = Date.UTC(2026, 11, 1);

describe("model: random sequences keep the scheduler's promises", () => {
  let system: ModelSystem;
  beforeAll(async () => {
    system = await ModelSystem.open();
  });
  afterAll(() => system.close());

  it(
    `${runs} sequences of up to ${maxCommands} commands`,
    async () => {
      // Which run of the check a sequence is: with the check's seed, `MODEL_PATH=<run>` replays it.
      let run = -1;
      const reached = new Map<string, number>();
      const began = performance.now();
      const property = fc.asyncProperty(
        fc.integer({ min: 0, max: 0x7fffffff }),
        commandArbitrary(limits, maxCommands, env.MODEL_REPLAY),
        async (systemSeed, commands) => {
          run++;
          const t0 = performance.now();
          const start = EPOCH + (systemSeed % 86_400) * 1000 + (systemSeed % 997);
          const seq = await system.begin(start, systemSeed);
          const model = newModel(limits, start);
          seq.expectation = (jobId): Expectation | null => {
            const job = model.jobs.find((j) => j.id === jobId);
            if (!job) return null;
            const version = currentVersion(job);
            return {
              status: job.status,
              payload: version.payload,
              timeoutMs: job.timeoutMs,
              recurring: !("runAt" in version.schedule),
            };
          };
          try {
            const t1 = performance.now();
            try {
              await fc.asyncModelRun(() => ({ model, real: seq }), commands);
            } catch (error) {
              // A command that broke a promise stops the sequence; its violations are judged below.
              if (!(error instanceof ModelViolation)) throw error;
            }
            const t2 = performance.now();
            if (seq.violations.length === 0) {
              await seq.settle(SETTLE_MS);
              const snapshot = await seq.snapshot();
              if (snapshot.runs.some((r) => r.status === "DEAD")) seq.reached.add("a dead letter");
              if (snapshot.runs.some((r) => r.retryOf !== undefined))
                seq.reached.add("a failure's next attempt");
              if (seq.starts.some((s) => s.applied && s.before.status === "RUNNING"))
                seq.reached.add("a start taking over a lapsed lease");
              seq.violations.push(...checkInvariants(model, snapshot, seq.effectiveSuccesses));
              seq.violations.push(...checkReplays(model, snapshot));
              seq.violations.push(...checkAttempts(model, snapshot));
              seq.violations.push(...checkStarts(seq.starts));
              seq.violations.push(...checkLastRuns(snapshot, await seq.lastRunsAsAnswered()));
            }
            if (env.MODEL_PROFILE)
              process.stderr.write(
                `begin ${Math.round(t1 - t0)} commands ${Math.round(t2 - t1)} settle+check ${Math.round(performance.now() - t2)} ms; crashes ${JSON.stringify(Object.fromEntries(seq.crashes))}, conflicts ${seq.plan.injected.map((i) => i.kind).join(" ")}, answers lost ${seq.plan.lost.map((l) => l.kind).join(" ")}, SQS ${seq.queues.faults.injected.join("; ")}\n`,
              );
            const counted = only
              ? seq.violations.filter((v) => `${v.invariant}: ${v.detail}`.includes(only))
              : seq.violations;
            if (counted.length > 0) {
              if (survey) {
                for (const v of counted) {
                  const seen = surveyed.get(v.invariant);
                  if (seen) seen.count++;
                  else
                    surveyed.set(v.invariant, {
                      count: 1,
                      seed: systemSeed,
                      run,
                      detail: v.detail,
                      commands: String(commands),
                    });
                }
                return;
              }
              throw new ModelViolation(counted);
            }
          } finally {
            for (const what of seq.reached) reached.set(what, (reached.get(what) ?? 0) + 1);
            await system.end(seq);
            if (long && (run + 1) % PROGRESS_EVERY === 0)
              process.stderr.write(
                `model: ${run + 1} sequences run (a failure's shrinking counts too) of ${runs}, ${((performance.now() - began) / 60_000).toFixed(1)} min\n`,
              );
          }
        },
      );
      const details = await fc.check(property, {
        numRuns: runs,
        ...(seed === undefined ? {} : { seed }),
        ...(env.MODEL_PATH ? { path: env.MODEL_PATH } : {}),
        // A failure's shrinking reruns sequences; stop it in time to report what it has.
        interruptAfterTimeLimit: timeLimitMs,
        markInterruptAsFailure: false,
      });
      process.stderr.write(
        `model reached (sequences of ${run + 1}): ${[...reached]
          .sort(([a], [b]) => a.localeCompare(b))
          .map(([what, n]) => `${what} ${n}`)
          .join(", ")}\n`,
      );
      if (survey) {
        const lines = [...surveyed].map(
          ([invariant, s]) =>
            `${s.count}× ${invariant}\n    e.g. system seed ${s.seed} (MODEL_SEED=${details.seed} MODEL_PATH=${s.run} replays it): ${s.detail}\n    after ${s.commands}`,
        );
        process.stderr.write(`model survey, ${details.numRuns} sequences:\n${lines.join("\n")}\n`);
      }
      if (details.failed) {
        const cause = details.errorInstance instanceof Error ? details.errorInstance.message : "";
        const replay = /replayPath="([^"]*)"/.exec(fc.stringify(details.counterexample))?.[1] ?? "";
        throw new Error(
          `${fc.defaultReportMessage(details)}\n\nReplay: MODEL_SEED=${details.seed} MODEL_PATH="${details.counterexamplePath ?? ""}" MODEL_REPLAY="${replay}" npx vitest run test/model\n\nViolations:\n  ${cause}`,
        );
      }
      if (details.interrupted)
        throw new Error(
          `only ${details.numRuns} of ${runs} sequences ran before the time limit; lower MODEL_RUNS or find what got slow`,
        );
    },
    timeLimitMs + 60_000,
  );
});
