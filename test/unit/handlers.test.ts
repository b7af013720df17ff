import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { isPrivateAddress, signWebhook } from "../../shared/execution/handlers.js";

describe("isPrivateAddress", () => {
  it.each([
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "::1",
    "::",
    "fd00::1",
    "fe80::1",
    "::ffff:127.0.0.1",
  ])("refuses %s", (address) => {
    expect(isPrivateAddress(address)).toBe(true);
  });

  it.each(["8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:1.1.1.1"])(
    "allows %s",
    (address) => {
      expect(isPrivateAddress(address)).toBe(false);
    },
  );
});

describe("signWebhook", () => {
  it("is t=<seconds>,v1=<hex HMAC-SHA256 of '<t>.<body>'>, so a receiver can check it", () => {
    const body = JSON.stringify({ order: 42 });
    const signature = signWebhook("secret", body, 1_767_225_600);
    const expected = createHmac("sha256", "secret").update(`1767225600.${body}`).digest("hex");
    expect(signature).toBe(`t=1767225600,v1=${expected}`);
    expect(signWebhook("other", body, 1_767_225_600)).not.toBe(signature);
  });
});
