import { describe, expect, it } from "vitest";
import { isolable, showsNothing } from "../../console/isolable.js";

/**
 * isolable (console/isolable.ts): the bidirectional controls a text someone else chose may carry
 * inside the console's isolates. The browser cases (test/console/bidi-breakout.test.ts) show what a
 * stray U+2069 did; these pin which closers are kept.
 */
describe("isolable", () => {
  it("leaves out a U+2069 or U+202C that closes nothing the text opened", () => {
    expect(isolable("report\u2069\u202Eevil")).toBe("report\u202Eevil\u202C");
    expect(isolable("\u202Cx\u2069\u2069")).toBe("x");
  });

  it("keeps the closers of what the text opened itself, and its other controls", () => {
    expect(isolable("a \u2067عربي\u2069 b \u202Bx\u202C")).toBe(
      "a \u2067عربي\u2069 b \u202Bx\u202C",
    );
    // A U+2069 closes its isolate and the embeddings opened inside it.
    expect(isolable("\u2066\u202Ex\u2069\u202C")).toBe("\u2066\u202Ex\u2069");
  });

  it("keeps no U+202C that would close, from inside an isolate of the text's, an embedding outside it", () => {
    expect(isolable("\u202Ea\u2068b\u202Cc\u2069\u202C")).toBe("\u202Ea\u2068bc\u2069\u202C");
  });

  it("closes, innermost first, what the text leaves open", () => {
    // The console's closing U+2069 would close the text's inner U+2066, not the console's isolate,
    // and leave the U+202E reversing the console's words after the text.
    expect(isolable("x\u2066\u202E\u2066")).toBe("x\u2066\u202E\u2066\u2069\u202C\u2069");
    expect(isolable("\u202Ba\u2067b")).toBe("\u202Ba\u2067b\u2069\u202C");
  });

  it("shows a paragraph separator as a space, which ends no isolate", () => {
    for (const end of ["\u2029", "\u0085", "\u001c", "\u001d", "\u001e", "\n", "\r"])
      expect(isolable(`\u2068a${end}\u2069\u202Eb${end}\u2069`)).toBe(
        "\u2068a \u2069\u202Eb \u202C",
      );
  });
});

describe("showsNothing", () => {
  it("takes a text of white space, format characters and fillers for blank", () => {
    for (const blank of [
      "",
      "  ",
      "\u200b",
      "\u2066\u202E",
      "\u3164",
      "\u115F\u1160",
      "\uFFA0",
      "\u2800",
      "\u{E0041}\uFE0F",
    ])
      expect(showsNothing(blank)).toBe(true);
  });

  it("takes a text with any letter, digit, symbol or mark for shown", () => {
    for (const shown of ["a", "\u200bx", "\u2066\u202Eعربي", "\u3000\u0301", "·"])
      expect(showsNothing(shown)).toBe(false);
  });
});
