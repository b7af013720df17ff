/**
 * An integer as written: decimal digits only. What Number() would also read (`0x10` as 16, `1e1`
 * as 10, ` 5`, `+5`, `5.0`, `-0`, an empty value as 0) is refused, so that a value is read as the
 * number its writer wrote or not at all.
 */
const DECIMAL_DIGITS = /^[0-9]+$/;

/**
 * The one reader of an integer given as text: the API's query parameters (shared/bounded-int.ts),
 * the deployment's settings (CDK context, infra/settings-context.ts) and the handlers' variables
 * (shared/config.ts). undefined for anything but decimal digits. No sign: none of them takes a
 * negative, and each one's range check refuses 0 where it must.
 */
export function decimalDigitsValue(text: string): number | undefined {
  return DECIMAL_DIGITS.test(text) ? Number(text) : undefined;
}

const DECIMAL_FRACTION = /^[0-9]+(\.[0-9]+)?$/;

/**
 * A number as written: decimal digits, with one point between digits if it has a fraction (`0.25`,
 * `1`); `0x0`, `2e-1`, `.2`, `0.`, a sign or white space are refused, as for an integer.
 */
export function decimalNumberValue(text: string): number | undefined {
  return DECIMAL_FRACTION.test(text) ? Number(text) : undefined;
}
