import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inflightPk } from "../../shared/storage/items.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { putItems } from "../support/seed.js";
import { dueEntriesAbove, liveRunsAbove } from "../support/shard-runbook.js";

/**
 * docs/deploy.md ("Deploy") counts the queued or running runs above a lowered shard count. It gave
 * one Scan whose filter listed every shard from the new count to the mark (`inflightPk IN (:s8, …)`);
 * shardCount goes up to 1,024 and DynamoDB takes at most 100 operands in an IN, so a gap of more
 * than 100 shards failed: "ValidationException: … The IN operator is provided with too many
 * operands; number of operands: 192" (adversarial review h78). The runbook now compares the shard
 * number after the Scan, whatever the gap.
 */
let f: EngineFixture;
beforeAll(async () => {
  f = await createEngineFixture();
});
afterAll(() => f.destroy());

const deployDoc = readFileSync(join(import.meta.dirname, "..", "..", "docs", "deploy.md"), "utf8");

/** A run item as the runbook's Scan sees it: its in-flight shard and its status. */
const run = (id: string, shard: number, status: string) => ({
  pk: `RUN#${id}`,
  sk: "RUN",
  inflightPk: inflightPk(shard),
  inflightSk: id,
  status,
});

describe("docs/deploy.md's count of runs above a lowered shard count", () => {
  it("is the Scan and the shard comparison test/support/shard-runbook.ts takes", () => {
    expect(deployDoc).toContain(
      '--filter-expression "begins_with(inflightPk, :inflight) AND #s IN (:q, :r)"',
    );
    expect(deployDoc).toContain(
      `jq '[.Items[].inflightPk.S | select((split("#")[1] | tonumber) >= 8)] | length'`,
    );
    expect(deployDoc).toContain(
      `jq '[.Items[].pk.S | select((split("#")[2] | tonumber) >= 8)] | length'`,
    );
    expect(deployDoc).not.toMatch(/inflightPk IN \(\$\(/);
  });

  it("counts the live runs of a gap of 192 shards (256 lowered to 64), and no other", async () => {
    await putItems(f, f.engine.tables.runs, [
      run("below", 63, "QUEUED"),
      run("first", 64, "QUEUED"),
      run("middle", 150, "RUNNING"),
      run("last", 255, "QUEUED"),
      // An ended run may keep its inflightPk: its status leaves it out.
      run("ended", 200, "SUCCEEDED"),
    ]);
    expect(await liveRunsAbove(f.engine, 64)).toBe(3);
    expect(await liveRunsAbove(f.engine, 1)).toBe(4);
    expect(await dueEntriesAbove(f.engine, 64)).toBe(0);
  });
});
