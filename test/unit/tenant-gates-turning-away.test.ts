import { describe, expect, it } from "vitest";
import { TenantGates } from "../../shared/execution/tenant-gates.js";

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
