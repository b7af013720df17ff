import { describe, expect, it } from "vitest";
import {
  newRunToken,
  runTokenFence,
  runTokenHash,
  runTokenMatches,
} from "../../shared/webhooks/run-token.js";

describe("run tokens", () => {
  it("are 32 random bytes after the fence, and differ every time", () => {
    const tokens = new Set(Array.from({ length: 1000 }, () => newRunToken(3)));
    expect(tokens.size).toBe(1000);
    for (const token of tokens) {
      expect(token).toMatch(/^rt2\.3\.[A-Za-z0-9_-]{43}$/);
      const secret = token.split(".")[2] ?? "";
      expect(Buffer.from(secret, "base64url")).toHaveLength(32);
    }
  });

  it("state their fence; anything not of the form states none", () => {
    const token = newRunToken(12);
    expect(runTokenFence(token)).toBe(12);
    for (const other of [
      "",
      "rt2.0.".concat("A".repeat(43)),
      "rt2.1.".concat("A".repeat(42)),
      "rt2.1.".concat("A".repeat(44)),
      "rt2.01.".concat("A".repeat(43)),
      "rt1.e30.AAAA",
      `${token}.`,
      ` ${token}`,
    ])
      expect(runTokenFence(other), other).toBeNull();
  });

  it("match only the hash of themselves: not another token's, an edited one, or no hash", () => {
    const token = newRunToken(1);
    const hash = runTokenHash(token);
    expect(hash).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(runTokenMatches(token, hash)).toBe(true);
    expect(runTokenMatches(newRunToken(1), hash)).toBe(false);
    // The fence is part of what is hashed: the same value under another fence is another token.
    expect(runTokenMatches(token.replace(/^rt2\.1\./, "rt2.2."), hash)).toBe(false);
    expect(runTokenMatches(`${token.slice(0, -1)}${token.endsWith("A") ? "B" : "A"}`, hash)).toBe(
      false,
    );
    expect(runTokenMatches(token, undefined)).toBe(false);
    expect(runTokenMatches(token, "")).toBe(false);
    expect(runTokenMatches(token, hash.slice(0, 20))).toBe(false);
  });
});
