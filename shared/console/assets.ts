import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** The files the browser loads for the console: the bundle esbuild makes of console/main.tsx. */
export const CONSOLE_FILES = ["app.js", "app.css"] as const;
export type ConsoleFile = (typeof CONSOLE_FILES)[number];

interface ConsoleAsset {
  readonly body: string;
  readonly contentType: string;
}

export interface ConsoleAssets {
  readonly files: ReadonlyMap<ConsoleFile, ConsoleAsset>;
  /** A hash of every file, so the page can ask for exactly this build (`?v=`). */
  readonly version: string;
}

const CONTENT_TYPES: Readonly<Record<ConsoleFile, string>> = {
  "app.js": "text/javascript; charset=utf-8",
  "app.css": "text/css; charset=utf-8",
};

export function consoleAssetsFrom(bodies: ReadonlyMap<ConsoleFile, string>): ConsoleAssets {
  const hash = createHash("sha256");
  const files = new Map<ConsoleFile, ConsoleAsset>();
  for (const name of CONSOLE_FILES) {
    const body = bodies.get(name);
    if (body === undefined) throw new Error(`console build has no ${name}`);
    hash.update(name).update(body);
    files.set(name, { body, contentType: CONTENT_TYPES[name] });
  }
  return { files, version: hash.digest("hex").slice(0, 16) };
}

/**
 * A build written to a directory: the API Lambda's bundle carries one in
 * `console/` beside its handler (infra/constructs/api.ts). Null when the
 * directory is missing (the handler run from source, e.g. in tests).
 */
export function readConsoleAssets(dir: string): ConsoleAssets | null {
  if (!existsSync(join(dir, CONSOLE_FILES[0]))) return null;
  return consoleAssetsFrom(
    new Map(CONSOLE_FILES.map((name) => [name, readFileSync(join(dir, name), "utf8")])),
  );
}
