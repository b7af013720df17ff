import { CronExpressionParser } from "cron-parser";
import { describe, expect, it } from "vitest";
import { nextOccurrence, occurrences, type ScheduleSpec } from "../../../shared/schedule/index.js";
import { isoList, label } from "./support.js";

const at = (s: string): Date => new Date(s);

function fire(cron: string, timezone: string, from: string, to: string, limit = 100): string[] {
  return isoList(occurrences({ cron, timezone }, at(from), at(to), limit));
}

/** Occurrences with their local labels, which makes the expectations readable. */
function fireLabelled(cron: string, timezone: string, from: string, to: string): string[] {
  return occurrences({ cron, timezone }, at(from), at(to), 100).map(
    (d) => `${d.toISOString()} ${label(timezone, d.getTime(), "LL-dd HH:mm ZZ")}`,
  );
}

describe("America/New_York", () => {
  it("spring 2026-03-08: 02:30 does not exist and runs at 03:30 EDT (07:30Z)", () => {
    expect(
      fire("30 2 * * *", "America/New_York", "2026-03-07T00:00Z", "2026-03-10T00:00Z"),
    ).toEqual(["2026-03-07T07:30:00.000Z", "2026-03-08T07:30:00.000Z", "2026-03-09T06:30:00.000Z"]);
  });

  it("spring: a skipped time that lands on an existing one is one occurrence", () => {
    // 02:00 and 02:30 are skipped and land on 03:00 and 03:30, which the expression also names.
    expect(
      fire("0,30 2,3 * * *", "America/New_York", "2026-03-08T06:00Z", "2026-03-08T09:00Z"),
    ).toEqual(["2026-03-08T07:00:00.000Z", "2026-03-08T07:30:00.000Z"]);
  });

  it("fall 2026-11-01: '0 * * * *' covers every hour, so it runs 01:00 EDT and 01:00 EST, as cron-parser does", () => {
    const ours = fire("0 * * * *", "America/New_York", "2026-11-01T03:30Z", "2026-11-01T07:30Z");
    expect(ours).toEqual([
      "2026-11-01T04:00:00.000Z", // 00:00 EDT
      "2026-11-01T05:00:00.000Z", // 01:00 EDT
      "2026-11-01T06:00:00.000Z", // 01:00 EST: the clock went back and the job keeps its hourly pace
      "2026-11-01T07:00:00.000Z", // 02:00 EST
    ]);
    const parser = CronExpressionParser.parse("0 * * * *", {
      tz: "America/New_York",
      currentDate: "2026-11-01T03:30:00Z",
    });
    expect(parser.take(4).map((d) => d.toISOString())).toEqual(ours);
  });

  it("fall 2026-11-01: '0 0-23 * * *' and '0 */1 * * *' cover every hour too; '0 0-22 * * *' runs 01:00 once", () => {
    const hourly = [
      "2026-11-01T05:00:00.000Z",
      "2026-11-01T06:00:00.000Z",
      "2026-11-01T07:00:00.000Z",
    ];
    const from = "2026-11-01T04:30Z";
    const to = "2026-11-01T07:30Z";
    expect(fire("0 0-23 * * *", "America/New_York", from, to)).toEqual(hourly);
    expect(fire("0 */1 * * *", "America/New_York", from, to)).toEqual(hourly);
    expect(fire("0 0-22 * * *", "America/New_York", from, to)).toEqual([
      "2026-11-01T05:00:00.000Z",
      "2026-11-01T07:00:00.000Z",
    ]);
  });

  it("fall 2026-11-01: '*/30 1-3 * * *' runs 01:00 and 01:30 once, as cron-parser also does", () => {
    const ours = fire(
      "*/30 1-3 * * *",
      "America/New_York",
      "2026-11-01T04:00Z",
      "2026-11-01T09:00Z",
    );
    expect(ours).toEqual([
      "2026-11-01T05:00:00.000Z", // 01:00 EDT
      "2026-11-01T05:30:00.000Z", // 01:30 EDT
      "2026-11-01T07:00:00.000Z", // 02:00 EST
      "2026-11-01T07:30:00.000Z",
      "2026-11-01T08:00:00.000Z", // 03:00 EST
      "2026-11-01T08:30:00.000Z",
    ]);
    const parser = CronExpressionParser.parse("*/30 1-3 * * *", {
      tz: "America/New_York",
      currentDate: "2026-11-01T04:00:00Z",
    });
    expect(parser.take(6).map((d) => d.toISOString())).toEqual(ours);
  });

  it("fall: with a fixed hour, nextOccurrence from inside the repeated hour skips to after it", () => {
    const spec: ScheduleSpec = { cron: "*/20 1,2 * * *", timezone: "America/New_York" };
    // 06:10Z is 01:10 EST, the second pass; 01:20 and 01:40 already ran during the first pass.
    expect(nextOccurrence(spec, at("2026-11-01T06:10:00Z"))?.toISOString()).toBe(
      "2026-11-01T07:00:00.000Z",
    );
  });

  it("fall: covering every hour, nextOccurrence from inside the repeated hour finds the next second-pass time", () => {
    const spec: ScheduleSpec = { cron: "*/20 * * * *", timezone: "America/New_York" };
    // 06:10Z is 01:10 EST; 01:20 EST is 06:20Z.
    expect(nextOccurrence(spec, at("2026-11-01T06:10:00Z"))?.toISOString()).toBe(
      "2026-11-01T06:20:00.000Z",
    );
    // From the last second of the first pass (01:59:59 EDT), the next is 01:00 EST.
    expect(nextOccurrence(spec, at("2026-11-01T05:59:59Z"))?.toISOString()).toBe(
      "2026-11-01T06:00:00.000Z",
    );
  });

  it("spring: nextOccurrence from just after the jump still finds the shifted times", () => {
    // 07:05Z is 03:05 EDT; 02:10 (skipped) runs at 03:10 EDT = 07:10Z.
    const spec: ScheduleSpec = { cron: "10 2 * * *", timezone: "America/New_York" };
    expect(nextOccurrence(spec, at("2026-03-08T07:05:00Z"))?.toISOString()).toBe(
      "2026-03-08T07:10:00.000Z",
    );
  });

  it("a per-second expression across fall back fires every second of both passes: 1,200 in 20 minutes", () => {
    const got = occurrences(
      { cron: "* * * * * *", timezone: "America/New_York" },
      at("2026-11-01T05:50:00Z"),
      at("2026-11-01T06:09:59Z"),
      2_000,
    );
    expect(got).toHaveLength(1_200);
    const gaps = new Set(got.slice(1).map((d, i) => d.getTime() - (got[i]?.getTime() ?? 0)));
    expect([...gaps]).toEqual([1_000]);
  });

  it("a per-second expression with a fixed hour runs the repeated hour once: 600 seconds, no second pass", () => {
    const got = occurrences(
      { cron: "* * 1 * * *", timezone: "America/New_York" },
      at("2026-11-01T05:50:00Z"),
      at("2026-11-01T06:10:00Z"),
      1_000,
    );
    expect(got).toHaveLength(600);
    expect(got.at(-1)?.toISOString()).toBe("2026-11-01T05:59:59.000Z");
  });
});

