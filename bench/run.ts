import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { benchArgs } from "./args.js";
import { type LagSeries, lagChartSvg, seriesFromResult } from "./lag-chart.js";
import { runRequestsPerRun, scenarioSelection } from "./requests-per-run.js";
import { runThroughput } from "./throughput.js";

/**
 * `npm run bench`: runs every benchmark that exists and prints its tables.
 * Requests per run always; sustained throughput (bench/throughput.ts) at a modest
 * setting; the spike (bench/spike.ts) at N = 10,000 (issue 8's precision figure; about nine
 * minutes on a 2-core machine, `--spike-jobs 500` for a quick look). Then a chart of the start
 * lags measured (bench/results/<date>-lags.svg).
 */
const values = benchArgs(import.meta.url, {
  runs: { type: "string", default: "50" },
  "throughput-seconds": { type: "string", default: "45" },
  "throughput-shards": { type: "string", default: "8", list: true },
  "throughput-concurrency": { type: "string", default: "16,64", list: true },
  "throughput-rate": { type: "string", default: "24" },
  "skip-throughput": { type: "boolean", default: false },
  "spike-jobs": { type: "string", default: "10000" },
  "skip-spike": { type: "boolean", default: false },
});

const started = Date.now();
const progress = (line: string) =>
  console.log(`[bench ${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${line}`);
const list = (text: string) => text.split(",").map((s) => Number(s.trim()));

const requests = await runRequestsPerRun({
  runs: Number(values.runs),
  print: progress,
  ...scenarioSelection(),
});
const lagSeries: LagSeries[] = [];

let throughputNote = "skipped (--skip-throughput)";
if (!values["skip-throughput"]) {
  const throughput = await runThroughput({
    seconds: Number(values["throughput-seconds"]),
    shards: list(values["throughput-shards"]),
    concurrency: list(values["throughput-concurrency"]),
    rate: Number(values["throughput-rate"]),
    print: progress,
  });
  const sustained = throughput.configurations.filter((c) => c.sustained).length;
  throughputNote = `${throughput.configurations.length} configurations, ${sustained} sustained ${values["throughput-rate"]} runs/s`;
  lagSeries.push(...seriesFromResult(throughput, "throughput"));
}

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
    // Per-run lags, when the spike records them, are for the chart, not for the log.
    const brief = JSON.stringify(result, (key, value: unknown) =>
      key === "lagsMs" && Array.isArray(value) ? `[${value.length} values]` : value,
    );
    progress(`spike result: ${brief}`);
    try {
      lagSeries.push(...seriesFromResult(result, "spike"));
    } catch (error) {
      progress(`spike result not charted: ${String(error)}`);
    }
  } else {
    spikeNote = "skipped: bench/spike.ts exports no runSpike function";
  }
}

if (lagSeries.length > 0) {
  const date = new Date().toISOString().slice(0, 10);
  const dir = join(import.meta.dirname, "results");
  await mkdir(dir, { recursive: true });
  await writeFile(
    join(dir, `${date}-lags.svg`),
    lagChartSvg(lagSeries, { title: `Start lag: throughput and spike (${date})` }),
  );
  progress(`wrote bench/results/${date}-lags.svg (${lagSeries.length} series)`);
}

progress(
  `done: requests per run (${requests.scenarios.length} scenarios); throughput ${throughputNote}; spike ${spikeNote}`,
);
