/**
 * The numbers and switches the test suites and benches take from the environment (MODEL_RUNS,
 * FUZZ_SCALE, CHAOS_WINDOW_SECONDS, …). A value that is none of them stops the suite, naming the
 * variable: read with `Number`, `abc` was NaN and `-5` ran whatever those made of the suite, without
 * a word. Unset or empty (`MODEL_RUNS= npx vitest …`), a knob takes its default.
 */
type Env = Readonly<Record<string, string | undefined>>;

/** What a 32-bit seed may be: fast-check prints a failure's seed signed, mulberry32 takes any. */
export const SEED_RANGE = { min: -(2 ** 31), max: 2 ** 32 - 1 } as const;

function textOf(env: Env, name: string): string | undefined {
  const text = env[name];
  return text === undefined || text === "" ? undefined : text;
}

/** A whole number from `min` (1 unless given) to `max`, written in digits. */
export function intFromEnv<Fallback extends number | undefined>(
  name: string,
  fallback: Fallback,
  range: { readonly min?: number; readonly max?: number } = {},
  env: Env = process.env,
): number | Fallback {
  const { min = 1, max = Number.MAX_SAFE_INTEGER } = range;
  const text = textOf(env, name);
  if (text === undefined) return fallback;
  const value = /^-?\d+$/.test(text) ? Number(text) : Number.NaN;
  if (!(value >= min && value <= max))
    throw new Error(`${name}=${JSON.stringify(text)}: not a whole number from ${min} to ${max}`);
  return value;
}

/** A number above 0, a fraction allowed (`FUZZ_SCALE=0.5`). */
export function positiveNumberFromEnv(
  name: string,
  fallback: number,
  env: Env = process.env,
): number {
  const text = textOf(env, name);
  if (text === undefined) return fallback;
  const value = /^\d*\.?\d+$/.test(text) ? Number(text) : Number.NaN;
  if (!(value > 0 && Number.isFinite(value)))
    throw new Error(`${name}=${JSON.stringify(text)}: not a number above 0`);
  return value;
}

/** A switch: `1` on, `0` (or unset) off. */
export function switchFromEnv(name: string, env: Env = process.env): boolean {
  const text = textOf(env, name);
  if (text === undefined || text === "0") return false;
  if (text === "1") return true;
  throw new Error(`${name}=${JSON.stringify(text)}: 1 turns it on, 0 or unset off`);
}
