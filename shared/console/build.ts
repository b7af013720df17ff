import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type BuildOptions, build, buildSync } from "esbuild";
import {
  CONSOLE_FILES,
  type ConsoleAssets,
  type ConsoleFile,
  consoleAssetsFrom,
} from "./assets.js";

const CONSOLE_SOURCE = fileURLToPath(new URL("../../console/", import.meta.url));

/**
 * One bundle for the browser: Preact, the pages and the OIDC client in
 * app.js, the stylesheet in app.css; nothing is fetched from anywhere else.
 */
function options(outdir: string): BuildOptions & { outdir: string } {
  return {
    entryPoints: { app: join(CONSOLE_SOURCE, "main.tsx") },
    bundle: true,
    format: "esm",
    platform: "browser",
    target: ["es2022"],
    jsx: "automatic",
    jsxImportSource: "preact",
    minify: true,
    legalComments: "none",
    logLevel: "silent",
    outdir,
  };
}

/** Built in memory, for `npm start` and tests (a few hundred milliseconds). */
export async function buildConsoleAssets(): Promise<ConsoleAssets> {
  const result = await build({ ...options("/console-build"), write: false });
  const bodies = new Map<ConsoleFile, string>();
  for (const file of result.outputFiles) {
    const name = basename(file.path);
    if ((CONSOLE_FILES as readonly string[]).includes(name)) {
      bodies.set(name as ConsoleFile, file.text);
    }
  }
  return consoleAssetsFrom(bodies);
}

/** Written to a directory, for the API Lambda's bundle (run while CDK synthesizes). */
export function writeConsoleAssets(outdir: string): void {
  buildSync(options(outdir));
}
