import { describe, expect, it } from "vitest";
import {
  intFromEnv,
  positiveNumberFromEnv,
  SEED_RANGE,
  switchFromEnv,
} from "../support/env-knobs.js";

describe("the test suites' knobs from the environment", () => {
  it("takes a whole number within its range, its default when unset or empty", () => {
    expect(intFromEnv("CHAOS_WINDOW_SECONDS", 20, {}, {})).toBe(20);
    expect(intFromEnv("CHAOS_WINDOW_SECONDS", 20, {}, { CHAOS_WINDOW_SECONDS: "" })).toBe(20);
    expect(intFromEnv("CHAOS_WINDOW_SECONDS", 20, {}, { CHAOS_WINDOW_SECONDS: "100" })).toBe(100);
    expect(intFromEnv("PORT", 0, { min: 0, max: 65_535 }, { PORT: "0" })).toBe(0);
    expect(intFromEnv("FUZZ_SEED", 7, SEED_RANGE, { FUZZ_SEED: "-2147483648" })).toBe(-(2 ** 31));
    expect(() => intFromEnv("PORT", 0, { min: 0, max: 65_535 }, { PORT: "65536" })).toThrow(
      'PORT="65536": not a whole number from 0 to 65535',
    );
    expect(() => intFromEnv("FUZZ_SEED", 7, SEED_RANGE, { FUZZ_SEED: "0x10" })).toThrow(
      'FUZZ_SEED="0x10"',
    );
  });

  it("takes a number above 0, a fraction too", () => {
    expect(positiveNumberFromEnv("FUZZ_SCALE", 1, {})).toBe(1);
    expect(positiveNumberFromEnv("FUZZ_SCALE", 1, { FUZZ_SCALE: "0.5" })).toBe(0.5);
    expect(positiveNumberFromEnv("FUZZ_SCALE", 1, { FUZZ_SCALE: "10" })).toBe(10);
    for (const value of ["abc", "0", "-1", "Infinity", "1e400", "ten"]) {
      expect(() => positiveNumberFromEnv("FUZZ_SCALE", 1, { FUZZ_SCALE: value }), value).toThrow(
        `FUZZ_SCALE=${JSON.stringify(value)}: not a number above 0`,
      );
    }
  });

  it("takes a switch as 1 or 0", () => {
    expect(switchFromEnv("MODEL_LONG", {})).toBe(false);
    expect(switchFromEnv("MODEL_LONG", { MODEL_LONG: "0" })).toBe(false);
    expect(switchFromEnv("MODEL_LONG", { MODEL_LONG: "1" })).toBe(true);
    expect(() => switchFromEnv("MODEL_LONG", { MODEL_LONG: "yes" })).toThrow('MODEL_LONG="yes"');
  });
});
