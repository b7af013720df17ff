import { describe, expect, it } from "vitest";
import { lookbackBuckets } from "../../shared/dispatch/lookback.js";

const MINUTE = 60_000;
const at = (minute: string) => Date.parse(`${minute}:00.000Z`);

describe("the buckets a pass reads again 15 minutes behind the passes' line", () => {
  const start = at("2026-12-04T12:00");

  it("a steady pass, moving the line a minute: the one bucket 15 minutes before where it began", () => {
    expect(lookbackBuckets(start, start + MINUTE)).toEqual(["2026-12-04T11:45"]);
  });

  it("a pass that leaves the line where it was (a second pass in one minute): none", () => {
    expect(lookbackBuckets(start, start)).toEqual([]);
  });

  it("a pass that moves the line five minutes (passes missed): those five, 15 minutes back", () => {
    expect(lookbackBuckets(start, start + 5 * MINUTE)).toEqual([
      "2026-12-04T11:45",
      "2026-12-04T11:46",
      "2026-12-04T11:47",
      "2026-12-04T11:48",
      "2026-12-04T11:49",
    ]);
  });

  it("after an outage: the 15 buckets before where it began, not those its backlog read", () => {
    const buckets = lookbackBuckets(start, start + 2 * 24 * 60 * MINUTE);
    expect(buckets).toHaveLength(15);
    expect([buckets[0], buckets.at(-1)]).toEqual(["2026-12-04T11:45", "2026-12-04T11:59"]);
  });

  it("a line held back behind where the pass began (a claim there failed for now): none", () => {
    expect(lookbackBuckets(start, start - 3 * MINUTE)).toEqual([]);
  });
});
