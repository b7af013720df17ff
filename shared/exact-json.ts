import { isLosslessNumber, isSafeNumber, LosslessNumber, parse, stringify } from "lossless-json";

/**
 * A job's payload is the caller's JSON, and its numbers are the caller's: a 64-bit id past 2^53
 * (`12345678901234567890`) or a decimal with more digits than a double keeps
 * (`0.1000000000000000055511151231257827`) would be changed by JSON.parse and JSON.stringify. So
 * a payload is read and written here: a number whose double writes its value back exactly is a
 * `number`, as JSON.parse makes it (every number a payload stored before holds, since
 * JSON.stringify wrote it); any other keeps its text, as lossless-json's `LosslessNumber`, and
 * is written back as that text. Everything else is read and written as JSON.parse and
 * JSON.stringify do (the last of a key given twice stands; `__proto__` is a field).
 */

/** A number as exact as its text: a double where one holds its value, else its digits. */
function exactNumber(text: string): number | LosslessNumber {
  const double = Number(text);
  // isSafeNumber compares digits and refuses integers past 2^53, even those a double holds
  // exactly, written as JSON.stringify writes them (12345678901234567000): those are doubles.
  return isSafeNumber(text) || String(double) === text ? double : new LosslessNumber(text);
}

/**
 * JSON text to a value, numbers exact (above). The text's nesting is bounded by whoever read it
 * first; `plain`, when given, is JSON.parse's reading of it, which a caller that has it need not
 * make again.
 */
export function parseExact(text: string, plain: unknown = JSON.parse(text)): unknown {
  // A text JSON.stringify writes back as it is lost nothing to doubles: every payload stored
  // before, and most since, read at JSON.parse's speed (lossless-json's parser takes 4 times it).
  if (JSON.stringify(plain) === text) return plain;
  return parse(text, null, {
    parseNumber: exactNumber,
    onDuplicateKey: ({ newValue }) => newValue,
  });
}

/** A value to JSON text, as JSON.stringify writes it, a kept number as its digits. */
export function stringifyExact(value: unknown): string {
  return stringify(value) ?? "null";
}

/** The value as JSON.parse reads its text: each kept number as the double nearest it. */
export function asDoubles(value: unknown): unknown {
  return JSON.parse(stringifyExact(value));
}

/** A kept number (a payload's number a double would change), for code that must tell it apart. */
export const isExactNumber = (value: unknown): value is LosslessNumber => isLosslessNumber(value);
