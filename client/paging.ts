import { SchedulerApiError } from "./errors.js";

/** One page of a listing; the listing ends when nextCursor is null. */
export interface Page<T> {
  readonly items: T[];
  readonly nextCursor: string | null;
}

/** How far a listing has read: its pages so far, and the items they held. */
export interface PagesRead {
  readonly pages: number;
  readonly items: number;
}

/**
 * Every item of every page, fetching the next page only when the caller gets there. A cursor is a
 * position in the listing (the API's are DynamoDB start keys), each page's further on than the
 * last: a page whose nextCursor is one the listing was already asked with (its own, or an earlier
 * page's, a, b, a, …) would have the same pages asked for again and again, for ever (runs watch
 * reads every page each poll). It is an `unexpected_response`, as an answer the API never gives.
 * `onPage` is told after each page is read, before its items are yielded: a filtered listing may
 * read many empty pages before an item, and only the pages say it has not stalled.
 */
export async function* everyItem<T>(
  fetchPage: (cursor: string | undefined) => Promise<Page<T>>,
  onPage?: (read: PagesRead) => void,
): AsyncGenerator<T, void, undefined> {
  const asked = new Set<string>();
  let cursor: string | undefined;
  let pages = 0;
  let items = 0;
  do {
    if (cursor !== undefined) asked.add(cursor);
    const page = await fetchPage(cursor);
    pages += 1;
    items += page.items.length;
    onPage?.({ pages, items });
    yield* page.items;
    const next = page.nextCursor ?? undefined;
    if (next !== undefined && asked.has(next)) {
      throw new SchedulerApiError(
        200,
        "unexpected_response",
        next === cursor
          ? `the listing answered the cursor it was sent (${next.slice(0, 100)}) as its next: it would never end`
          : `the listing answered a cursor it was sent before (${next.slice(0, 100)}) as its next: it would never end`,
      );
    }
    cursor = next;
  } while (cursor !== undefined);
}
