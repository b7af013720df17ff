import { describe, expect, it } from "vitest";
import { boundedText, MAX_STORED_TEXT_BYTES } from "../../shared/storage/stored-text.js";

const bytes = (text: string) => Buffer.byteLength(text, "utf8");

describe("boundedText", () => {
  it("keeps a text that fits", () => {
    expect(boundedText("boom")).toBe("boom");
    const exact = "x".repeat(MAX_STORED_TEXT_BYTES);
    expect(boundedText(exact)).toBe(exact);
  });

  it("cuts a longer text to the limit and says how long it was", () => {
    const long = "x".repeat(500_000);
    const cut = boundedText(long);
    expect(bytes(cut)).toBeLessThanOrEqual(MAX_STORED_TEXT_BYTES);
    expect(cut.startsWith("x".repeat(4000))).toBe(true);
    expect(cut.endsWith(" … [cut: 500000 bytes in all]")).toBe(true);
  });

  it("never splits a character, however many bytes each takes", () => {
    for (const char of ["é", "€", "😀"]) {
      const cut = boundedText(char.repeat(10_000), 100);
      expect(bytes(cut)).toBeLessThanOrEqual(100);
      const head = cut.slice(0, cut.indexOf(" … [cut: "));
      expect(head.length).toBeGreaterThan(0);
      expect([...head].every((c) => c === char)).toBe(true);
    }
  });
});
