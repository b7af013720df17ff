/**
 * How many cases a fuzz suite runs: `npm test` runs each suite's own count, varied by a fresh
 * seed every run; `npm run test:fuzz` runs ten times as many (FUZZ_SCALE sets the factor). The
 * suite's time limit grows with it.
 */
const FUZZ_SCALE = Number(process.env.FUZZ_SCALE ?? 1);

export function fuzzCases(inNpmTest: number): number {
  return Math.max(1, Math.round(inNpmTest * FUZZ_SCALE));
}

export function fuzzTimeoutMs(inNpmTest: number): number {
  return Math.round(inNpmTest * Math.max(1, FUZZ_SCALE));
}
