import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
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

describe("client/ at run time", () => {
  it("imports nothing from shared/ or functions/ but types (the generator aside): it talks HTTP only", async () => {
    const root = resolve(import.meta.dirname, "../../client");
    const files = (await readdir(root, { recursive: true })).filter(
      (file) => file.endsWith(".ts") && file !== "generate.ts",
    );
    expect(files).toContain("scheduler-client.ts");
    expect(files).toContain(join("cli", "main.ts"));
    for (const file of files) {
      const source = await readFile(join(root, file), "utf8");
      const runtimeImports = [
        ...source.matchAll(
          /^import (?!type )[^;]*? from "((?:\.\.\/)+(?:shared|functions)\/[^"]*)"/gms,
        ),
      ].map((match) => match[1]);
      expect(runtimeImports, file).toEqual([]);
    }
  });
});
