import { describe, expect, it } from "vitest";
import { printable, table } from "../../client/cli/output.js";

/**
 * The CLI's table pads each cell by the columns a terminal draws for it: a wide character (CJK,
 * U+3000 ideographic space) two, a combining mark none, and printable escapes the zero-width
 * format characters (U+200B, tag characters). Padded by UTF-16 length, a name of such characters
 * put its own words under another column's header, and the row's real cells beside them.
 */

/** How many terminal columns `text` takes (wcwidth's rules for the characters used here). */
function columnsOf(text: string): number {
  let columns = 0;
  for (const char of text) {
    if (/[\p{Mn}\p{Me}\p{Cf}\u200b]/u.test(char)) continue;
    const code = char.codePointAt(0) ?? 0;
    const wide =
      (code >= 0x1100 && code <= 0x115f) ||
      (code >= 0x2e80 && code <= 0xa4cf) ||
      (code >= 0xac00 && code <= 0xd7a3) ||
      (code >= 0xf900 && code <= 0xfaff) ||
      (code >= 0xff00 && code <= 0xff60) ||
      (code >= 0x1f300 && code <= 0x1faff);
    columns += wide ? 2 : 1;
  }
  return columns;
}

/** The terminal column at which `word` starts on `line`. */
const columnOf = (line: string, word: string) => columnsOf(line.slice(0, line.indexOf(word)));

describe("table, a cell whose terminal width is not its length", () => {
  it("shows a job's real status under the STATUS header, not a word of its name", () => {
    // Printable text only: "r", eight U+3000 (two columns each), "active".
    const name = `r${"\u3000".repeat(8)}active`;
    expect(printable(name)).toBe(name);
    const [header = "", row = ""] = table(["ID", "NAME", "STATUS"], [["j1", name, "paused"]]).split(
      "\n",
    );
    // The row's own status starts where the header's STATUS does.
    expect(columnOf(row, "paused")).toBe(columnOf(header, "STATUS"));
  });

  it("keeps a row's status under its header after a name of zero-width characters", () => {
    const [header = "", , row = ""] = table(
      ["ID", "NAME", "STATUS"],
      [
        ["j1", "weekly report", "active"],
        ["j2", `x${"\u200b".repeat(12)}`, "paused"],
      ],
    ).split("\n");
    expect(columnOf(row, "paused")).toBe(columnOf(header, "STATUS"));
  });

  it("keeps a row's status under its header after a name of combining marks or CJK", () => {
    const [header = "", ...rows] = table(
      ["ID", "NAME", "STATUS"],
      [
        ["j1", `e${"\u0301".repeat(10)}`, "paused"],
        ["j2", "週次レポート", "paused"],
        ["j3", "\u{1F600}ok", "paused"],
      ],
    ).split("\n");
    for (const row of rows) expect(columnOf(row, "paused")).toBe(columnOf(header, "STATUS"));
  });
});

describe("printable, the characters a terminal draws in no column", () => {
  it("escapes the zero-width and format characters as it escapes controls", () => {
    expect(printable("a\u200b\u200c\u200d\u2060\u2064\ufeffb")).toBe(
      String.raw`a\u200b\u200c\u200d\u2060\u2064\ufeffb`,
    );
    expect(printable("x\u{E0041}\u{E007F}")).toBe(String.raw`x\u{e0041}\u{e007f}`);
    // A combining mark and a wide character are drawn, and stay.
    expect(printable("e\u0301\u3000")).toBe("e\u0301\u3000");
  });
});
