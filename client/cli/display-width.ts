/**
 * How many terminal columns a printable text takes, for the CLI's tables. Not a library such as
 * string-width: the table's cells have been through printable, so they hold no control, escape
 * sequence or format character, and what is left is two questions of wcwidth's — which characters
 * take no column (combining marks) and which take two (East Asian Wide and Fullwidth, emoji shown
 * as emoji) — which the ranges below answer for the scripts a terminal draws wide.
 */

/** East Asian Wide (W) and Fullwidth (F) blocks, as wcwidth counts them. */
const WIDE_RANGES: readonly (readonly [number, number])[] = [
  [0x1100, 0x115f], // Hangul Jamo leading consonants
  [0x2329, 0x232a], // angle brackets
  [0x2e80, 0x303e], // CJK radicals, Kangxi, ideographic description, CJK symbols (U+3000)
  [0x3041, 0x33ff], // kana, bopomofo, Hangul compatibility jamo, CJK compatibility
  [0x3400, 0x4dbf], // CJK extension A
  [0x4e00, 0x9fff], // CJK unified ideographs
  [0xa000, 0xa4cf], // Yi
  [0xa960, 0xa97f], // Hangul Jamo extended A
  [0xac00, 0xd7a3], // Hangul syllables
  [0xf900, 0xfaff], // CJK compatibility ideographs
  [0xfe10, 0xfe19], // vertical forms
  [0xfe30, 0xfe6f], // CJK compatibility forms, small forms
  [0xff00, 0xff60], // fullwidth forms
  [0xffe0, 0xffe6], // fullwidth signs
  [0x1f300, 0x1f64f], // pictographs, emoticons
  [0x1f900, 0x1f9ff], // supplemental symbols and pictographs
  [0x20000, 0x2fffd], // CJK extensions B-F, compatibility supplement
  [0x30000, 0x3fffd], // CJK extension G on
];

const isWide = (code: number) => WIDE_RANGES.some(([from, to]) => code >= from && code <= to);

/** Combining marks, drawn on the character before them, and emoji shown as emoji. */
const ZERO_WIDTH = /^[\p{Mn}\p{Me}]$/u;
const EMOJI = /^\p{Emoji_Presentation}$/u;

export function displayWidth(text: string): number {
  let columns = 0;
  for (const char of text) {
    if (ZERO_WIDTH.test(char)) continue;
    columns += isWide(char.codePointAt(0) ?? 0) || EMOJI.test(char) ? 2 : 1;
  }
  return columns;
}
