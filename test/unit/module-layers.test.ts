import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * The house rules of the source tree that no type checker enforces: DynamoDB
 * expressions live in the storage layer only, the folders of shared/ depend on
 * each other without a cycle, and no module grows past what one reader holds.
 */
const ROOT = resolve(import.meta.dirname, "../..");
const MAX_MODULE_LINES = 400;

function sourceFiles(folder: string): string[] {
  return readdirSync(join(ROOT, folder), { recursive: true, encoding: "utf8" })
    .filter((file) => /\.tsx?$/.test(file) && !file.endsWith(".d.ts"))
    .map((file) => join(folder, file));
}

const modules = [...sourceFiles("shared"), ...sourceFiles("functions")].map((path) => ({
  path,
  text: readFileSync(join(ROOT, path), "utf8"),
}));

/** The folder of shared/ a module belongs to ("dispatch", "storage"…); "." for shared/'s own files. */
function folderOf(path: string): string | null {
  const inShared = relative("shared", path);
  if (inShared.startsWith("..")) return null;
  const parts = inShared.split("/");
  return parts.length > 1 ? (parts[0] ?? ".") : ".";
}

function relativeImports(module: { path: string; text: string }): string[] {
  const specifiers = [...module.text.matchAll(/from\s+"(\.[^"]+)"/g)].flatMap((m) =>
    m[1] === undefined ? [] : [m[1]],
  );
  return specifiers.map((specifier) => join(dirname(module.path), specifier));
}

describe("the source tree", () => {
  it("keeps DynamoDB expressions inside shared/storage/", () => {
    const outside = modules
      .filter((m) => !m.path.startsWith("shared/storage/"))
      .flatMap((m) =>
        [
          ...m.text.matchAll(/\b(Condition|Update|KeyCondition|Filter|Projection)Expression\b/g),
        ].map((hit) => `${m.path}: ${hit[0]}`),
      );
    expect(outside).toEqual([]);
  });

  it("has no import cycle between the folders of shared/", () => {
    const edges = new Map<string, Set<string>>();
    for (const module of modules) {
      const from = folderOf(module.path);
      if (from === null || from === ".") continue;
      for (const target of relativeImports(module)) {
        const to = folderOf(target);
        if (to === null || to === "." || to === from) continue;
        edges.set(from, (edges.get(from) ?? new Set()).add(to));
      }
    }
    const cycles = new Set<string>();
    const visit = (folder: string, path: string[]) => {
      for (const next of edges.get(folder) ?? []) {
        const at = path.indexOf(next);
        if (at >= 0) cycles.add([...path.slice(at), next].join(" → "));
        else visit(next, [...path, next]);
      }
    };
    for (const folder of edges.keys()) visit(folder, [folder]);
    expect([...cycles]).toEqual([]);
  });

  it(`has no module in shared/ or functions/ over ${MAX_MODULE_LINES} lines`, () => {
    const long = modules
      .map((m) => ({ path: m.path, lines: m.text.split("\n").length }))
      .filter((m) => m.lines > MAX_MODULE_LINES);
    expect(long).toEqual([]);
  });
});