describe("fall back with a schedule covering every hour (the clock goes back, the job keeps its pace)", () => {
  it("Europe/Berlin 2026-10-25: '*/15 * * * *' fires every 15 minutes through the repeated 02:00-03:00", () => {
    expect(
      fireLabelled("*/15 * * * *", "Europe/Berlin", "2026-10-25T00:30Z", "2026-10-25T02:15Z"),
    ).toEqual([
      "2026-10-25T00:30:00.000Z 10-25 02:30 +02:00",
      "2026-10-25T00:45:00.000Z 10-25 02:45 +02:00",
      "2026-10-25T01:00:00.000Z 10-25 02:00 +01:00",
      "2026-10-25T01:15:00.000Z 10-25 02:15 +01:00",
      "2026-10-25T01:30:00.000Z 10-25 02:30 +01:00",
      "2026-10-25T01:45:00.000Z 10-25 02:45 +01:00",
      "2026-10-25T02:00:00.000Z 10-25 03:00 +01:00",
      "2026-10-25T02:15:00.000Z 10-25 03:15 +01:00",
    ]);
  });

  it("Europe/Berlin: '*/10 * * * * *' fires every 10 s through the repeated hour, 720 in two hours", () => {
    const got = occurrences(
      { cron: "*/10 * * * * *", timezone: "Europe/Berlin" },
      at("2026-10-25T00:00:00Z"),
      at("2026-10-25T01:59:59Z"),
      1_000,
    );
    expect(got).toHaveLength(720);
    const gaps = new Set(got.slice(1).map((d, i) => d.getTime() - (got[i]?.getTime() ?? 0)));
    expect([...gaps]).toEqual([10_000]);
  });

  it("Australia/Lord_Howe 2026-04-05 (02:00 → 01:30): '*/15 * * * *' repeats 01:30 and 01:45 at +10:30", () => {
    expect(
      fireLabelled("*/15 * * * *", "Australia/Lord_Howe", "2026-04-04T14:30Z", "2026-04-04T15:45Z"),
    ).toEqual([
      "2026-04-04T14:30:00.000Z 04-05 01:30 +11:00",
      "2026-04-04T14:45:00.000Z 04-05 01:45 +11:00",
      "2026-04-04T15:00:00.000Z 04-05 01:30 +10:30",
      "2026-04-04T15:15:00.000Z 04-05 01:45 +10:30",
      "2026-04-04T15:30:00.000Z 04-05 02:00 +10:30",
      "2026-04-04T15:45:00.000Z 04-05 02:15 +10:30",
    ]);
  });

  it("Australia/Lord_Howe: '0 * * * *' has a 90-minute hour that night, since only 01:30-02:00 repeats", () => {
    expect(
      fireLabelled("0 * * * *", "Australia/Lord_Howe", "2026-04-04T13:30Z", "2026-04-04T16:30Z"),
    ).toEqual([
      "2026-04-04T14:00:00.000Z 04-05 01:00 +11:00",
      "2026-04-04T15:30:00.000Z 04-05 02:00 +10:30",
      "2026-04-04T16:30:00.000Z 04-05 03:00 +10:30",
    ]);
  });

  it("America/Santiago 2026-04-05 (00:00 → 23:00 on the 4th): '0,30 * * * SAT' repeats Saturday 23:00 and 23:30", () => {
    expect(
      fireLabelled("0,30 * * * SAT", "America/Santiago", "2026-04-05T01:45Z", "2026-04-05T04:00Z"),
    ).toEqual([
      "2026-04-05T02:00:00.000Z 04-04 23:00 -03:00",
      "2026-04-05T02:30:00.000Z 04-04 23:30 -03:00",
      "2026-04-05T03:00:00.000Z 04-04 23:00 -04:00",
      "2026-04-05T03:30:00.000Z 04-04 23:30 -04:00",
    ]);
  });

  it("gives the same answers whatever order it is asked in, even from a clock that goes back", () => {
    const spec: ScheduleSpec = { cron: "*/15 * * * *", timezone: "Europe/Berlin" };
    const forwards = occurrences(spec, at("2026-10-25T00:00Z"), at("2026-10-25T03:00Z"), 100);
    // Ask from each instant, latest first: a dispatcher whose clock stepped back sees the same.
    const asked = [...forwards]
      .reverse()
      .map((t) => nextOccurrence(spec, new Date(t.getTime() - 1))?.toISOString());
    expect(asked.reverse()).toEqual(isoList(forwards));
    expect(forwards).toHaveLength(13);
  });
});

