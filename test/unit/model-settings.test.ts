import { describe, expect, it } from "vitest";
import { modelSettings } from "../model/settings.js";

describe("the model suite's settings from the environment", () => {
  it("runs 20 sequences under npm test, 2,000 under MODEL_LONG, MODEL_RUNS of them when given", () => {
    expect(modelSettings({}).runs).toBe(20);
    expect(modelSettings({ MODEL_LONG: "1" }).runs).toBe(2000);
    expect(modelSettings({ MODEL_RUNS: "12" }).runs).toBe(12);
    expect(modelSettings({ MODEL_RUNS: "" }).runs).toBe(20);
  });

  it("refuses a MODEL_RUNS that is not a positive whole number, naming it", () => {
    for (const value of ["abc", "0", "-5", "2.5", "1e3", "30 sequences", " "]) {
      expect(() => modelSettings({ MODEL_RUNS: value }), value).toThrow(
        `MODEL_RUNS=${JSON.stringify(value)}: not a whole number from 1`,
      );
    }
  });

  it("refuses the other numbers and switches it reads the same way", () => {
    expect(() => modelSettings({ MODEL_MAX_COMMANDS: "many" })).toThrow("MODEL_MAX_COMMANDS=");
    expect(() => modelSettings({ MODEL_TIME_LIMIT_MS: "0" })).toThrow("MODEL_TIME_LIMIT_MS=");
    expect(() => modelSettings({ MODEL_SEED: "x1" })).toThrow("MODEL_SEED=");
    expect(() => modelSettings({ MODEL_LONG: "true" })).toThrow("MODEL_LONG=");
    expect(() => modelSettings({ MODEL_SURVEY: "yes" })).toThrow("MODEL_SURVEY=");
    // fast-check prints a failure's seed as a signed 32-bit integer.
    expect(modelSettings({ MODEL_SEED: "-1234" }).seed).toBe(-1234);
    expect(modelSettings({ MODEL_LONG: "0" }).long).toBe(false);
  });
});
