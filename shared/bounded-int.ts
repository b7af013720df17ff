import { z } from "zod";
import { decimalDigitsValue } from "./decimal-digits.js";
import { textHead } from "./storage/stored-text.js";

/**
 * The one schema of every bounded integer the scheduler takes: the API's fields and query
 * parameters (shared/api/schemas) and the built-in job types' payload fields (shared/job-types),
 * a module of shared/'s own so that both layers import it (a job type may not import the API).
 */

/** A bound's check, which stops the field's later checks when it fails. */
const STOP = { abort: true } as const;

/**
 * An integer from `min` to `max` (a query parameter with `fromQuery`, read from its text, which
 * must be decimal digits). The bounds are checked first and end the field's checks: a value far
 * past them (1e308, 2^53) is refused naming its own bound, and only that, not also the
 * safe-integer range `int()` checks. The OpenAPI document states the bounds and `integer`.
 */
export function boundedInt(min: number, max: number): z.ZodNumber;
export function boundedInt(
  min: number,
  max: number,
  options: { readonly fromQuery: true },
): z.ZodPreprocess<z.ZodNumber>;
export function boundedInt(
  min: number,
  max: number,
  options?: { readonly fromQuery: true },
): z.ZodNumber | z.ZodPreprocess<z.ZodNumber> {
  const number = z.number().min(min, STOP).max(max, STOP).int();
  if (!options?.fromQuery) return number;
  return z.preprocess((value, context) => {
    if (typeof value !== "string") return value;
    const digits = decimalDigitsValue(value);
    if (digits !== undefined) return digits;
    context.issues.push({
      code: "custom",
      input: value,
      message: `must be a whole number written in decimal digits (0-9); got ${JSON.stringify(textHead(value, 40))}`,
    });
    return z.NEVER;
  }, number);
}