describe("Europe/London and Europe/Dublin", () => {
  it("London spring 2026-03-29: 01:30 GMT does not exist, runs 02:30 BST", () => {
    expect(
      fireLabelled("30 1 * * *", "Europe/London", "2026-03-28T00:00Z", "2026-03-31T00:00Z"),
    ).toEqual([
      "2026-03-28T01:30:00.000Z 03-28 01:30 +00:00",
      "2026-03-29T01:30:00.000Z 03-29 02:30 +01:00",
      "2026-03-30T00:30:00.000Z 03-30 01:30 +01:00",
    ]);
  });

  it("London fall 2026-10-25: 01:30 runs once, in BST", () => {
    expect(
      fireLabelled("30 1 * * *", "Europe/London", "2026-10-24T00:00Z", "2026-10-27T00:00Z"),
    ).toEqual([
      "2026-10-24T00:30:00.000Z 10-24 01:30 +01:00",
      "2026-10-25T00:30:00.000Z 10-25 01:30 +01:00",
      "2026-10-26T01:30:00.000Z 10-26 01:30 +00:00",
    ]);
  });

  it("Dublin (negative DST in tzdb: winter is the 'daylight' period) behaves like London", () => {
    expect(
      fireLabelled("0 1 * * *", "Europe/Dublin", "2026-03-28T00:00Z", "2026-03-30T12:00Z"),
    ).toEqual([
      "2026-03-28T01:00:00.000Z 03-28 01:00 +00:00",
      "2026-03-29T01:00:00.000Z 03-29 02:00 +01:00",
      "2026-03-30T00:00:00.000Z 03-30 01:00 +01:00",
    ]);
    expect(
      fireLabelled("0 1 * * *", "Europe/Dublin", "2026-10-24T00:00Z", "2026-10-26T12:00Z"),
    ).toEqual([
      "2026-10-24T00:00:00.000Z 10-24 01:00 +01:00",
      "2026-10-25T00:00:00.000Z 10-25 01:00 +01:00",
      "2026-10-26T01:00:00.000Z 10-26 01:00 +00:00",
    ]);
  });
});

