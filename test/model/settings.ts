import { intFromEnv, SEED_RANGE, switchFromEnv } from "../support/env-knobs.js";
import type { ModelLimits } from "./commands.js";

/**
 * What the model suite takes from the environment (model.test.ts says what each is for); a value
 * it cannot take stops the suite naming the variable (test/support/env-knobs.ts).
 */
export interface ModelSettings {
  readonly long: boolean;
  readonly runs: number;
  readonly limits: ModelLimits;
  readonly timeLimitMs: number;
  readonly survey: boolean;
  readonly maxCommands: number;
  readonly seed: number | undefined;
}

export function modelSettings(env: Readonly<Record<string, string | undefined>>): ModelSettings {
  const long = switchFromEnv("MODEL_LONG", env);
  return {
    long,
    runs: intFromEnv("MODEL_RUNS", long ? 2000 : 20, {}, env),
    limits: long
      ? { maxJumpMs: 7 * 86_400_000, maxTotalJumpMs: 10 * 86_400_000, maxOccurrencesPerJob: 300 }
      : { maxJumpMs: 86_400_000, maxTotalJumpMs: 2 * 86_400_000, maxOccurrencesPerJob: 150 },
    /**
     * Sequences and a failure's shrinking stop here (the test fails if not all sequences ran):
     * far above a passing run's time (for npm test's 30 sequences it was about 55 s alone here,
     * 90 s beside the other files; its 20 take about three quarters of that), so it bounds
     * shrinking, not the run.
     */
    timeLimitMs: intFromEnv("MODEL_TIME_LIMIT_MS", long ? 3 * 3_600_000 : 480_000, {}, env),
    /** Survey mode: run every sequence, shrink nothing, and list each broken promise once with an example. */
    survey: switchFromEnv("MODEL_SURVEY", env),
    maxCommands: intFromEnv("MODEL_MAX_COMMANDS", long ? 40 : 25, {}, env),
    seed: intFromEnv("MODEL_SEED", undefined, SEED_RANGE, env),
  };
}
