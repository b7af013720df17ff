import { intFromEnv, positiveNumberFromEnv, SEED_RANGE } from "./env-knobs.js";
import { mulberry32 } from "./mulberry32.js";

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

const FIRST_START_S = Date.UTC(2020, 0, 1) / 1000;
const LAST_START_S = Date.UTC(2040, 0, 1) / 1000;

/**
 * The instant a fuzz suite's clock starts at, a whole second from 2020 to 2040 drawn from the
 * run's seed: the handlers' answers depend on their `now`, so a replay of FUZZ_SEED needs the same
 * clock as well as the same cases, and a fresh seed still starts the clock somewhere new.
 */
export function fuzzClockStart(seed: number): Date {
  const second = FIRST_START_S + Math.floor(mulberry32(seed)() * (LAST_START_S - FIRST_START_S));
  return new Date(second * 1000);
}
