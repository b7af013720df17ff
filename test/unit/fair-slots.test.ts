import { describe, expect, it } from "vitest";
import { DueTimers, FairSlots } from "../../shared/execution/fair-slots.js";

describe("FairSlots and DueTimers", () => {
  it("hand the slots free when runs fall due together to the smaller backlog first, whatever order they asked in", async () => {
    const backlog = new Map([
      ["flood", 40],
      ["few", 4],
    ]);
    const slots = new FairSlots(4, 0.1, (tenantId) => backlog.get(tenantId) ?? 0);
    const due = new DueTimers();
    const signal = new AbortController().signal;
    const dueMs = Date.now() + 50;
    const granted: string[] = [];
    // The flood's four ask first, as their timers would have fired first.
    const asking = ["flood", "flood", "flood", "flood", "few", "few", "few", "few"].map(
      async (tenantId) => {
        await due.until(dueMs, Date.now(), signal);
        await slots.acquire("normal", tenantId);
        granted.push(tenantId);
      },
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(granted).toEqual(["few", "few", "few", "few"]);
    expect(slots.busy).toBe(4);
    // Each freed slot goes to the next waiting run: the flood's now.
    for (let i = 0; i < 4; i++) slots.release("normal");
    await Promise.all(asking);
    expect(granted).toEqual(["few", "few", "few", "few", "flood", "flood", "flood", "flood"]);
  });

  it("wake every message due at one instant in one turn, and a stop at once", async () => {
    const due = new DueTimers();
    const stop = new AbortController();
    const dueMs = Date.now() + 10_000;
    const woken = Promise.all([
      due.until(dueMs, Date.now(), stop.signal),
      due.until(dueMs, Date.now(), stop.signal),
    ]);
    stop.abort();
    await woken;
    // Asked at different moments, woken before the event loop turns once after the first.
    const soon = Date.now() + 30;
    let turned = false;
    const wokeAfterATurn: boolean[] = [];
    const waits: Promise<void>[] = [];
    for (let i = 0; i < 3; i++) {
      waits.push(
        due.until(soon, Date.now(), new AbortController().signal).then(() => {
          if (wokeAfterATurn.length === 0)
            setImmediate(() => {
              turned = true;
            });
          wokeAfterATurn.push(turned);
        }),
      );
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await Promise.all(waits);
    expect(wokeAfterATurn).toEqual([false, false, false]);
  });
});
