import { readFileSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { percentile } from "./percentile.js";

/**
 * Start-lag chart: the cumulative distribution of start lags (startedAt − scheduledFor), one
 * step curve per series: "y % of the runs started within x". A pure function returning SVG text,
 * no dependencies; plus a CLI that reads spike and throughput result JSONs:
 *
 *   tsx bench/lag-chart.ts bench/results/spike-1000-….json bench/results/2026-11-29-throughput.json \
 *     --out bench/results/lags.svg
 */

export interface LagSeries {
  readonly label: string;
  readonly lagsMs: readonly number[];
  /** The lags were interpolated from a few quantiles (see lagsFromQuantiles), not measured one by one. */
  readonly approximate?: boolean;
  /** The number of runs behind the series when lagsMs is not one value per run. */
  readonly count?: number;
}

export interface LagChartOptions {
  readonly title?: string;
  /** Width of the whole image in px (the plot is narrower); default 760. */
  readonly width?: number;
  /** Height of the plot area's box in px, before the legend rows; default 400. */
  readonly height?: number;
  /** "auto" (default): log when the lags span more than two decades, else linear. */
  readonly scale?: "linear" | "log" | "auto";
  /** Right end of the x axis; default: the largest lag, rounded up to a tick. */
  readonly maxMs?: number;
}

/** Okabe–Ito, readable by the colour-blind and in print; yellow left out (poor on white). */
const COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"];
const DASHES = ["", "6 3", "2 2"];

const MARGIN = { left: 64, right: 40, top: 44, bottom: 52 };
const LEGEND_ROW = 18;

function escapeXml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

/** A number for an SVG attribute: at most one decimal, no trailing ".0". */
const n = (value: number) => String(Math.round(value * 10) / 10);

/** "0", "250 ms", "1.5 s", "20 s", "2 min" */
export function formatMs(ms: number): string {
  if (ms === 0) return "0";
  const abs = Math.abs(ms);
  if (abs < 1000) return `${Number(ms.toPrecision(3))} ms`;
  if (abs < 120_000) return `${Number((ms / 1000).toPrecision(3))} s`;
  return `${Number((ms / 60_000).toPrecision(3))} min`;
}

/** The 1–2–5 step that cuts [0, max] into about `count` intervals. */
function niceStep(max: number, count: number): number {
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const fraction = raw / power;
  const nice =
    fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 2.5 ? 2.5 : fraction <= 5 ? 5 : 10;
  return nice * power;
}

interface Axis {
  readonly scale: "linear" | "log";
  readonly min: number;
  readonly max: number;
  readonly ticks: readonly number[];
  /** Ticks that get a label (log axes label 1, 2 and 5 of each decade, or fewer when crowded). */
  readonly labelled: ReadonlySet<number>;
}

function linearAxis(maxLag: number, maxMs: number | undefined): Axis {
  const top = Math.max(1, maxMs ?? maxLag);
  const step = niceStep(top, 6);
  const max = maxMs ?? Math.ceil(top / step) * step;
  const ticks: number[] = [];
  for (let t = 0; t <= max + step / 1e6; t += step) ticks.push(Math.round(t * 1e6) / 1e6);
  return { scale: "linear", min: 0, max, ticks, labelled: new Set(ticks) };
}

function logAxis(minLag: number, maxLag: number, maxMs: number | undefined): Axis {
  const min = 10 ** Math.floor(Math.log10(Math.max(1, minLag)));
  const max = maxMs ?? 10 ** Math.ceil(Math.log10(Math.max(min * 10, maxLag)));
  const ticks: number[] = [];
  const labelled = new Set<number>();
  const decades = Math.log10(max / min);
  for (let decade = min; decade <= max; decade *= 10) {
    for (const m of [1, 2, 5]) {
      const t = decade * m;
      if (t > max * (1 + 1e-9)) break;
      ticks.push(t);
      if (m === 1 || decades <= 3) labelled.add(t);
    }
  }
  return { scale: "log", min, max, ticks, labelled };
}

function chooseAxis(series: readonly LagSeries[], options: LagChartOptions): Axis {
  const all = series.flatMap((s) => s.lagsMs.filter(Number.isFinite));
  const maxLag = all.length > 0 ? Math.max(...all) : 1000;
  const positive = all.filter((x) => x > 0).sort((a, b) => a - b);
  // Log when the bulk and the tail are far apart: the 5th percentile and the largest lag.
  const low = positive.length > 0 ? percentile(positive, 5) : 1;
  const scale =
    options.scale === "log" || options.scale === "linear"
      ? options.scale
      : maxLag / Math.max(1, low) >= 100
        ? "log"
        : "linear";
  return scale === "log"
    ? logAxis(positive[0] ?? 1, maxLag, options.maxMs)
    : linearAxis(maxLag, options.maxMs);
}

/**
 * An SVG of the start-lag CDF of each series: x the lag, y the percentage of that series' runs
 * started within it. Axes with ticks and grid, p95/p99 guides, and a legend with each series'
 * count and percentiles.
 */
export function lagChartSvg(series: readonly LagSeries[], options: LagChartOptions = {}): string {
  const width = options.width ?? 800;
  const boxHeight = options.height ?? 400;
  const legendTop = boxHeight + 6;
  const height = legendTop + Math.max(1, series.length) * LEGEND_ROW + 10;
  const plot = {
    left: MARGIN.left,
    top: MARGIN.top,
    right: width - MARGIN.right,
    bottom: boxHeight - MARGIN.bottom,
  };
  const axis = chooseAxis(series, options);
  const x = (ms: number): number => {
    const span = plot.right - plot.left;
    let f: number;
    if (axis.scale === "log") {
      const v = Math.min(Math.max(ms, axis.min), axis.max);
      f = Math.log10(v / axis.min) / Math.log10(axis.max / axis.min);
    } else {
      f = (Math.min(Math.max(ms, axis.min), axis.max) - axis.min) / (axis.max - axis.min);
    }
    return plot.left + f * span;
  };
  const y = (fraction: number): number => plot.bottom - fraction * (plot.bottom - plot.top);

  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, 'Segoe UI', sans-serif" font-size="12" data-scale="${axis.scale}" data-x-max="${axis.max}">`,
  );
  const title =
    options.title ?? "Start lag: share of runs started within x of their scheduled time";
  out.push(`<title>${escapeXml(title)}</title>`);
  out.push(`<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`);
  out.push(
    `<text x="${width / 2}" y="22" text-anchor="middle" font-size="15" font-weight="600">${escapeXml(title)}</text>`,
  );

  // Grid and y axis: 0–100 % by 10.
  out.push(`<g class="grid" stroke="#e3e3e3" stroke-width="1">`);
  for (let p = 0; p <= 100; p += 10) {
    out.push(
      `<line x1="${plot.left}" y1="${n(y(p / 100))}" x2="${plot.right}" y2="${n(y(p / 100))}"/>`,
    );
  }
  for (const t of axis.ticks) {
    out.push(`<line x1="${n(x(t))}" y1="${plot.top}" x2="${n(x(t))}" y2="${plot.bottom}"/>`);
  }
  out.push("</g>");
  // p95 and p99 guides.
  out.push(`<g class="guides" stroke="#9a9a9a" stroke-width="1" stroke-dasharray="4 3">`);
  for (const p of [95, 99]) {
    out.push(
      `<line x1="${plot.left}" y1="${n(y(p / 100))}" x2="${plot.right}" y2="${n(y(p / 100))}"/>`,
    );
  }
  out.push("</g>");

  out.push(`<g class="y-axis" font-size="11" fill="#333333">`);
  out.push(
    `<line x1="${plot.left}" y1="${plot.top}" x2="${plot.left}" y2="${plot.bottom}" stroke="#333333"/>`,
  );
  for (let p = 0; p <= 100; p += 10) {
    out.push(`<text x="${plot.left - 6}" y="${n(y(p / 100) + 4)}" text-anchor="end">${p} %</text>`);
  }
  for (const p of [95, 99]) {
    out.push(
      `<text x="${plot.right + 4}" y="${n(y(p / 100) + (p === 99 ? -1 : 8))}" fill="#777777">p${p}</text>`,
    );
  }
  out.push(
    `<text transform="translate(16 ${n((plot.top + plot.bottom) / 2)}) rotate(-90)" text-anchor="middle" font-size="12">runs started within x (%)</text>`,
  );
  out.push("</g>");

  out.push(`<g class="x-axis" font-size="11" fill="#333333">`);
  out.push(
    `<line x1="${plot.left}" y1="${plot.bottom}" x2="${plot.right}" y2="${plot.bottom}" stroke="#333333"/>`,
  );
  for (const t of axis.ticks) {
    out.push(
      `<line x1="${n(x(t))}" y1="${plot.bottom}" x2="${n(x(t))}" y2="${plot.bottom + 4}" stroke="#333333"/>`,
    );
    if (axis.labelled.has(t)) {
      out.push(
        `<text x="${n(x(t))}" y="${plot.bottom + 17}" text-anchor="middle">${escapeXml(formatMs(t))}</text>`,
      );
    }
  }
  out.push(
    `<text x="${n((plot.left + plot.right) / 2)}" y="${plot.bottom + 38}" text-anchor="middle" font-size="12">start lag x = startedAt − scheduledFor${axis.scale === "log" ? " (log scale)" : ""}</text>`,
  );
  out.push("</g>");

  // One step curve per series, thinned to one point per tenth of a pixel column.
  out.push(`<g class="series" fill="none" stroke-width="2" stroke-linejoin="round">`);
  series.forEach((s, i) => {
    const sorted = s.lagsMs.filter(Number.isFinite).sort((a, b) => a - b);
    if (sorted.length === 0) return;
    const colour = COLOURS[i % COLOURS.length] ?? "#000000";
    const dash = DASHES[Math.floor(i / COLOURS.length) % DASHES.length] ?? "";
    const steps: { px: number; fraction: number }[] = [];
    sorted.forEach((lag, k) => {
      const px = Math.round(x(lag) * 10) / 10;
      const fraction = (k + 1) / sorted.length;
      const last = steps.at(-1);
      if (last && last.px === px) last.fraction = fraction;
      else steps.push({ px, fraction });
    });
    const first = steps[0];
    if (!first) return;
    const d = [`M${n(first.px)} ${n(y(0))}`];
    for (const step of steps) d.push(`H${n(step.px)}V${n(y(step.fraction))}`);
    d.push(`H${n(plot.right)}`);
    out.push(
      `<path class="series-line" data-label="${escapeXml(s.label)}" stroke="${colour}"${dash ? ` stroke-dasharray="${dash}"` : ""} d="${d.join("")}"/>`,
    );
  });
  out.push("</g>");

  // Legend rows under the axis label: swatch, label, n and percentiles.
  out.push(`<g class="legend" font-size="12" fill="#222222">`);
  if (series.length === 0) {
    out.push(`<text x="${plot.left}" y="${legendTop + 12}">no series</text>`);
  }
  series.forEach((s, i) => {
    const sorted = s.lagsMs.filter(Number.isFinite).sort((a, b) => a - b);
    const colour = COLOURS[i % COLOURS.length] ?? "#000000";
    const dash = DASHES[Math.floor(i / COLOURS.length) % DASHES.length] ?? "";
    const rowY = legendTop + i * LEGEND_ROW + 12;
    const count = s.count ?? sorted.length;
    const stats =
      sorted.length === 0
        ? "no runs"
        : `n = ${count} · p50 ${formatMs(percentile(sorted, 50))} · p95 ${formatMs(percentile(sorted, 95))} · p99 ${formatMs(percentile(sorted, 99))} · max ${formatMs(sorted.at(-1) ?? 0)}${s.approximate ? " · curve interpolated between these" : ""}`;
    out.push(
      `<line x1="${plot.left}" y1="${rowY - 4}" x2="${plot.left + 26}" y2="${rowY - 4}" stroke="${colour}" stroke-width="2.5"${dash ? ` stroke-dasharray="${dash}"` : ""}/>`,
    );
    out.push(
      `<text class="legend-label" x="${plot.left + 34}" y="${rowY}"><tspan font-weight="600">${escapeXml(s.label)}</tspan><tspan fill="#555555" font-size="11" dx="8">${escapeXml(stats)}</tspan></text>`,
    );
  });
  out.push("</g>");
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}