describe("Australia/Lord_Howe (30-minute shift)", () => {
  it("fall 2026-04-05 (02:00 → 01:30): 01:45 runs once, at +11:00", () => {
    expect(
      fireLabelled("45 1 * * *", "Australia/Lord_Howe", "2026-04-03T00:00Z", "2026-04-06T00:00Z"),
    ).toEqual([
      "2026-04-03T14:45:00.000Z 04-04 01:45 +11:00",
      "2026-04-04T14:45:00.000Z 04-05 01:45 +11:00",
      "2026-04-05T15:15:00.000Z 04-06 01:45 +10:30",
    ]);
  });

  it("spring 2026-10-04 (02:00 → 02:30): 02:15 runs at 02:45", () => {
    expect(
      fireLabelled("15 2 * * *", "Australia/Lord_Howe", "2026-10-02T00:00Z", "2026-10-05T00:00Z"),
    ).toEqual([
      "2026-10-02T15:45:00.000Z 10-03 02:15 +10:30",
      "2026-10-03T15:45:00.000Z 10-04 02:45 +11:00",
      "2026-10-04T15:15:00.000Z 10-05 02:15 +11:00",
    ]);
  });

  it("spring: shifted and unshifted times interleave and are returned in UTC order", () => {
    // 02:00 → 02:30 and 02:20 → 02:50 are shifted; 02:40 exists and comes between them.
    expect(
      fireLabelled(
        "0,20,40 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T15:00Z",
        "2026-10-03T16:00Z",
      ),
    ).toEqual([
      "2026-10-03T15:30:00.000Z 10-04 02:30 +11:00",
      "2026-10-03T15:40:00.000Z 10-04 02:40 +11:00",
      "2026-10-03T15:50:00.000Z 10-04 02:50 +11:00",
    ]);
    const spec: ScheduleSpec = { cron: "0,20,40 2 * * *", timezone: "Australia/Lord_Howe" };
    expect(nextOccurrence(spec, at("2026-10-03T15:30:00Z"))?.toISOString()).toBe(
      "2026-10-03T15:40:00.000Z",
    );
    expect(nextOccurrence(spec, at("2026-10-03T15:40:00Z"))?.toISOString()).toBe(
      "2026-10-03T15:50:00.000Z",
    );
  });
});

