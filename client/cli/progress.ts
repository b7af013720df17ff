import type { ListOptions } from "../index.js";
import type { PagesRead } from "../paging.js";
import { ctrlC, interruptible } from "./interrupt.js";
import type { CliIo } from "./output.js";

/** What withProgress passes on to the client's list: its onPage, and Ctrl-C's signal. */
export type ListingOptions = Pick<ListOptions, "onPage" | "signal">;

/** What a listing lists, for its progress line. */
export interface Listed {
  /** One of the items ("run"). */
  readonly noun: string;
  /**
   * Whether a filter the server applies after reading (a status) can pass over a whole page:
   * then an empty page is an honest one, "no match yet"; without one, only a server answering
   * empty pages with cursors reads on with nothing, "nothing yet".
   */
  readonly filtered: boolean;
}

/** A listing shows its progress once it has read this long, or this many pages, without an end. */
const PROGRESS_AFTER_MS = 2000;
const PROGRESS_AFTER_PAGES = 10;

/**
 * Reads a listing (`read` passes `listing`, its onPage and Ctrl-C's signal, to the client's list)
 * and, while it reads, shows on a terminal's stderr how far it got: a filtered listing of a job
 * with millions of runs reads page after empty page, minutes of nothing, and a person cannot tell
 * it from a hung one, or from a server that answers empty pages with new cursors for ever. No
 * bound on the pages ends it: an honest listing can pass any, and its answer is a correct one. The
 * line appears once the listing has read PROGRESS_AFTER_MS or PROGRESS_AFTER_PAGES, is rewritten
 * in place after each page (a carriage return), and is erased before anything else prints: when
 * the read ends, fails, or the bin ends the command after Ctrl-C (`io.exiting`). Only when stderr
 * is a terminal: a script's stderr, and every stdout, get nothing of it. Ctrl-C (`io.signal`)
 * aborts the page in flight, or the wait before a retry of it: the listing ends at once, exit 130
 * with nothing printed (a listing only reads: nothing it sent can have been applied).
 */
export async function withProgress<T>(
  io: CliIo,
  { noun, filtered }: Listed,
  read: (listing: ListingOptions) => Promise<T>,
): Promise<T> {
  const signal = ctrlC(io);
  if (io.stderrIsTty !== true) return interruptible(io, read(signal));
  // Only the time since the start counts: the monotonic clock, which a wall clock's step leaves be.
  const now = io.now ?? (() => performance.now());
  const startedAt = now();
  // The length of the line shown, 0 when none: it is ASCII, one column a character, and erased
  // with spaces rather than an escape sequence, which a dumb terminal would print.
  let shown = 0;
  const erase = () => {
    if (shown > 0) io.stderr(`\r${" ".repeat(shown)}\r`);
    shown = 0;
  };
  const onPage = ({ pages, items }: PagesRead) => {
    if (shown === 0 && pages < PROGRESS_AFTER_PAGES && now() - startedAt < PROGRESS_AFTER_MS)
      return;
    const none = filtered ? "no match yet" : "nothing yet";
    const line = `reading: ${pages} ${pages === 1 ? "page" : "pages"}, ${items === 0 ? none : `${items} ${noun}${items === 1 ? "" : "s"} so far`} (Ctrl-C stops)`;
    io.stderr(`\r${line}${" ".repeat(Math.max(0, shown - line.length))}`);
    shown = line.length;
  };
  io.exiting?.addEventListener("abort", erase);
  try {
    return await interruptible(io, read({ onPage, ...signal }));
  } finally {
    io.exiting?.removeEventListener("abort", erase);
    erase();
  }
}
