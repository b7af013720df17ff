import { describe, expect, it } from "vitest";
import { TenantGates } from "../../shared/execution/tenant-gates.js";

describe("TenantGates", () => {
  it("lets a capped tenant's messages past its gate up to the cap, the rest in the order they came", async () => {
    const caps = new Map<string, number | null>([
      ["capped", 2],
      ["free", null],
    ]);
    const gates = new TenantGates(async (tenantId) => caps.get(tenantId) ?? null);
    const signal = new AbortController().signal;
    const passed: string[] = [];
    const enter = (tenantId: string, name: string) => {
      gates.hold(tenantId);
      return gates.enter(tenantId, signal).then((gate) => {
        passed.push(name);
        return gate;
      });
    };
    const first = await enter("capped", "c1");
    await enter("capped", "c2");
    const third = enter("capped", "c3");
    const fourth = enter("capped", "c4");
    for (let i = 0; i < 5; i++) await enter("free", `f${i}`);
    expect(passed).toEqual(["c1", "c2", "f0", "f1", "f2", "f3", "f4"]);
    expect(first).toEqual({ passed: true, waitedMs: 0 });
    // Waiting at the gate does not count: the capped tenant counts its cap, the free one in full.
    expect(gates.counted()).toBe(2 + 5);

    gates.leave("capped");
    expect((await third).passed).toBe(true);
    expect(passed.at(-1)).toBe("c3");
    // A raised cap, read by the next message, lets the one waiting through first.
    caps.set("capped", 5);
    gates.hold("capped");
    await enter("capped", "c5");
    expect((await fourth).passed).toBe(true);
    expect(passed.slice(-2).sort()).toEqual(["c4", "c5"]);
  });

  it("ends a wait at the gate without passing when the loop stops", async () => {
    const gates = new TenantGates(async () => 1);
    const stop = new AbortController();
    gates.hold("t");
    await gates.enter("t", stop.signal);
    gates.hold("t");
    const waiting = gates.enter("t", stop.signal);
    stop.abort();
    expect((await waiting).passed).toBe(false);
    // It took no place: once the one inside leaves, the next passes at once.
    gates.leave("t");
    gates.hold("t");
    expect(await gates.enter("t", new AbortController().signal)).toEqual({
      passed: true,
      waitedMs: 0,
    });
  });
});
