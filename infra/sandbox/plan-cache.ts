import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { join, relative, resolve } from "node:path";
import { planFromTemplate, type ResourcePlan } from "./resources.js";

const REPO = resolve(import.meta.dirname, "../..");
/** What the synthesized stack is made from: its code, what it imports, and the locked packages. */
const SOURCES = ["infra", "shared", "functions", "package-lock.json"];
const CACHE_DIR = join(REPO, "node_modules", ".cache", "scheduler-sandbox");

/**
 * The deployed stack's tables, queues and settings as the sandbox provisions them. Synthesizing
 * the stack costs seconds of CPU at every start (aws-cdk-lib and cdk-nag load, the app
 * synthesizes), so the plan is kept in `node_modules/.cache` under a hash of everything that could
 * change it: the sources of infra/, shared/ and functions/, the lock file and CDK_CONTEXT_JSON. A
 * cache that cannot be read or written is passed by: the stack is synthesized as before.
 *
 * The synth runs the modules this process has loaded, from `loadedAt` on (its start), while the
 * key is read from the sources on disk: a plan is kept only when no source changed since then,
 * or a source saved meanwhile (an edit, a checkout) would file the older sources' plan under the
 * newer ones' key, and every later start of those sources would provision from it.
 */
export async function stackResourcePlan(
  loadedAt: number = performance.timeOrigin,
): Promise<ResourcePlan> {
  const file = await planCacheFile();
  if (file !== null) {
    const cached = await readFile(file, "utf8").then(
      (text) => JSON.parse(text) as ResourcePlan,
      () => null,
    );
    if (cached !== null) return cached;
  }
  // Loaded only here: aws-cdk-lib is most of a sandbox start's CPU.
  const { synthesizeTemplate } = await import("./template.js");
  const plan = planFromTemplate(synthesizeTemplate());
  const unchanged = await newestSourceChange().then(
    (changedAt) => changedAt < loadedAt,
    () => false,
  );
  if (file !== null && unchanged) {
    // Written whole under a name of its own, then renamed: a sandbox starting beside this one
    // reads the old file, none, or this one, never half of it.
    const partial = `${file}.${process.pid}.partial`;
    await mkdir(CACHE_DIR, { recursive: true })
      .then(() => writeFile(partial, JSON.stringify(plan)))
      .then(() => rename(partial, file))
      .catch(() => undefined);
  }
  return plan;
}

/** Where the plan of the sources as they stand is kept; null if they cannot be read. */
export async function planCacheFile(): Promise<string | null> {
  // The CDK app reads its context from the process's environment, whatever the sandbox's env.
  const key = await sourcesHash(process.env.CDK_CONTEXT_JSON ?? "").catch(() => null);
  return key === null ? null : join(CACHE_DIR, `plan-${key}.json`);
}

async function sourcesHash(context: string): Promise<string> {
  const hash = createHash("sha256").update(`context ${context}\n`);
  for (const source of SOURCES) {
    for (const path of await filesUnder(join(REPO, source))) {
      hash.update(`${relative(REPO, path)}\n`).update(await readFile(path));
    }
  }
  return hash.digest("hex").slice(0, 32);
}

/** When a source last changed (ms since the epoch). */
async function newestSourceChange(): Promise<number> {
  let newest = 0;
  for (const source of SOURCES) {
    for (const path of await filesUnder(join(REPO, source))) {
      newest = Math.max(newest, (await stat(path)).mtimeMs);
    }
  }
  return newest;
}

async function filesUnder(path: string): Promise<string[]> {
  const entries = await readdir(path, { withFileTypes: true }).catch((error: unknown) => {
    if ((error as NodeJS.ErrnoException).code === "ENOTDIR") return null;
    throw error;
  });
  if (entries === null) return [path];
  const nested = await Promise.all(
    entries
      .filter((entry) => entry.name !== "node_modules" && entry.name !== "cdk.out")
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((entry) => filesUnder(join(path, entry.name))),
  );
  return nested.flat();
}
