import { existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { runRequestsPerRun } from "./requests-per-run.js";

/**
 * `npm run bench`: runs every benchmark that exists and prints its tables.
 * Requests per run always; the spike (bench/spike.ts) when it is present and
 * exports `runSpike`, at a modest N.
 */
const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "50" },
    "spike-jobs": { type: "string", default: "500" },
    "skip-spike": { type: "boolean", default: false },
  },
});

const started = Date.now();
const progress = (line: string) =>
  console.log(`[bench ${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${line}`);

const requests = await runRequestsPerRun({ runs: Number(values.runs), print: progress });

const spikePath = join(import.meta.dirname, "spike.ts");
let spikeNote = "skipped: bench/spike.ts does not exist";
if (values["skip-spike"]) {
  spikeNote = "skipped (--skip-spike)";
} else if (existsSync(spikePath)) {
  const spike: Record<string, unknown> = await import(pathToFileURL(spikePath).href);
  const runSpike = spike.runSpike;
  if (typeof runSpike === "function") {
    const jobs = Number(values["spike-jobs"]);
    progress(`spike: N = ${jobs}…`);
    const result: unknown = await runSpike({ jobs, print: progress });
    spikeNote = `ran at N = ${jobs}`;
    progress(`spike result: ${JSON.stringify(result)}`);
  } else {
    spikeNote = "skipped: bench/spike.ts exports no runSpike function";
  }
}

progress(`done: requests per run (${requests.scenarios.length} scenarios); spike ${spikeNote}`);
