import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { signWebhook } from "../../shared/execution/handlers.js";

describe("signWebhook", () => {
  it("is t=<seconds>,v1=<hex HMAC-SHA256 of '<t>.<body>'>, so a receiver can check it", () => {
    const body = JSON.stringify({ order: 42 });
    const signature = signWebhook("secret", body, 1_767_225_600);
    const expected = createHmac("sha256", "secret").update(`1767225600.${body}`).digest("hex");
    expect(signature).toBe(`t=1767225600,v1=${expected}`);
    expect(signWebhook("other", body, 1_767_225_600)).not.toBe(signature);
  });
});
