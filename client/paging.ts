import { SchedulerApiError } from "./errors.js";

/** One page of a listing; the listing ends when nextCursor is null. */
export interface Page<T> {
  readonly items: T[];
  readonly nextCursor: string | null;
}

/**
 * Every item of every page, fetching the next page only when the caller gets there. A page whose
 * nextCursor is the cursor it was asked with would be asked for again and again, for ever (runs
 * watch reads every page each poll): it is an `unexpected_response`, as an answer the API never
 * gives.
 */
export async function* everyItem<T>(
  fetchPage: (cursor: string | undefined) => Promise<Page<T>>,
): AsyncGenerator<T, void, undefined> {
  let cursor: string | undefined;
  do {
    const page = await fetchPage(cursor);
    yield* page.items;
    const next = page.nextCursor ?? undefined;
    if (next !== undefined && next === cursor) {
      throw new SchedulerApiError(
        200,
        "unexpected_response",
        `the listing answered the cursor it was sent (${next.slice(0, 100)}) as its next: it would never end`,
      );
    }
    cursor = next;
  } while (cursor !== undefined);
}
