import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { checkTimeZone, parseSchedule, sameSchedule } from "../../../shared/schedule/index.js";

/**
 * docs/api.md: a `timezone` is taken "in any letter case (stored in the canonical casing where it
 * differs only in case)", and a preview names it "as the job stores it: `europe/london` is
 * `Europe/London`" (adversarial review h87). checkTimeZone recovers the casing from Intl's
 * resolved name, which for a link or an old name is another zone's (`US/Eastern` resolves to
 * `America/New_York`), so these are stored, shown and compared as the caller typed them.
 */
describe("a zone written in another letter case", () => {
  it.each([
    ["us/eastern", "US/Eastern"],
    ["etc/utc", "Etc/UTC"],
    ["america/argentina/buenos_aires", "America/Argentina/Buenos_Aires"],
  ])("%s is stored as %s", (written, canonical) => {
    const schedule = parseSchedule({ cron: "30 2 * * *", timezone: written });
    expect(schedule).toEqual({ cron: "30 2 * * *", timezone: canonical });
  });
});

/** Every zone name (with a `/`) of the tz database this machine has, as tzdb spells it. */
function tzdbNames(): string[] {
  const root = "/usr/share/zoneinfo";
  if (!existsSync(root)) return [];
  const names: string[] = [];
  const walk = (dir: string, prefix: string) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const name = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
      if (entry.isDirectory()) {
        if (!["posix", "right"].includes(name)) walk(name, name);
      } else if (name.includes("/") && /^[A-Z][^.]*$/.test(name)) names.push(name);
    }
  };
  walk("", "");
  return names;
}

describe("every link and old name of the tz database", () => {
  it("written in lower case, is stored as tzdb spells it", () => {
    // The links' casing is a rule (zone.ts LINK_WORDS): the machine's tz database checks it, and
    // where it has none, the names above and these do.
    const names = [
      ...tzdbNames(),
      "US/Pacific",
      "Etc/GMT+5",
      "Etc/GMT0",
      "Etc/Zulu",
      "America/Fort_Wayne",
      "America/Knox_IN",
      "Australia/ACT",
      "Mexico/BajaNorte",
    ];
    const wrong = names
      .filter((name) => checkTimeZone(name).ok)
      .map((name) => [name, checkTimeZone(name.toLowerCase())])
      .filter(([name, check]) => !(typeof check === "object" && check.ok && check.name === name));
    expect(wrong).toEqual([]);
  });
});

describe("a job stored with a link in the case it was typed", () => {
  it("has the schedule an edit sends in tzdb's casing: the edit changes no schedule", () => {
    const stored = { cron: "0 9 * * *", timezone: "us/eastern" };
    expect(sameSchedule(stored, { cron: "0 9 * * *", timezone: "US/Eastern" })).toBe(true);
    expect(sameSchedule(stored, { cron: "0 9 * * *", timezone: "America/New_York" })).toBe(false);
  });
});
