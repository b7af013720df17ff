import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { GENERATED_TYPES_PATH, generatedTypes, servedDocument } from "../../client/generate.js";

/**
 * The client's types are generated from the API's OpenAPI document. When a
 * schema changes and `npm run client:generate` was not run, the committed
 * file differs from what the document makes now, and this fails.
 */
describe("client/generated/api.ts", () => {
  it("is what npm run client:generate makes of GET /openapi.json today", async () => {
    const committed = await readFile(GENERATED_TYPES_PATH, "utf8");
    const regenerated = await generatedTypes(await servedDocument());
    expect(
      committed === regenerated,
      "client/generated/api.ts is stale: run `npm run client:generate` and commit the result",
    ).toBe(true);
  });

  it("holds every operation of the document", async () => {
    const document = (await servedDocument()) as {
      paths: Record<string, Record<string, { operationId?: string }>>;
    };
    const committed = await readFile(GENERATED_TYPES_PATH, "utf8");
    const operationIds = Object.values(document.paths).flatMap((item) =>
      Object.values(item).flatMap((operation) => operation.operationId ?? []),
    );
    expect(operationIds.length).toBeGreaterThanOrEqual(17);
    for (const id of operationIds) expect(committed).toContain(`    ${id}: {`);
  });
});