describe("Asia/Kathmandu (+05:45)", () => {
  it("09:00 local is 03:15Z", () => {
    expect(fire("0 9 * * *", "Asia/Kathmandu", "2026-03-28T00:00Z", "2026-03-30T00:00Z")).toEqual([
      "2026-03-28T03:15:00.000Z",
      "2026-03-29T03:15:00.000Z",
    ]);
  });

  it("1986-01-01, +05:30 → +05:45: the skipped 00:05 runs at 00:20", () => {
    expect(
      fireLabelled("5 0 * * *", "Asia/Kathmandu", "1985-12-30T12:00Z", "1986-01-02T00:00Z"),
    ).toEqual([
      "1985-12-30T18:35:00.000Z 12-31 00:05 +05:30",
      "1985-12-31T18:35:00.000Z 01-01 00:20 +05:45",
      "1986-01-01T18:20:00.000Z 01-02 00:05 +05:45",
    ]);
  });
});

describe("America/Santiago (transitions at midnight)", () => {
  it("fall 2026-04-05 (00:00 → 23:00 the day before): 23:30 on the 4th runs once, at -03:00", () => {
    expect(
      fireLabelled("30 23 * * *", "America/Santiago", "2026-04-03T00:00Z", "2026-04-07T00:00Z"),
    ).toEqual([
      "2026-04-03T02:30:00.000Z 04-02 23:30 -03:00",
      "2026-04-04T02:30:00.000Z 04-03 23:30 -03:00",
      "2026-04-05T02:30:00.000Z 04-04 23:30 -03:00",
      "2026-04-06T03:30:00.000Z 04-05 23:30 -04:00",
    ]);
  });

  it("spring 2026-09-06 (00:00 → 01:00): 00:30 runs at 01:30", () => {
    expect(
      fireLabelled("30 0 * * *", "America/Santiago", "2026-09-05T00:00Z", "2026-09-08T00:00Z"),
    ).toEqual([
      "2026-09-05T04:30:00.000Z 09-05 00:30 -04:00",
      "2026-09-06T04:30:00.000Z 09-06 01:30 -03:00",
      "2026-09-07T03:30:00.000Z 09-07 00:30 -03:00",
    ]);
  });
});

describe("Pacific/Apia (2011-12-30 skipped)", () => {
  it("a daily job runs on the 29th and the 31st, and not for the 30th", () => {
    expect(
      fireLabelled("0 10 * * *", "Pacific/Apia", "2011-12-28T00:00Z", "2012-01-01T00:00Z"),
    ).toEqual([
      "2011-12-28T20:00:00.000Z 12-28 10:00 -10:00",
      "2011-12-29T20:00:00.000Z 12-29 10:00 -10:00",
      // 12-30 10:00 would be 12-31 10:00 at the old offset: the same instant, one occurrence.
      "2011-12-30T20:00:00.000Z 12-31 10:00 +14:00",
      "2011-12-31T20:00:00.000Z 01-01 10:00 +14:00",
    ]);
  });

  it("an hourly job has no occurrence labelled 12-30", () => {
    const got = occurrences(
      { cron: "0 * * * *", timezone: "Pacific/Apia" },
      at("2011-12-29T00:00Z"),
      at("2012-01-01T00:00Z"),
      1_000,
    );
    const labels = got.map((d) => label("Pacific/Apia", d.getTime(), "LL-dd HH"));
    expect(labels.filter((l) => l.startsWith("12-30"))).toEqual([]);
    expect(new Set(labels).size).toBe(labels.length);
    expect(labels).toContain("12-29 23");
    expect(labels).toContain("12-31 00");
  });

  it("an expression naming only the skipped day runs at the shifted times, 24 h later on the wall", () => {
    const got = fireLabelled(
      "0 9 30 12 *",
      "Pacific/Apia",
      "2011-12-29T00:00Z",
      "2012-01-01T00:00Z",
    );
    expect(got).toEqual(["2011-12-30T19:00:00.000Z 12-31 09:00 +14:00"]);
  });
});

