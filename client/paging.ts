/** One page of a listing; the listing ends when nextCursor is null. */
export interface Page<T> {
  readonly items: T[];
  readonly nextCursor: string | null;
}

/** Every item of every page, fetching the next page only when the caller gets there. */
export async function* everyItem<T>(
  fetchPage: (cursor: string | undefined) => Promise<Page<T>>,
): AsyncGenerator<T, void, undefined> {
  let cursor: string | undefined;
  do {
    const page = await fetchPage(cursor);
    yield* page.items;
    cursor = page.nextCursor ?? undefined;
  } while (cursor !== undefined);
}
