import { isSafeNumber, LosslessNumber, parse, stringify } from "lossless-json";

/**
 * A job's payload holds its caller's numbers, and the API answers them as written: a 64-bit id
 * past 2^53 (`12345678901234567890`) that JSON.parse would read as `12345678901234567000`. The
 * client reads JSON so: such a number as lossless-json's `LosslessNumber` (`String()` gives its
 * digits), every other as the `number` JSON.parse makes, and writes a `LosslessNumber` as its
 * digits. (The client talks HTTP only: this is its own copy of the API's shared/exact-json.ts.)
 */
export function readJson(text: string): unknown {
  const plain: unknown = JSON.parse(text);
  // Written back as it is, the text lost nothing to doubles: most answers.
  if (JSON.stringify(plain) === text) return plain;
  try {
    return parse(text, null, {
      parseNumber: (digits) =>
        isSafeNumber(digits) || String(Number(digits)) === digits
          ? Number(digits)
          : new LosslessNumber(digits),
      onDuplicateKey: ({ newValue }) => newValue,
    });
  } catch {
    // Nested past what that recursive parser's stack holds (no answer of the API is): doubles.
    return plain;
  }
}

/** JSON as JSON.stringify writes it (`indent` spaces a level), a `LosslessNumber` as its digits. */
export function writeJson(value: unknown, indent = 0): string {
  return stringify(value, undefined, indent) ?? "null";
}

/** The statuses of an answer that has no body (new Response refuses one for them). */
export const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([204, 205, 304]);

/**
 * An answer held whole (`body`), whose `json()` reads it with `readJson`, and whose URL is `url`
 * (a Response made here has none; an error answer is named by it).
 */
export function exactJsonAnswer(
  body: ConstructorParameters<typeof Response>[0],
  init: ResponseInit,
  url = "",
): Response {
  const answer = new Response(body, init);
  Object.defineProperties(answer, {
    json: { value: async (): Promise<unknown> => readJson(await answer.text()) },
    url: { value: url },
  });
  return answer;
}
