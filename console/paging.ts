import { useEffect, useRef, useState } from "preact/hooks";
import { usePoll } from "./components.js";

/** A page of a listing, as the API answers it: nextCursor is null past the last page. */
interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/** What was read of a listing under one filter: its items and the cursor of the next page. */
interface Read<T> {
  filter: string;
  items: T[];
  cursor: string | null;
  /**
   * "none" until an older page is asked for; "reading" while the first older read is under way
   * (items: the first page it goes on from, each poll since merged in; cursor: the one it asked
   * with); "read" once an older page landed (or the first page held the whole listing).
   */
  stage: "none" | "reading" | "read";
}

const nothingRead = <T>(filter: string): Read<T> => ({
  filter,
  items: [],
  cursor: null,
  stage: "none",
});

/**
 * A poll of the first page merged into what was read: the first page as it is now, then the
 * items read before that lie past its last one (older pages, and items newer ones pushed off the
 * first page, each as the first page last listed it). An item read before that the first page
 * reaches but no longer lists has left the listing (deleted, replayed, or out of the filter now)
 * and goes. A first page with no cursor is the whole listing: nothing lies past it, and no older
 * page is left to read. A first page with a cursor but no item (a filter that matched nothing in
 * what it read) tells nothing of how far it reached: what was read stays.
 */
function withFirstPage<T>(
  first: Page<T>,
  kept: Read<T>,
  { orderOf, idOf }: { orderOf: (item: T) => string; idOf: (item: T) => string },
): Read<T> {
  if (first.nextCursor === null) return { ...kept, items: [...first.items], cursor: null };
  const last = first.items.at(-1);
  if (last === undefined) return kept;
  const reach = orderOf(last);
  const listed = new Set(first.items.map(idOf));
  const past = kept.items.filter((item) => orderOf(item) < reach && !listed.has(idOf(item)));
  return { ...kept, items: [...first.items, ...past] };
}

/**
 * A listing read a page at a time, newest first: its first page polled every `intervalMs`, older
 * pages read on demand and kept, each read keeping its page's cursor: null past the last page,
 * where no read is left. From the first older read on (while it is under way too), every poll of
 * the first page is merged into what was read (`withFirstPage`): items newer ones push off the
 * polled page stay, as last polled, between it and the older pages, and an item the first page
 * reaches but no longer lists goes. `orderOf` is an item's place in the listing as the API orders
 * it, newest highest. An item dropped stays off the list, whatever read of it lands after. Older
 * pages belong to the `filter` they were read under (what `read` asks for besides the cursor):
 * under another, none is shown and the next starts from the first page again.
 */
export function usePagedPoll<T>({
  read,
  idOf,
  orderOf,
  intervalMs,
  filter,
}: {
  read: (cursor: string | undefined) => Promise<Page<T>>;
  idOf: (item: T) => string;
  orderOf: (item: T) => string;
  intervalMs: number;
  filter: string;
}): {
  /** The polled first page, null until it is read under the filter. */
  first: Page<T> | null;
  error: unknown;
  reload: () => Promise<void>;
  /** The first page, then what was read past it. */
  items: T[];
  /** Whether an older page is left to read. */
  more: boolean;
  /** Reads the next older page; a refused read throws, and the next call asks for it again. */
  loadOlder: () => Promise<void>;
  /**
   * Drops an item for good (one replayed, say): from what was read, and from any read under way
   * when it lands, the first page's polls too; the polled page reads anew.
   */
  drop: (id: string) => void;
} {
  const keys = { orderOf, idOf };
  const [older, setOlder] = useState<Read<T>>(() => nothingRead(filter));
  const [dropped, setDropped] = useState<ReadonlySet<string>>(() => new Set());
  // Each poll names the filter it was read under, so one cannot merge into another's pages.
  const polled = usePoll(async () => ({ filter, page: await read(undefined) }), intervalMs, [
    filter,
  ]);
  const first = polled.data?.filter === filter ? polled.data.page : null;
  // Under another filter the older pages are dropped, and one read under the last lands nowhere.
  const current = useRef(filter);
  current.current = filter;
  useEffect(() => {
    setOlder((kept) => (kept.filter === filter ? kept : nothingRead(filter)));
  }, [filter]);
  // Each poll of the first page is merged into what was read under its filter.
  useEffect(() => {
    const data = polled.data;
    if (!data) return;
    setOlder((kept) =>
      kept.stage !== "none" && kept.filter === data.filter
        ? withFirstPage(data.page, kept, keys)
        : kept,
    );
  }, [polled.data]);
  const here = older.filter === filter ? older : nothingRead<T>(filter);
  // What shows before the merge above lands: the same merge of the first page polled.
  const shown = here.stage === "read" && first ? withFirstPage(first, here, keys) : here;
  const listed = shown.stage === "read" ? shown.items : (first?.items ?? []);
  const items = listed.filter((item) => !dropped.has(idOf(item)));
  const cursor = shown.stage === "read" ? shown.cursor : (first?.nextCursor ?? null);
  const loadOlder = async () => {
    if (cursor === null) return;
    if (here.stage !== "read") {
      // The first older read goes on from the first page its cursor came with, into which each
      // poll until it lands is merged; asked again with that cursor (a double click, a retry),
      // it goes on from the same.
      const from: Read<T> = { filter, items: first?.items ?? [], cursor, stage: "reading" };
      setOlder((kept) =>
        kept.filter === filter &&
        (kept.stage === "read" || (kept.stage === "reading" && kept.cursor === cursor))
          ? kept
          : from,
      );
    }
    const page = await read(cursor);
    if (current.current !== filter) return;
    setOlder((kept) =>
      // Only a read from where what was read ends lands: a page read again (a double click), one
      // past a first page that became the whole listing, or one asked under a filter left since
      // adds nothing.
      kept.filter !== filter || kept.stage === "none" || kept.cursor !== cursor
        ? kept
        : { filter, items: [...kept.items, ...page.items], cursor: page.nextCursor, stage: "read" },
    );
  };
  const drop = (id: string) => setDropped((ids) => new Set(ids).add(id));
  return {
    first,
    error: polled.error,
    reload: polled.reload,
    items,
    more: cursor !== null,
    loadOlder,
    drop,
  };
}
