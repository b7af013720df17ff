import { z } from "zod";

/**
 * The one schema of every bounded integer the scheduler takes: the API's fields and query
 * parameters (shared/api/schemas) and the built-in job types' payload fields (shared/job-types),
 * a module of shared/'s own so that both layers import it (a job type may not import the API).
 */

/** A bound's check, which stops the field's later checks when it fails. */
const STOP = { abort: true } as const;

/**
 * An integer from `min` to `max` (a query parameter with `coerce`, read from its text). The bounds
 * are checked first and end the field's checks: a value far past them (1e308, 2^53) is refused
 * naming its own bound, and only that, not also the safe-integer range `int()` checks. The OpenAPI
 * document states the bounds and `integer`.
 */
export function boundedInt(min: number, max: number): z.ZodNumber;
export function boundedInt(
  min: number,
  max: number,
  options: { readonly coerce: true },
): z.ZodCoercedNumber;
export function boundedInt(
  min: number,
  max: number,
  options?: { readonly coerce: true },
): z.ZodNumber | z.ZodCoercedNumber {
  const number = options?.coerce ? z.coerce.number() : z.number();
  return number.min(min, STOP).max(max, STOP).int();
}
