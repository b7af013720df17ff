import { describe, expect, it } from "vitest";
import { TenantGates } from "../../shared/execution/tenant-gates.js";
import type { Priority } from "../../shared/model.js";

function gatesWith(caps: Map<string, number | null>) {
  const gates = new TenantGates(async (tenantId) => caps.get(tenantId) ?? null);
  const signal = new AbortController().signal;
  const passed: string[] = [];
  const enter = (tenantId: string, name: string, priority: Priority = "normal") => {
    gates.hold(tenantId);
    return gates.enter(tenantId, priority, signal).then((ok) => {
      if (ok) passed.push(name);
      return ok;
    });
  };
  return { gates, passed, enter };
}

describe("TenantGates", () => {
  it("lets a capped tenant's messages past its gate up to the cap, the rest in the order they came", async () => {
    const caps = new Map<string, number | null>([
      ["capped", 2],
      ["free", null],
    ]);
    const { gates, passed, enter } = gatesWith(caps);
    await enter("capped", "c1");
    await enter("capped", "c2");
    const third = enter("capped", "c3");
    const fourth = enter("capped", "c4");
    for (let i = 0; i < 5; i++) await enter("free", `f${i}`);
    expect(passed).toEqual(["c1", "c2", "f0", "f1", "f2", "f3", "f4"]);
    // Waiting at the gate does not count: the capped tenant counts its cap, the free one in full.
    expect(gates.counted()).toBe(2 + 5);
    expect(gates.heldBy("capped")).toBe(4);

    gates.leave("capped");
    expect(await third).toBe(true);
    expect(passed.at(-1)).toBe("c3");
    // A raised cap, read by the next message, lets the one waiting through first.
    caps.set("capped", 5);
    await enter("capped", "c5");
    expect(await fourth).toBe(true);
    expect(passed.slice(-2).sort()).toEqual(["c4", "c5"]);
  });

  it("lets a higher priority through its tenant's gate before the lower ones that came first", async () => {
    const { gates, passed, enter } = gatesWith(new Map([["t", 1]]));
    await enter("t", "running");
    const lows = [enter("t", "low1", "low"), enter("t", "low2", "low")];
    const high = enter("t", "high", "high");
    // All three are waiting at the gate once their caps are read.
    await new Promise((resolve) => setImmediate(resolve));
    gates.leave("t");
    expect(await high).toBe(true);
    expect(passed).toEqual(["running", "high"]);
    gates.leave("t");
    await lows[0];
    expect(passed.at(-1)).toBe("low1");
  });

  it("reaches a backlog already waiting when the cap is raised or lifted, without a run ending", async () => {
    const caps = new Map<string, number | null>([["t", 1]]);
    const { gates, passed, enter } = gatesWith(caps);
    await enter("t", "running");
    const waiting = Array.from({ length: 5 }, (_, i) => enter("t", `w${i}`));
    await gates.refreshCaps();
    expect(passed).toEqual(["running"]);
    caps.set("t", 4);
    await gates.refreshCaps();
    await Promise.all(waiting.slice(0, 3));
    expect(passed).toEqual(["running", "w0", "w1", "w2"]);
    caps.set("t", null);
    await gates.refreshCaps();
    expect(await Promise.all(waiting)).toEqual([true, true, true, true, true]);
  });

  it("ends a wait at the gate without passing when the loop stops", async () => {
    const gates = new TenantGates(async () => 1);
    const stop = new AbortController();
    gates.hold("t");
    await gates.enter("t", "normal", stop.signal);
    gates.hold("t");
    const waiting = gates.enter("t", "normal", stop.signal);
    stop.abort();
    expect(await waiting).toBe(false);
    // It took no place: once the one inside leaves, the next passes at once.
    gates.leave("t");
    gates.hold("t");
    expect(await gates.enter("t", "normal", new AbortController().signal)).toBe(true);
  });
});
