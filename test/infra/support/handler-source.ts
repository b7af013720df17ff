import { existsSync, readFileSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import { ENV } from "../../../shared/config.js";
import { REPO_ROOT } from "./repo-root.js";

/**
 * The project files a handler loads at run time: its relative imports,
 * followed transitively. Type-only imports are skipped (erased by esbuild).
 */
function importGraph(entry: string): string[] {
  const seen = new Set<string>();
  const pending = [resolve(entry)];
  const importPattern =
    /(?:^|\n)\s*(import|export)(\s+type)?\s[^;]*?from\s+["'](\.{1,2}\/[^"']+)["']|\bimport\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)|(?:^|\n)\s*import\s+["'](\.{1,2}\/[^"']+)["']/g;
  for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
    if (seen.has(file)) continue;
    seen.add(file);
    const source = readFileSync(file, "utf8");
    for (const match of source.matchAll(importPattern)) {
      if (match[2] !== undefined) continue;
      const specifier = match[3] ?? match[4] ?? match[5];
      if (specifier === undefined) continue;
      const target = resolve(dirname(file), specifier).replace(/\.js$/, ".ts");
      if (!existsSync(target)) throw new Error(`${file} imports ${specifier}, not found`);
      pending.push(target);
    }
  }
  return [...seen].sort();
}

const ENV_BY_KEY: Readonly<Record<string, string>> = ENV;

/**
 * Environment variables read anywhere in a handler's import graph, through
 * `ENV.<key>` (shared/config.ts), `requireEnv("NAME")` or `process.env.NAME`.
 * Maps each name to the files that read it.
 */
export function environmentReadBy(entry: string): Map<string, string[]> {
  const names = new Map<string, string[]>();
  const add = (name: string, file: string) => {
    const files = names.get(name) ?? [];
    files.push(relative(REPO_ROOT, file));
    names.set(name, files);
  };
  for (const file of importGraph(entry)) {
    const source = readFileSync(file, "utf8");
    for (const match of source.matchAll(/\bENV\.([A-Za-z]\w*)/g)) {
      const key = match[1] ?? "";
      const name = ENV_BY_KEY[key];
      if (name === undefined)
        throw new Error(`${file} reads ENV.${key}, which shared/config.ts lacks`);
      add(name, file);
    }
    const literal =
      /\brequireEnv\(\s*["']([A-Z][A-Z0-9_]*)["']|\bprocess\.env\.([A-Z][A-Z0-9_]*)|\bprocess\.env\[\s*["']([A-Z][A-Z0-9_]*)["']\s*\]/g;
    for (const match of source.matchAll(literal)) {
      const name = match[1] ?? match[2] ?? match[3];
      if (name !== undefined) add(name, file);
    }
  }
  return names;
}

/** The service name a handler gives `powertoolsObservability(...)`, which becomes a metric dimension. */
export function powertoolsServiceOf(entry: string): string | null {
  const match = /powertoolsObservability\(\s*["']([^"']+)["']\s*\)/.exec(
    readFileSync(entry, "utf8"),
  );
  return match?.[1] ?? null;
}

/** The project files a handler loads at run time whose source mentions `text` (e.g. `METRICS.runOutcome`). */
export function filesOfHandlerMentioning(entry: string, text: string): string[] {
  return importGraph(entry)
    .filter((file) => readFileSync(file, "utf8").includes(text))
    .map((file) => relative(REPO_ROOT, file));
}
