import { useEffect, useRef, useState } from "preact/hooks";
import { usePoll } from "./components.js";

/** A page of a listing, as the API answers it: nextCursor is null past the last page. */
interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/**
 * A listing read a page at a time, newest first: its first page polled every `intervalMs`, older
 * pages read on demand and kept. The first read of an older page keeps the first page as it was
 * then (newer items push items off the polled one, which would otherwise fall between it and the
 * older pages), and each read keeps its page's cursor: null past the last page, where no read is
 * left. Older pages belong to the `filter` they were read under (what `read` asks for besides the
 * cursor): under another, none is shown and the next starts from the first page again. An item
 * kept is shown as the polled page last showed it (a job cancelled since, say).
 */
export function usePagedPoll<T>({
  read,
  idOf,
  intervalMs,
  filter,
}: {
  read: (cursor: string | undefined) => Promise<Page<T>>;
  idOf: (item: T) => string;
  intervalMs: number;
  filter: string;
}): {
  /** The polled first page, null until it is read. */
  first: Page<T> | null;
  error: unknown;
  reload: () => Promise<void>;
  /** The first page, then the older pages' items not on it. */
  items: T[];
  /** Whether an older page is left to read. */
  more: boolean;
  /** Reads the next older page; a refused read throws, and the next call asks for it again. */
  loadOlder: () => Promise<void>;
  /**
   * Drops an item from the older pages kept (one replayed, say), and from any older page read
   * under way; the polled page reads anew.
   */
  drop: (id: string) => void;
} {
  const [older, setOlder] = useState<{
    filter: string;
    items: T[];
    cursor: string | null;
    read: boolean;
  }>({ filter, items: [], cursor: null, read: false });
  const { data: first, error, reload } = usePoll(() => read(undefined), intervalMs, [filter]);
  // Under another filter the older pages are dropped, and one read under the last lands nowhere.
  const current = useRef(filter);
  current.current = filter;
  // Items dropped stay dropped: an older read begun before the drop lands without them.
  const dropped = useRef(new Set<string>());
  useEffect(() => {
    setOlder((kept) =>
      kept.filter === filter ? kept : { filter, items: [], cursor: null, read: false },
    );
  }, [filter]);
  // Each item as the polled page last showed it: one it has since pushed off is shown as it was
  // then, not as when its older page (or the first page kept with it) was read.
  const latest = useRef<{ page: Page<T> | null; items: Map<string, T> }>({
    page: null,
    items: new Map(),
  });
  if (first !== null && first !== latest.current.page) {
    latest.current.page = first;
    for (const item of first.items) latest.current.items.set(idOf(item), item);
  }
  const here = older.filter === filter ? older : { filter, items: [], cursor: null, read: false };
  const firstIds = new Set(first?.items.map(idOf));
  const items = [
    ...(first?.items ?? []),
    ...here.items
      .filter((item) => !firstIds.has(idOf(item)))
      .map((item) => latest.current.items.get(idOf(item)) ?? item),
  ];
  const cursor = here.read ? here.cursor : (first?.nextCursor ?? null);
  const loadOlder = async () => {
    if (cursor === null) return;
    const kept = here.read ? here.items : (first?.items ?? []);
    const page = await read(cursor);
    if (current.current !== filter) return;
    const items = [...kept, ...page.items].filter((item) => !dropped.current.has(idOf(item)));
    setOlder({ filter, items, cursor: page.nextCursor, read: true });
  };
  const drop = (id: string) => {
    dropped.current.add(id);
    setOlder((kept) => ({ ...kept, items: kept.items.filter((item) => idOf(item) !== id) }));
  };
  return { first, error, reload, items, more: cursor !== null, loadOlder, drop };
}
