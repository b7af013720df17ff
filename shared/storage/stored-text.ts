import { type BidiOpen, closersOf, trackBidi } from "../bidi-closers.js";

/**
 * Error and reason texts are stored on run items, and an item may not exceed
 * DynamoDB's 400 KB. A handler's error can be anything (a whole response body,
 * a serialized object), so what is stored is cut to this many UTF-8 bytes.
 */
export const MAX_STORED_TEXT_BYTES = 4096;

/**
 * The text, or its head and a note of the full size, within `maxBytes` UTF-8 bytes; the head's
 * open bidirectional embeddings and isolates are closed before the note.
 */
export function boundedText(text: string, maxBytes: number = MAX_STORED_TEXT_BYTES): string {
  // Every UTF-16 unit is at most 3 bytes in UTF-8: short texts need no count.
  if (text.length * 3 <= maxBytes) return text;
  const total = Buffer.byteLength(text, "utf8");
  if (total <= maxBytes) return text;
  const note = ` … [cut: ${total} bytes in all]`;
  const budget = maxBytes - Buffer.byteLength(note, "utf8");
  let bytes = 0;
  let end = 0;
  // What the head leaves open is closed before the note: an override the full text closed later
  // would otherwise run on over the note (shown reversed in the console's Detail cell). Each
  // closer is 3 bytes, so the head is cut where it, its closers and the note fit.
  const open: BidiOpen[] = [];
  // By code point, so that a character is never split.
  for (const char of text) {
    const size = Buffer.byteLength(char, "utf8");
    trackBidi(open, char);
    if (bytes + size + 3 * open.length > budget) break;
    bytes += size;
    end += char.length;
  }
  const head = text.slice(0, end);
  // Counted again over the head alone: the loop's last step took in the character left out.
  const left: BidiOpen[] = [];
  for (const char of head) trackBidi(left, char);
  return `${head}${closersOf(left)}${note}`;
}

/** boundedText for a text that may be absent. */
export function boundedOrNull(text: string | null | undefined): string | null {
  return text === null || text === undefined ? null : boundedText(text);
}

/**
 * The first `units` UTF-16 units of `text`, less the first half of a surrogate pair they would
 * cut: half a character is no Unicode text, which a stored error or an answer's message must be
 * (DynamoDB's strings; JSON parsers that refuse an unpaired `\ud83d`).
 */
export function textHead(text: string, units: number): string {
  const cut = text.slice(0, units);
  return /[\uD800-\uDBFF]$/.test(cut) ? cut.slice(0, -1) : cut;
}

/** An unpaired surrogate: a high one with no low one after it, or a low one with no high one before. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * The text with each unpaired surrogate replaced by U+FFFD (String.prototype.toWellFormed, which
 * ES2023 lacks): a message the API quotes from elsewhere (V8's JSON.parse names a token by its
 * first UTF-16 unit, half an emoji) is then Unicode text.
 */
export function wellFormed(text: string): string {
  return text.replace(LONE_SURROGATE, "\uFFFD");
}
