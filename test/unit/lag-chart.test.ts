import { describe, expect, it } from "vitest";
import { lagChartSvg, lagsFromQuantiles, seriesFromResult } from "../../bench/lag-chart.js";

/** Checks that every element is closed in order (a small stand-in for an XML parser). */
function balanced(svg: string): boolean {
  const stack: string[] = [];
  for (const match of svg.matchAll(/<(\/?)([A-Za-z][\w-]*)[^>]*?(\/?)>/g)) {
    const [, closing, name = "", selfClosing] = match;
    if (selfClosing) continue;
    if (closing) {
      if (stack.pop() !== name) return false;
    } else {
      stack.push(name);
    }
  }
  return stack.length === 0;
}

const ramp = (count: number, max: number) =>
  Array.from({ length: count }, (_, i) => ((i + 1) / count) * max);

describe("lagChartSvg", () => {
  const series = [
    { label: "8 shards × 64 workers", lagsMs: ramp(500, 1234) },
    { label: "4 shards × 16 workers", lagsMs: ramp(300, 800) },
  ];

  it("is one balanced <svg> document with one path per series", () => {
    const svg = lagChartSvg(series);
    expect(svg.startsWith("<svg ")).toBe(true);
    expect(svg.trimEnd().endsWith("</svg>")).toBe(true);
    expect(svg.match(/<svg\b/g)).toHaveLength(1);
    expect(balanced(svg)).toBe(true);
    expect(svg.match(/<path class="series-line"/g)).toHaveLength(series.length);
  });

  it("names every series in the legend, with its count and percentiles", () => {
    const svg = lagChartSvg(series);
    for (const s of series) expect(svg).toContain(`>${s.label}</tspan>`);
    expect(svg).toContain("n = 500");
    expect(svg).toContain("n = 300");
    expect(svg).toContain("p99 1.22 s");
  });

  it("ends the x axis at a round value just above the largest lag", () => {
    const svg = lagChartSvg(series);
    expect(svg).toContain('data-scale="linear"');
    const xMax = Number(/data-x-max="([\d.]+)"/.exec(svg)?.[1]);
    expect(xMax).toBeGreaterThanOrEqual(1234);
    expect(xMax).toBeLessThanOrEqual(2 * 1234);
    // Every series ends at 100 %: its last vertical step reaches the top of the plot.
    const tops = [...svg.matchAll(/d="[^"]*V([\d.]+)H[\d.]+"/g)].map((m) => Number(m[1]));
    expect(tops).toHaveLength(2);
    expect(new Set(tops).size).toBe(1);
    expect(svg).toContain(">100 %</text>");
  });

  it("switches to a log axis when the lags span decades, and labels it", () => {
    const svg = lagChartSvg([
      { label: "fast", lagsMs: ramp(100, 300) },
      { label: "spike", lagsMs: ramp(100, 50_000) },
    ]);
    expect(svg).toContain('data-scale="log"');
    expect(svg).toContain("(log scale)");
    expect(Number(/data-x-max="([\d.]+)"/.exec(svg)?.[1])).toBe(100_000);
    expect(svg).toContain(">10 s</text>");
  });

  it("escapes labels", () => {
    const svg = lagChartSvg([{ label: 'a <b> & "c"', lagsMs: [1, 2, 3] }]);
    expect(svg).toContain("a &lt;b&gt; &amp; &quot;c&quot;");
    expect(balanced(svg)).toBe(true);
  });

  it("draws an empty series in the legend only", () => {
    const svg = lagChartSvg([
      { label: "none", lagsMs: [] },
      { label: "some", lagsMs: [10, 20] },
    ]);
    expect(svg.match(/<path class="series-line"/g)).toHaveLength(1);
    expect(svg).toContain("no runs");
  });
});

describe("lagsFromQuantiles and seriesFromResult", () => {
  it("reconstructs lags that hit the given quantiles", () => {
    const lags = lagsFromQuantiles({ min: 87, p50: 19_452, p95: 49_370, p99: 50_093, max: 50_581 });
    expect(lags).toHaveLength(400);
    expect(lags[199]).toBeCloseTo(19_452, 0);
    expect(lags.at(-1)).toBeCloseTo(50_581, 0);
    expect([...lags].sort((a, b) => a - b)).toEqual(lags);
  });

  it("reads a spike result (quantiles) and a throughput result (raw lags)", () => {
    const spike = seriesFromResult({
      jobs: 1000,
      lagMs: { p50: 10, p95: 20, p99: 30, max: 40, min: 1 },
    });
    expect(spike).toHaveLength(1);
    expect(spike[0]?.label).toContain("spike N = 1000");
    const throughput = seriesFromResult({
      configurations: [
        { label: "8 shards × 16 workers", lagsMs: [1, 2] },
        { label: "8 shards × 64 workers", lagsMs: [3] },
      ],
    });
    expect(throughput.map((s) => s.lagsMs.length)).toEqual([2, 1]);
    expect(() => seriesFromResult({ something: "else" })).toThrow(/neither/);
  });
});