/**
 * Lags reconstructed from a few quantiles (what a spike result holds when it has no raw lags):
 * `count` values placed by linear interpolation of the inverse CDF through (0, min), (0.5, p50),
 * (0.95, p95), (0.99, p99), (1, max). Only the given points are exact.
 */
export function lagsFromQuantiles(
  q: { min?: number; p50: number; p95: number; p99: number; max: number },
  count = 400,
): number[] {
  const knots: [number, number][] = [
    [0, q.min ?? 0],
    [0.5, q.p50],
    [0.95, q.p95],
    [0.99, q.p99],
    [1, q.max],
  ];
  const lags: number[] = [];
  for (let i = 0; i < count; i++) {
    const u = (i + 1) / count;
    const upper = knots.findIndex(([p]) => p >= u);
    const [p1, v1] = knots[Math.max(1, upper)] ?? [1, q.max];
    const [p0, v0] = knots[Math.max(0, upper - 1)] ?? [0, q.min ?? 0];
    lags.push(p1 === p0 ? v1 : v0 + ((u - p0) / (p1 - p0)) * (v1 - v0));
  }
  return lags;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;
const isNumberArray = (v: unknown): v is number[] =>
  Array.isArray(v) && v.every((x) => typeof x === "number");

/**
 * The series in a result JSON: a throughput result (one per configuration, from `lagsMs`), or a
 * spike result (its raw `lagsMs` when present, else its `lagMs` quantiles, marked as such).
 */
export function seriesFromResult(json: unknown, name = "result"): LagSeries[] {
  if (!isRecord(json)) throw new Error(`${name}: not a JSON object`);
  const configurations = json.configurations;
  if (Array.isArray(configurations)) {
    return configurations.flatMap((c, i) => {
      if (!isRecord(c) || !isNumberArray(c.lagsMs)) return [];
      const label =
        typeof c.label === "string"
          ? c.label
          : `${String(c.shards ?? "?")} shards × ${String(c.concurrency ?? "?")} workers (${i + 1})`;
      return [{ label: `throughput ${label}`, lagsMs: c.lagsMs }];
    });
  }
  const jobs = typeof json.jobs === "number" ? json.jobs : null;
  const label = jobs === null ? basename(name, ".json") : `spike N = ${jobs}`;
  if (isNumberArray(json.lagsMs)) return [{ label, lagsMs: json.lagsMs }];
  const q = json.lagMs;
  if (
    isRecord(q) &&
    typeof q.p50 === "number" &&
    typeof q.p95 === "number" &&
    typeof q.p99 === "number" &&
    typeof q.max === "number"
  ) {
    const min = typeof q.min === "number" ? q.min : 0;
    const succeeded = typeof json.succeeded === "number" ? json.succeeded : undefined;
    return [
      {
        label,
        lagsMs: lagsFromQuantiles({ min, p50: q.p50, p95: q.p95, p99: q.p99, max: q.max }),
        approximate: true,
        ...(succeeded === undefined ? {} : { count: succeeded }),
      },
    ];
  }
  throw new Error(`${name}: neither a throughput result (configurations[].lagsMs) nor a spike`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      out: { type: "string" },
      title: { type: "string" },
      scale: { type: "string", default: "auto" },
    },
  });
  if (positionals.length === 0) {
    console.error(
      "usage: tsx bench/lag-chart.ts <result.json...> [--out chart.svg] [--title …] [--scale auto|linear|log]",
    );
    process.exit(2);
  }
  const scale = values.scale;
  if (scale !== "auto" && scale !== "linear" && scale !== "log") {
    console.error(`--scale must be auto, linear or log, got ${scale}`);
    process.exit(2);
  }
  const series = positionals.flatMap((file) =>
    seriesFromResult(JSON.parse(readFileSync(file, "utf8")), file),
  );
  const svg = lagChartSvg(series, { scale, ...(values.title ? { title: values.title } : {}) });
  if (values.out) {
    writeFileSync(values.out, svg);
    console.log(`wrote ${values.out} (${series.length} series)`);
  } else {
    process.stdout.write(svg);
  }
}
