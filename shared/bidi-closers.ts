/**
 * The bidirectional embeddings, overrides and isolates a text leaves open, and their closers.
 * A text cut short (boundedText) can end inside an override the full text closed later, and a
 * text someone else chose (a job's name, shown by the console, console/isolable.ts) can leave
 * one open; whatever comes after it on the same line (the note of the cut, the console's own
 * words) is then laid out inside that override, reversed.
 */

export type BidiOpen = "isolate" | "embedding";

const OPENERS: Readonly<Record<string, BidiOpen>> = {
  "\u2066": "isolate",
  "\u2067": "isolate",
  "\u2068": "isolate",
  "\u202a": "embedding",
  "\u202b": "embedding",
  "\u202d": "embedding",
  "\u202e": "embedding",
};

/** Paragraph separators (UAX #9 type B), which end every embedding and isolate open. */
const PARAGRAPH_ENDS = new Set(["\n", "\r", "\u001c", "\u001d", "\u001e", "\u0085", "\u2029"]);

/** Whether `char` ends its paragraph. */
export function isParagraphEnd(char: string): boolean {
  return PARAGRAPH_ENDS.has(char);
}

/** What `char` leaves open after `open`, as UAX #9 (X5a-X7, X8) counts it; `open` is changed. */
export function trackBidi(open: BidiOpen[], char: string): void {
  const opener = OPENERS[char];
  if (opener !== undefined) open.push(opener);
  else if (PARAGRAPH_ENDS.has(char)) open.length = 0;
  // A U+202C closes an embedding opened inside the innermost isolate, else nothing.
  else if (char === "\u202c" && open.at(-1) === "embedding") open.pop();
  else if (char === "\u2069") {
    // A U+2069 closes its isolate and every embedding opened inside it, or nothing.
    const at = open.lastIndexOf("isolate");
    if (at >= 0) open.length = at;
  }
}

/** The closers of what `open` holds, innermost first (U+202C an embedding's, U+2069 an isolate's). */
export function closersOf(open: readonly BidiOpen[]): string {
  return open
    .map((control) => (control === "isolate" ? "\u2069" : "\u202c"))
    .reverse()
    .join("");
}
