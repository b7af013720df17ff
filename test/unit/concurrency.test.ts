import { describe, expect, it } from "vitest";
import { sleep } from "../../shared/clock.js";
import { forEachConcurrently } from "../../shared/concurrency.js";

describe("forEachConcurrently", () => {
  it("tries every item when one fails, and throws the first failure only once all have settled", async () => {
    const finished: number[] = [];
    const run = forEachConcurrently([1, 2, 3, 4], 2, async (item) => {
      if (item === 1) throw new Error("item 1 failed");
      await sleep(20 * item);
      finished.push(item);
    });
    await expect(run).rejects.toThrow("item 1 failed");
    expect(finished.sort()).toEqual([2, 3, 4]);
  });

  it("keeps at most `concurrency` items in flight", async () => {
    let inFlight = 0;
    let peak = 0;
    await forEachConcurrently([1, 2, 3, 4, 5, 6], 3, async () => {
      inFlight++;
      peak = Math.max(peak, inFlight);
      await sleep(5);
      inFlight--;
    });
    expect(peak).toBe(3);
  });
});
