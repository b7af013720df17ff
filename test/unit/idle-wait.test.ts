import { describe, expect, it } from "vitest";
import { IdleWait } from "../../shared/execution/idle-wait.js";
import type { Priority } from "../../shared/model.js";

/** The counts an idle wait's polls ask for when `max` messages may be taken. */
async function askedFor(max: number): Promise<number[]> {
  const asked: number[] = [];
  const wait = new IdleWait(1, () => undefined);
  await wait.next(async (_priority: Priority, count: number) => {
    asked.push(count);
    return [];
  }, max);
  return asked;
}

describe("IdleWait's polls", () => {
  it("ask together for no more than the loop may take, split nearly equally", async () => {
    expect(await askedFor(4)).toEqual([2, 1, 1]);
    expect(await askedFor(3)).toEqual([1, 1, 1]);
    expect(await askedFor(5)).toEqual([2, 2, 1]);
  });
});