describe("Pacific/Chatham (+12:45 / +13:45, transitions at 02:45 / 03:45)", () => {
  it("fall 2026-04-05: 03:00 runs once, at +13:45", () => {
    expect(
      fireLabelled("0 3 * * *", "Pacific/Chatham", "2026-04-03T00:00Z", "2026-04-06T00:00Z"),
    ).toEqual([
      "2026-04-03T13:15:00.000Z 04-04 03:00 +13:45",
      "2026-04-04T13:15:00.000Z 04-05 03:00 +13:45",
      "2026-04-05T14:15:00.000Z 04-06 03:00 +12:45",
    ]);
  });

  it("spring 2026-09-27: 03:00 does not exist and runs at 04:00", () => {
    expect(
      fireLabelled("0 3 * * *", "Pacific/Chatham", "2026-09-25T00:00Z", "2026-09-28T00:00Z"),
    ).toEqual([
      "2026-09-25T14:15:00.000Z 09-26 03:00 +12:45",
      "2026-09-26T14:15:00.000Z 09-27 04:00 +13:45",
      "2026-09-27T13:15:00.000Z 09-28 03:00 +13:45",
    ]);
  });
});

describe("UTC", () => {
  it("wall time is UTC, every day the same", () => {
    expect(fire("30 2 * * *", "UTC", "2026-03-07T00:00Z", "2026-03-10T00:00Z")).toEqual([
      "2026-03-07T02:30:00.000Z",
      "2026-03-08T02:30:00.000Z",
      "2026-03-09T02:30:00.000Z",
    ]);
  });
});

describe("every counts elapsed time", () => {
  it("PT1H across New York's fall back stays exactly 3 600 000 ms apart", () => {
    const got = occurrences(
      { every: "PT1H", startAt: "2026-11-01T03:00:00.000Z" },
      at("2026-11-01T03:00:00Z"),
      at("2026-11-01T09:00:00Z"),
      100,
    );
    expect(isoList(got)).toEqual([
      "2026-11-01T03:00:00.000Z",
      "2026-11-01T04:00:00.000Z",
      "2026-11-01T05:00:00.000Z",
      "2026-11-01T06:00:00.000Z",
      "2026-11-01T07:00:00.000Z",
      "2026-11-01T08:00:00.000Z",
      "2026-11-01T09:00:00.000Z",
    ]);
  });

  it("P1D across London's spring forward is 24 h, so the local time moves by an hour", () => {
    const got = occurrences(
      { every: "P1D", startAt: "2026-03-28T09:00:00.000Z" },
      at("2026-03-28T00:00:00Z"),
      at("2026-03-31T00:00:00Z"),
      100,
    );
    expect(got.map((d) => label("Europe/London", d.getTime(), "LL-dd HH:mm"))).toEqual([
      "03-28 09:00",
      "03-29 10:00",
      "03-30 10:00",
    ]);
    const gaps = got.slice(1).map((d, i) => d.getTime() - (got[i]?.getTime() ?? 0));
    expect(gaps).toEqual([86_400_000, 86_400_000]);
  });
});
