import type { Page } from "playwright-core";

/**
 * Browser code (the tests' tsconfig has no DOM types): the left edges of the letter at `word`'s
 * start and of the one `after` it, in the first text node under `root` that holds `word`. A word
 * read left to right has the first left of the second; an override that reverses it, the other way.
 */
const LETTER_LEFTS = `(root, word, after) => {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node !== null; node = walker.nextNode()) {
    const start = node.data.indexOf(word);
    if (start < 0) continue;
    const at = (i) => {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      return range.getBoundingClientRect().left;
    };
    return [at(start), at(start + after)];
  }
  return [];
}`;

/** LETTER_LEFTS in the first element `selector` finds on `page`. */
export async function laidOut(
  page: Page,
  selector: string,
  word: string,
  after: number,
): Promise<number[]> {
  await page.locator(selector).first().waitFor();
  return (await page.evaluate(
    `(${LETTER_LEFTS})(document.querySelector(${JSON.stringify(selector)}), ${JSON.stringify(word)}, ${after})`,
  )) as number[];
}

/** LETTER_LEFTS in `text` laid out as a paragraph of `page` (left to right), then removed. */
export async function lettersOf(
  page: Page,
  text: string,
  word: string,
  after: number,
): Promise<number[]> {
  return (await page.evaluate(
    `(() => { const p = document.body.appendChild(document.createElement("p")); p.textContent = ${JSON.stringify(text)}; const lefts = (${LETTER_LEFTS})(p, ${JSON.stringify(word)}, ${after}); p.remove(); return lefts; })()`,
  )) as number[];
}
