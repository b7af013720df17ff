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

  it("closes, innermost first, what the cut head leaves open before the note", () => {
    // An override closed only past the cut would run on over the note (the console's Detail cell).
    const cut = boundedText(`a\u2067b\u202E${"x".repeat(200)}\u202C\u2069`, 100);
    expect(cut).toMatch(/^a\u2067b\u202Ex+\u202C\u2069 … \[cut: 214 bytes in all\]$/);
    // A closer of the text's own, a paragraph's end: nothing left open, nothing added.
    expect(boundedText(`\u202Ea\u202C${"x".repeat(200)}`, 100)).toMatch(/^\u202Ea\u202Cx+ … /);
    expect(boundedText(`\u202Ea\n${"x".repeat(200)}`, 100)).toMatch(/^\u202Ea\nx+ … /);
  });

  it("keeps the head, its closers and the note within the limit, however many it opens", () => {
    const cut = boundedText("\u202E".repeat(1000), 100);
    expect(bytes(cut)).toBeLessThanOrEqual(100);
    const head = cut.slice(0, cut.indexOf(" … [cut: "));
    const opened = [...head].filter((c) => c === "\u202E").length;
    expect(opened).toBeGreaterThan(0);
    expect(head).toBe("\u202E".repeat(opened) + "\u202C".repeat(opened));
  });
});
