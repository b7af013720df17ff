import { IANAZone } from "luxon";
import { DAY_MS, MINUTE_MS, SECOND_MS } from "./calendar.js";

/** One change of UTC offset: from `at` (inclusive, epoch ms) the zone is at `after`. */
export interface Transition {
  readonly at: number;
  /** Offset in ms (local = UTC + offset) just before `at`. */
  readonly before: number;
  readonly after: number;
}

/** Where a local wall-clock time lands in UTC under the design's DST rules. */
export interface WallResolution {
  readonly instant: number;
  /** Set when the wall time does not exist: `instant` is then shifted by the gap. */
  readonly gap?: Transition;
}

// Offsets only change at transitions, and Intl answers one offset query in ~5-15 µs, so each
// zone's transitions are found once per chunk of time and every later lookup is arithmetic.
// Small chunks keep the first query in a new stretch of time cheap.
const CHUNK_MS = 8 * DAY_MS;
// Daily samples miss only two transitions that undo each other within one day; tzdb has no
// such pair that we know of, and the property tests compare offsets with luxon's.
const SAMPLE_MS = DAY_MS;
// Intl's en-US format is only unambiguous for years 1-9999; beyond that luxon does the work.
const INTL_MIN_MS = Date.UTC(1, 0, 2);
const INTL_MAX_MS = Date.UTC(9999, 11, 31);
// Wide enough that every local time's candidate instants (offsets stay within ±26 h) are inside.
const RESOLVE_WINDOW_MS = 2 * DAY_MS;

interface Chunk {
  readonly startOffset: number;
  readonly transitions: readonly Transition[];
}

/**
 * Chunks kept for every zone together (about 100 bytes each: 2 MB, some 440 years of one zone).
 * Requests reach any stretch of years 1-9999 in any of some 600 zone names (a preview counting a
 * sparse cron's occurrences toward `maxRuns` touches 40,000 chunks), so a cache without a bound
 * grew a process's heap for good with each request in another zone: 3.8 MB each, the API
 * function's 512 MB in some 130. At the bound every zone's chunks are dropped, to be found again
 * as they are asked for (the few around now that the dispatcher and workers use, at once).
 */
const MAX_CACHED_CHUNKS = 20_000;
let cachedChunks = 0;

const FORMAT_RE = /^(\d+)\/(\d+)\/(\d+),? (\d+):(\d+):(\d+)$/;

export class ZoneRules {
  readonly name: string;
  private readonly chunks = new Map<number, Chunk>();
  private readonly format: Intl.DateTimeFormat;
  private readonly luxonZone: IANAZone;

