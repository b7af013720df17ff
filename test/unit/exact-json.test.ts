import { describe, expect, it } from "vitest";
import { asDoubles, isExactNumber, parseExact, stringifyExact } from "../../shared/exact-json.js";

describe("a payload's JSON, numbers exact", () => {
  it("keeps the digits of a number a double would change, and writes them back as sent", () => {
    const text =
      '{"id":12345678901234567890,"ratio":0.1000000000000000055511151231257827,"tiny":1e-400,"n":[-98765432109876543210987654321]}';
    expect(stringifyExact(parseExact(text))).toBe(text);
    const value = parseExact(text) as { id: unknown };
    expect([isExactNumber(value.id), String(value.id)]).toEqual([true, "12345678901234567890"]);
    expect(asDoubles(value)).toEqual(JSON.parse(text));
  });

  it("reads a number a double holds exactly as JSON.parse does, as every payload stored before holds them", () => {
    // As JSON.stringify wrote a double past 2^53: a double, not kept digits.
    const stored =
      '{"id":12345678901234567000,"big":1.7976931348623157e+308,"x":0.1,"s":"\\ud800"}';
    expect(parseExact(stored)).toEqual(JSON.parse(stored));
    expect(stringifyExact(parseExact(stored))).toBe(stored);
    expect(parseExact('{"a":1.0,"b":1e2}')).toEqual({ a: 1, b: 100 });
  });

  it("reads a key given twice and __proto__ as JSON.parse does", () => {
    const text = '{"a":12345678901234567890,"__proto__":{"x":1},"b":1,"a":2}';
    const value = parseExact(` ${text}`) as Record<string, unknown>;
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(Object.keys(value)).toEqual(["a", "__proto__", "b"]);
    expect(stringifyExact(value)).toBe('{"a":2,"__proto__":{"x":1},"b":1}');
  });
});
