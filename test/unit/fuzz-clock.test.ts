import { afterEach, describe, expect, it, vi } from "vitest";
import { fuzzClockStart } from "../support/fuzz-scale.js";

describe("a fuzz suite's clock start", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("is the seed's alone: the same whatever the machine's clock reads", () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.UTC(2026, 11, 7, 21, 32, 9));
    const first = fuzzClockStart(4242);
    vi.setSystemTime(Date.UTC(2026, 11, 7, 21, 32, 39, 517));
    expect(fuzzClockStart(4242)).toEqual(first);
  });

  it("is a whole second from 2020 to 2040, elsewhere for other seeds", () => {
    const seeds = [-(2 ** 31), -1, 0, 1, 2, 4242, 2 ** 31 - 1, 2 ** 32 - 2];
    const starts = seeds.map((seed) => fuzzClockStart(seed).getTime());
    for (const start of starts) {
      expect(start % 1000).toBe(0);
      expect(start).toBeGreaterThanOrEqual(Date.UTC(2020, 0, 1));
      expect(start).toBeLessThan(Date.UTC(2040, 0, 1));
    }
    expect(new Set(starts).size).toBe(seeds.length);
  });
});
