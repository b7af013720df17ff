import { describe, expect, it } from "vitest";
import { TenantGates } from "../../shared/execution/tenant-gates.js";
import type { Priority } from "../../shared/model.js";

function gatesWith(caps: Map<string, number | null>) {
  const gates = new TenantGates(async (tenantId) => caps.get(tenantId) ?? null);
  const signal = new AbortController().signal;
  const passed: string[] = [];
  const enter = (tenantId: string, name: string, priority: Priority = "normal") => {
    gates.hold(tenantId);
    return gates.enter(tenantId, priority, signal).then((answer) => {
      if (answer === "passed") passed.push(name);
      return answer;
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
    expect(await third).toBe("passed");
    expect(passed.at(-1)).toBe("c3");
    // A raised cap, read by the next message, lets the one waiting through first.
    caps.set("capped", 5);
    await enter("capped", "c5");
    expect(await fourth).toBe("passed");
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
    expect(await high).toBe("passed");
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
    expect(await Promise.all(waiting)).toEqual(["passed", "passed", "passed", "passed", "passed"]);
  });

  it("ends a wait at the gate without passing when the loop stops", async () => {
    const gates = new TenantGates(async () => 1);
    const stop = new AbortController();
    gates.hold("t");
    await gates.enter("t", "normal", stop.signal);
    gates.hold("t");
    const waiting = gates.enter("t", "normal", stop.signal);
    stop.abort();
    expect(await waiting).toBe("stopped");
    // It took no place: once the one inside leaves, the next passes at once.
    gates.leave("t");
    gates.hold("t");
    expect(await gates.enter("t", "normal", new AbortController().signal)).toBe("passed");
  });

  it("turns a message away rather than keep more waiting at its gate, or at all the gates, than it may", async () => {
    const gates = new TenantGates(async (tenantId) => (tenantId === "free" ? null : 1), undefined, {
      perTenant: 2,
      total: 3,
    });
    const signal = new AbortController().signal;
    const enter = (tenantId: string, priority: Priority = "normal") => {
      gates.hold(tenantId);
      return gates.enter(tenantId, priority, signal);
    };
    expect(await enter("a")).toBe("passed");
    const aWaiting = [enter("a"), enter("a")];
    // Two waiting at a's gate: a third is turned away, and the loop is told it is turning away.
    expect(await enter("a")).toBe("full");
    expect(gates.turningAway("normal")).toBe(true);
    expect(gates.turningAway("high")).toBe(false);
    expect(gates.turningAway()).toBe(true);
    // b's first passes; its second waits (three in all), its third finds all the gates full.
    expect(await enter("b", "high")).toBe("passed");
    const bWaiting = enter("b", "high");
    expect(await enter("b", "high")).toBe("full");
    expect(await enter("c")).toBe("passed");
    expect(await enter("c")).toBe("full");
    // A tenant with no cap never waits, however full the gates.
    expect(await enter("free")).toBe("passed");
    expect(gates.turningAway()).toBe(true);
    // One of a's passes: a place at the gates is free again.
    gates.leave("a");
    expect(await aWaiting[0]).toBe("passed");
    const cWaiting = enter("c");
    gates.leave("b");
    expect(await bWaiting).toBe("passed");
    gates.leave("a");
    expect(await aWaiting[1]).toBe("passed");
    gates.leave("c");
    expect(await cWaiting).toBe("passed");
    // None waiting: no backlog is coming in, whatever the last answer was.
    await new Promise((resolve) => setImmediate(resolve));
    expect(gates.turningAway()).toBe(false);
  });

  it("frees a waiting place when a stop ends the wait", async () => {
    const gates = new TenantGates(async () => 1, undefined, { perTenant: 1, total: 1 });
    const stop = new AbortController();
    gates.hold("t");
    expect(await gates.enter("t", "normal", stop.signal)).toBe("passed");
    gates.hold("t");
    const waiting = gates.enter("t", "normal", stop.signal);
    gates.hold("u");
    expect(await gates.enter("u", "normal", new AbortController().signal)).toBe("passed");
    gates.hold("u");
    expect(await gates.enter("u", "normal", new AbortController().signal)).toBe("full");
    stop.abort();
    expect(await waiting).toBe("stopped");
    gates.hold("u");
    const uWaiting = gates.enter("u", "normal", new AbortController().signal);
    gates.leave("u");
    expect(await uWaiting).toBe("passed");
  });
});

describe("TenantGates.turningAway", () => {
  it("stops saying it turns a priority's messages away once one of that priority passes its gate", async () => {
    const gates = new TenantGates(async (tenantId) => (tenantId === "free" ? null : 1), undefined, {
      perTenant: 1,
      total: 1,
    });
    const signal = new AbortController().signal;
    const enter = (tenantId: string) => {
      gates.hold(tenantId);
      return gates.enter(tenantId, "normal", signal);
    };
    expect(await enter("capped")).toBe("passed");
    const waiting = enter("capped");
    expect(await enter("capped")).toBe("full");
    expect(gates.turningAway("normal")).toBe(true);
    // A message of another tenant passes: what comes in at this priority is no backlog now.
    expect(await enter("free")).toBe("passed");
    expect(gates.turningAway("normal")).toBe(false);
    gates.leave("capped");
    expect(await waiting).toBe("passed");
  });
});
