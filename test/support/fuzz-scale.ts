import { intFromEnv, positiveNumberFromEnv, SEED_RANGE } from "./env-knobs.js";

/**
 * How many cases a fuzz suite runs: `npm test` runs each suite's own count, varied by a fresh
 * seed every run; `npm run test:fuzz` runs 20 times as many (FUZZ_SCALE sets the factor): 600
 * schedule cases, 120 valid-request ones and 1,400 rounds of quota-accounting's requests. The
 * suite's time limit grows with it.
 */
const FUZZ_SCALE = positiveNumberFromEnv("FUZZ_SCALE", 1);

export function fuzzCases(inNpmTest: number): number {
  return Math.max(1, Math.round(inNpmTest * FUZZ_SCALE));
}

export function fuzzTimeoutMs(inNpmTest: number): number {
  return Math.round(inNpmTest * Math.max(1, FUZZ_SCALE));
}

/** The seed of a fuzz suite's run: FUZZ_SEED replays one, else a fresh one every run. */
export function fuzzSeed(): number {
  return intFromEnv("FUZZ_SEED", Date.now() % 2 ** 31, SEED_RANGE);
}