  constructor(name: string) {
    this.name = name;
    this.format = new Intl.DateTimeFormat("en-US", {
      timeZone: name,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    this.luxonZone = IANAZone.create(name);
  }

  /** UTC offset in ms at an instant (local wall time = instant + offset). */
  offsetAt(instant: number): number {
    const chunk = this.chunk(Math.floor(instant / CHUNK_MS));
    let offset = chunk.startOffset;
    for (const t of chunk.transitions) {
      if (t.at > instant) break;
      offset = t.after;
    }
    return offset;
  }

  /** Transitions with `lo < at <= hi`, ascending. */
  transitionsIn(lo: number, hi: number): Transition[] {
    const out: Transition[] = [];
    for (let k = Math.floor(lo / CHUNK_MS); k <= Math.floor(hi / CHUNK_MS); k++) {
      for (const t of this.chunk(k).transitions) {
        if (t.at > lo && t.at <= hi) out.push(t);
      }
    }
    return out;
  }

  /**
   * Maps a wall time to UTC: an existing time to its first instant (fall back runs the first
   * time), a time in a gap to the instant it would have had at the offset in force before the
   * jump (spring forward runs at the same offset into the new hour).
   */
  resolveWall(wall: number): WallResolution {
    const transitions = this.transitionsIn(wall - RESOLVE_WINDOW_MS, wall + RESOLVE_WINDOW_MS);
    let offset = this.offsetAt(wall - RESOLVE_WINDOW_MS);
    let segmentStart = Number.NEGATIVE_INFINITY;
    let previous: Transition | undefined;
    for (let k = 0; k <= transitions.length; k++) {
      const next = transitions[k];
      const instant = wall - offset;
      if (next === undefined || instant < next.at) {
        if (instant >= segmentStart || previous === undefined) return { instant };
        return { instant: wall - previous.before, gap: previous };
      }
      previous = next;
      segmentStart = next.at;
      offset = next.after;
    }
    // Unreachable: the last segment is open-ended and always returns above.
    return { instant: wall - offset };
  }

  private chunk(index: number): Chunk {
    const cached = this.chunks.get(index);
    if (cached !== undefined) return cached;
    const start = index * CHUNK_MS;
    const end = start + CHUNK_MS;
    const transitions: Transition[] = [];
    const startOffset = this.rawOffset(start);
    let left = start;
    let leftOffset = startOffset;
    for (let sample = start + SAMPLE_MS; sample <= end; sample += SAMPLE_MS) {
      const sampleOffset = this.rawOffset(sample);
      while (leftOffset !== sampleOffset) {
        const at = this.firstChange(left, sample, leftOffset);
        const after = this.rawOffset(at);
        // A chunk owns (start, end]: a transition exactly at `end` is listed here and is also the
        // next chunk's startOffset, so transitionsIn still sees it exactly once.
        transitions.push({ at, before: leftOffset, after });
        left = at;
        leftOffset = after;
      }
      left = sample;
    }
    const chunk: Chunk = { startOffset, transitions };
    if (cachedChunks >= MAX_CACHED_CHUNKS) {
      for (const rules of rulesCache.values()) rules.chunks.clear();
      this.chunks.clear();
      cachedChunks = 0;
    }
    this.chunks.set(index, chunk);
    cachedChunks++;
    return chunk;
  }

  /** Smallest whole second in (lo, hi] whose offset differs from `loOffset`. */
  private firstChange(lo: number, hi: number, loOffset: number): number {
    let l = lo;
    let h = hi;
    while (h - l > SECOND_MS) {
      const mid = l + Math.floor((h - l) / (2 * SECOND_MS)) * SECOND_MS;
      if (this.rawOffset(mid) === loOffset) l = mid;
      else h = mid;
    }
    return h;
  }

  private rawOffset(instant: number): number {
    const whole = Math.floor(instant / SECOND_MS) * SECOND_MS;
    if (whole >= INTL_MIN_MS && whole <= INTL_MAX_MS) {
      const m = FORMAT_RE.exec(this.format.format(whole));
      if (m !== null) {
        const [, month, day, year, hour, minute, second] = m;
        const local = Date.UTC(
          Number(year),
          Number(month) - 1,
          Number(day),
          Number(hour) % 24,
          Number(minute),
          Number(second),
        );
        // Date.UTC maps years 0-99 to 1900-1999.
        if (Number(year) >= 100) return local - whole;
      }
    }
    return Math.round(this.luxonZone.offset(whole) * MINUTE_MS);
  }
}

const rulesCache = new Map<string, ZoneRules>();

/** Cached per zone name; the name must already be a valid zone. */
export function zoneRules(name: string): ZoneRules {
  let rules = rulesCache.get(name);
  if (rules === undefined) {
    rules = new ZoneRules(name);
    rulesCache.set(name, rules);
  }
  return rules;
}

export type ZoneCheck =
  | { readonly ok: true; readonly name: string }
  | { readonly ok: false; readonly message: string };

/**
 * Accepts location-based IANA names (`Area/Location`, including `Etc/…` and backward links such
 * as `US/Eastern`) and `UTC`. Bare abbreviations and legacy names (`EST`, `CET`, `EST5EDT`, `GMT`)
 * are valid to Intl but are rejected: `EST` is a fixed -05:00 with no DST, which is rarely what
 * someone writing "EST" means. Returns the name in tzdb's casing (`us/eastern` is `US/Eastern`),
 * never another zone's name: a link stays the link it names.
 */
export function checkTimeZone(name: string): ZoneCheck {
  let check = zoneChecks.get(name);
  if (check === undefined) {
    // Intl validates a zone by building a formatter, which costs a few hundred µs.
    check = checkUncached(name);
    if (zoneChecks.size >= 1_000) zoneChecks.clear();
    zoneChecks.set(name, check);
  }
  return check;
}

const zoneChecks = new Map<string, ZoneCheck>();

const EXAMPLE =
  'use a location-based IANA name such as "America/New_York", "Europe/London" or "UTC"';

function legacyName(name: string): ZoneCheck {
  return {
    ok: false,
    message: `"${name}" is an abbreviation or legacy zone name, not a location-based IANA zone (for example "EST" is a fixed -05:00 with no daylight-saving time): ${EXAMPLE}`,
  };
}

/**
 * {@link checkTimeZone} for a zone a request names: the System V names (`SystemV/EST5EDT`,
 * `SystemV/EST5`), which tzdb dropped in 2020 and ICU still knows, are refused as the legacy names
 * they are. Only new input is checked so: a job stored with one before keeps computing its times.
 */
export function checkNewTimeZone(name: string): ZoneCheck {
  const check = checkTimeZone(name);
  return check.ok && /^SystemV\//i.test(check.name) ? legacyName(name) : check;
}

function checkUncached(name: string): ZoneCheck {
  if (name.trim() === "") return { ok: false, message: `must not be empty: ${EXAMPLE}` };
  if (/^(?:UTC|GMT|Z)?\s*[+-]\d{1,2}(?::?\d{2})?$/i.test(name.trim()) || /^Z$/i.test(name)) {
    return {
      ok: false,
      message: `"${name}" is a UTC offset, not a time zone: offsets change with daylight-saving time, so ${EXAMPLE}`,
    };
  }
  if (!IANAZone.isValidZone(name)) {
    return { ok: false, message: `"${name}" is not a known IANA time zone: ${EXAMPLE}` };
  }
  if (!name.includes("/") && name.toUpperCase() !== "UTC") return legacyName(name);
  const resolved = new Intl.DateTimeFormat("en-US", { timeZone: name }).resolvedOptions().timeZone;
  return { ok: true, name: resolved.toLowerCase() === name.toLowerCase() ? resolved : cased(name) };
}

/**
 * Words of tzdb's links (`backward`) that no zone Intl lists holds and that are not title case.
 * Node 20's ICU resolves a link to its target (`US/Eastern` is `America/New_York`) and lists
 * canonical ids only, so nothing in Intl spells a link; test/unit/schedule/zone-casing.test.ts
 * checks every name of the tz database the machine has against {@link cased}.
 */
const LINK_WORDS = [
  "ACT",
  "BajaNorte",
  "BajaSur",
  "ComodRivadavia",
  "DeNoronha",
  "EasterIsland",
  "Knox_IN",
  "LHI",
  "NSW",
  "UCT",
  "US",
  "UTC",
];

let wordsByLowerCase: Map<string, string> | undefined;

/**
 * A valid zone name in tzdb's casing where Intl resolves it to another zone (a link, an old name):
 * each part as a zone Intl lists spells it (`argentina`, `buenos_aires`), as LINK_WORDS does, a
 * `GMT` offset in capitals, else each word of it capitalized (`fort_wayne` is `Fort_Wayne`).
 */
function cased(name: string): string {
  if (wordsByLowerCase === undefined) {
    wordsByLowerCase = new Map();
    for (const zone of Intl.supportedValuesOf("timeZone"))
      for (const part of zone.split("/")) wordsByLowerCase.set(part.toLowerCase(), part);
    for (const word of LINK_WORDS) wordsByLowerCase.set(word.toLowerCase(), word);
  }
  const words = wordsByLowerCase;
  return name
    .split("/")
    .map((part) => {
      const known = words.get(part.toLowerCase());
      if (known !== undefined) return known;
      if (/^gmt(?:[+-]\d+|0)?$/i.test(part)) return part.toUpperCase();
      return part.replace(
        /[^_-]+/g,
        (word) => word.charAt(0).toUpperCase() + word.slice(1).toLowerCase(),
      );
    })
    .join("/");
}
