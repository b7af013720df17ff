import { type BidiOpen, closersOf, isParagraphEnd, trackBidi } from "../shared/bidi-closers.js";

/**
 * Text someone else chose (a job's name, an id from a link's address, a URL) made safe to isolate,
 * as the console shows every such text: inside a <bdi>, a `main code` (unicode-bidi: isolate) or
 * between U+2068 and U+2069 (jobTitleInline). An isolate ends at the first U+2069 (pop directional
 * isolate) that does not close one the text opened itself, and a browser lays an isolating element
 * out as if its text were wrapped in U+2068..U+2069: a name's own unmatched U+2069 closed the
 * console's isolate early, and a U+202E (right-to-left override) after it reversed the console's
 * words. So a U+2069 or U+202C (pop directional formatting) that closes nothing the text opened
 * before it is left out, and a paragraph separator (U+2029, U+0085, U+001C-U+001E, a line break),
 * which ends every isolate open, the console's too, becomes a space; the text's other controls
 * stay, shown as written. An opener the text leaves open gets its closer at the end, innermost
 * first (U+202C for an embedding or override, U+2069 for an isolate): the end of the console's
 * isolate closes embeddings only, and its U+2069 (or the end of the <bdi>) would close the text's
 * innermost open isolate instead of the console's, so an override between two such openers
 * reversed the console's words after the text. Only invisible characters are changed or added.
 */
export function isolable(text: string): string {
  const open: BidiOpen[] = [];
  let kept = "";
  for (const char of text) {
    if (isParagraphEnd(char)) {
      // A paragraph's end inside the console's isolate ends that isolate too (an override after it
      // reversed the rest of a list's row): shown as the space it reads as.
      kept += " ";
      continue;
    }
    const depth = open.length;
    trackBidi(open, char);
    // A closer that closes nothing the text opened would close the console's isolate instead.
    if ((char === "\u2069" || char === "\u202c") && open.length === depth) continue;
    kept += char;
  }
  return kept + closersOf(open);
}

/**
 * Characters a browser draws nothing for: white space, controls, format characters (U+200B,
 * the bidirectional controls, tag characters), the other default-ignorable code points (variation
 * selectors, the Hangul fillers U+115F, U+1160, U+3164, U+FFA0) and the blank Braille pattern
 * U+2800, which fonts draw empty. Combining marks are not among them: a browser draws one alone
 * on a dotted circle or on its own.
 */
const INVISIBLE_ONLY = /^[\s\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\u2800]*$/u;

/**
 * Whether a text shows nothing: a name of U+200B only is no less blank than "  ", and a link with
 * it as its text has nothing to see or click (0 px wide).
 */
export function showsNothing(text: string): boolean {
  return INVISIBLE_ONLY.test(text);
}
