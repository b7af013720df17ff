import { describe, expect, it } from "vitest";
import { REAPER_TIME_MARGIN_MS, reaperTime } from "../../shared/dispatch/reaper-time.js";

/** What a pass on a 60 s countdown asks for next, after reads of `asked` entries taking `readMs`. */
function askedAfter(reads: readonly { readonly asked: number; readonly readMs: number }[]) {
  let left = 60_000;
  const time = reaperTime(() => left);
  const next = reads.map(({ asked, readMs }) => {
    time.pageBegins();
    left -= readMs;
    return time.nextPage(asked);
  });
  return { next, left };
}

describe("the reaper's reads of a shard, sized to the tick's time", () => {
  it("asks for a small first page on the tick's time, a whole one without it", () => {
    expect(reaperTime(() => 60_000).firstPage()).toBe(100);
    expect(reaperTime(undefined).firstPage()).toBe(1_000);
    expect(reaperTime(undefined).nextPage(100)).toBe(1_000);
  });

  it("asks next for as many as take half of what is left above the margin, at the last read's time an entry", () => {
    // 100 entries in 15 s: 150 ms each; 45 s left, 25 s above the margin, half of it 12.5 s.
    const { next, left } = askedAfter([
      { asked: 100, readMs: 15_000 },
      { asked: 83, readMs: 83 * 150 },
    ]);
    expect(next[0]).toBe(83);
    // Its read fits in what is left above the margin, with as long again to deal with the entries.
    expect((next[1] ?? 0) * 150 * 2).toBeLessThanOrEqual(left - REAPER_TIME_MARGIN_MS);
  });

  it("grows to a whole page when reads are quick, and asks for one entry at the least", () => {
    const { next } = askedAfter([
      { asked: 100, readMs: 5 },
      { asked: 1_000, readMs: 39_900 },
    ]);
    expect(next).toEqual([1_000, 1]);
  });
});
