import { describe, expect, it } from "vitest";
import { retryAfterSecondsOf } from "../../client/errors.js";
import { retryAfterMs } from "../../shared/execution/webhook-handler.js";

const now = new Date("2026-03-01T09:00:00.000Z");

describe("retryAfterMs: a receiver's Retry-After, as a wait", () => {
  it.each([
    ["120", 120_000],
    [" 5 ", 5_000],
    ["Sun, 01 Mar 2026 09:02:00 GMT", 120_000],
    ["Sun, 01 Mar 2026 09:00:00 GMT", undefined],
    ["Sun, 01 Mar 2026 08:00:00 GMT", undefined],
    ["0", undefined],
    ["-5", undefined],
    ["1.5", undefined],
    ["1e3", undefined],
    ["0x10", undefined],
    ["", undefined],
    ["soon", undefined],
    [null, undefined],
  ])("%j is %j ms", (header, wait) => {
    expect(retryAfterMs(header, now)).toBe(wait);
  });

  it("reads seconds past any date as the largest whole wait", () => {
    expect(retryAfterMs("9".repeat(400), now)).toBe(Number.MAX_SAFE_INTEGER);
  });
});

describe("retryAfterSecondsOf: the API's Retry-After, in seconds, by the clock given", () => {
  it.each([
    ["120", 120],
    [" 5 ", 5],
    ["0", 0],
    ["Sun, 01 Mar 2026 09:02:00 GMT", 120],
    ["Sun, 01 Mar 2026 09:00:00 GMT", 0],
    ["Sun, 01 Mar 2026 08:00:00 GMT", 0],
    ["-3", undefined],
    ["1.5", undefined],
    ["1e3", undefined],
    ["0x10", undefined],
    ["+5", undefined],
    ["", undefined],
    ["soon", undefined],
    [null, undefined],
  ])("%j is %j s", (header, seconds) => {
    expect(retryAfterSecondsOf(header, now.getTime())).toBe(seconds);
  });

  it("reads seconds past any date as a whole wait, not as none", () => {
    expect(retryAfterSecondsOf("9".repeat(400), now.getTime())).toBe(
      Math.ceil(Number.MAX_SAFE_INTEGER / 1000),
    );
  });

  it("rounds a date's part of a second up: it is not due before then", () => {
    expect(retryAfterSecondsOf("Sun, 01 Mar 2026 09:02:00 GMT", now.getTime() + 500)).toBe(120);
  });
});
