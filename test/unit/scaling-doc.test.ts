import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { report } from "../../bench/simulate-spike.js";

/**
 * docs/scaling.md says its arithmetic is `bench/simulate-spike.ts` (`npx tsx
 * bench/simulate-spike.ts`), "whose output is printed below": the printed block must be what the
 * script prints from the bench results in the repository, so that a new result (or a changed
 * script) that moves a figure, or breaks one, shows here.
 */
const REPO = resolve(import.meta.dirname, "../..");

describe("docs/scaling.md", () => {
  it("prints the output of bench/simulate-spike.ts", () => {
    const doc = readFileSync(join(REPO, "docs/scaling.md"), "utf8");
    const printed = /^```\n([\s\S]*?)\n```$/m.exec(doc)?.[1];
    expect(printed, "docs/scaling.md has the output block").toBeDefined();
    const output = report();
    expect(output).not.toContain("NaN");
    expect(output).toBe(printed);
  });
});
