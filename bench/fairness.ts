import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { sleep } from "../shared/clock.js";
import { forEachConcurrently } from "../shared/concurrency.js";
import { type Api, apiClient } from "../test/support/api-client.js";
import { spawnSandbox } from "../test/support/sandbox-process.js";
import { benchArgs } from "./args.js";
import { percentile } from "./percentile.js";

/**
 * `npm run bench:fairness`: one sandbox, two tenants. Tenant B alone (30 one-offs due on one
 * second) for its baseline; then tenant A's 3,000 one-offs and B's 30 again, all due on one later
 * second. Reports B's start lag alone and beside A, A's highest number of runs at once and its
 * drain time. Then an API flood: A sends 2,000 requests in 10 s while B makes its usual requests;
 * reports A's 429s and B's latency beside its baseline. Everything goes over HTTP.
 *
 * Before anything is created, an admin tenant sets A's quotas as an operator would for a tenant
 * known to burst: concurrent runs (default half the worker slots) and requests per second.
 *
 * The jobs are created more than the fast-path window (lookahead + 2 min) before they are due, so
 * the dispatcher claims them, as it does for jobs created ahead of time: its turns between tenants
 * decide the order of the messages.
 */
export interface FairnessOptions {
  readonly aJobs?: number;
  readonly bJobs?: number;
  /** A's concurrentRuns quota; null: none. */
  readonly aConcurrentRuns?: number | null;
  /** A's requestsPerSecond quota. */
  readonly aRequestsPerSecond?: number;
  /** Sandbox worker slots. */
  readonly workers?: number;
  /** How long each run sleeps. */
  readonly sleepMs?: number;
  readonly floodRequests?: number;
  readonly floodSeconds?: number;
  /** B's requests per second during its baseline and during the flood. */
  readonly bRequestsPerSecond?: number;
  readonly print?: (line: string) => void;
  /** Where the JSON and Markdown go; null to write nothing. */
  readonly resultsDir?: string | null;
}

interface RunDto {
  status: string;
  scheduledFor: string;
  startedAt: string | null;
  finishedAt: string | null;
}

interface LagFigures {
  readonly runs: number;
  readonly succeeded: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
}

interface LatencyFigures {
  readonly requests: number;
  readonly ok: number;
  readonly throttled: number;
  readonly other: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
}

export interface FairnessResult {
  readonly bAlone: LagFigures & { readonly dueAt: string };
  readonly bBesideA: LagFigures & { readonly dueAt: string };
  /** B's p99 beside A over B's p99 alone; the goal is at most 1.5. */
  readonly bP99Ratio: number;
  readonly a: LagFigures & {
    readonly highestConcurrentRuns: number;
    readonly drainSeconds: number;
    /** A's concurrentRuns quota as `GET /quotas` tells A; null: none. */
    readonly concurrencyCap: number | null;
    readonly requestsPerSecond: number;
  };
  readonly flood: {
    readonly aRequests: LatencyFigures;
    readonly bAlone: LatencyFigures;
    readonly bDuringFlood: LatencyFigures;
    /** B's p99 during the flood over its p99 alone; the goal is at most 2. */
    readonly bP99Ratio: number;
  };
  readonly settings: {
    readonly workers: number;
    readonly sleepMs: number;
    readonly lookaheadSeconds: number;
    readonly tickSeconds: number;
  };
  readonly createSeconds: number;
  readonly loadAverage: { readonly atStart: number[]; readonly atEnd: number[] };
  readonly machine: string;
  readonly measuredAt: string;
}

const LOOKAHEAD_SECONDS = 60;
/** The fast path claims at create what is due before now + lookahead + 2 min. */
const FAST_PATH_WINDOW_MS = (LOOKAHEAD_SECONDS + 120) * 1000;
const TICK_SECONDS = 5;
const TMPFS = "/dev/shm";

export async function runFairness(options: FairnessOptions = {}): Promise<FairnessResult> {
  const print = options.print ?? ((line: string) => console.log(line));
  const aJobs = options.aJobs ?? 3000;
  const bJobs = options.bJobs ?? 30;
  const workers = options.workers ?? 64;
  const aConcurrentRuns =
    options.aConcurrentRuns === undefined ? Math.floor(workers / 2) : options.aConcurrentRuns;
  const aRequestsPerSecond = options.aRequestsPerSecond ?? 50;
  const sleepMs = options.sleepMs ?? 200;
  const loadAtStart = loadavg().map((l) => Number(l.toFixed(2)));
  print(`load average ${loadAtStart.join(", ")}; starting a sandbox (${workers} workers)…`);
  const sandbox = await spawnSandbox({
    workers,
    tickSeconds: TICK_SECONDS,
    dataParent: existsSync(TMPFS) ? TMPFS : tmpdir(),
    env: {
      SCHEDULER_API_KEYS: "a-key=tenant-a,b-key=tenant-b,ops-key=ops",
      ADMIN_TENANTS: "ops",
      LOOKAHEAD_SECONDS: String(LOOKAHEAD_SECONDS),
      // Late starts must still run, not be skipped as misfires: lag is what is measured.
      MISFIRE_GRACE_SECONDS: "3600",
    },
  });
  // Raw clients for the API flood; patient ones for everything else.
  const rawA = apiClient(sandbox.url, { kind: "bearer", key: "a-key" });
  const rawB = apiClient(sandbox.url, { kind: "bearer", key: "b-key" });
  const a = patient(rawA);
  const b = patient(rawB);
  const ops = apiClient(sandbox.url, { kind: "bearer", key: "ops-key" });
  try {
    const quotas = await ops("PUT", "/tenants/tenant-a/quotas", {
      ...(aConcurrentRuns === null ? {} : { concurrentRuns: aConcurrentRuns }),
      requestsPerSecond: aRequestsPerSecond,
    });
    if (quotas.status !== 200)
      throw new Error(`setting A's quotas: ${quotas.status} ${JSON.stringify(quotas.body)}`);
    const concurrencyCap = await readConcurrencyCap(a);
    print(
      `A's quotas: concurrentRuns ${concurrencyCap ?? "none"}, requestsPerSecond ${aRequestsPerSecond}`,
    );
    // A's jobs (and B's second batch) first, due far enough out that creating them all ends
    // before the fast-path window; B's baseline 30 s before them, created last.
    const estimatedCreateMs = (aJobs + 2 * bJobs) * 60;
    const dueTogether = wholeSecond(Date.now() + estimatedCreateMs + FAST_PATH_WINDOW_MS + 60_000);
    const dueAlone = new Date(dueTogether.getTime() - 30_000);
    print(
      `creating ${aJobs} jobs for A and ${bJobs} for B due ${dueTogether.toISOString()}, ` +
        `then ${bJobs} for B due ${dueAlone.toISOString()}…`,
    );
    const createStart = Date.now();
    const aIds = await createOneOffs(a, "a", aJobs, dueTogether, sleepMs);
    const bBesideIds = await createOneOffs(b, "b-beside", bJobs, dueTogether, sleepMs);
    const bAloneIds = await createOneOffs(b, "b-alone", bJobs, dueAlone, sleepMs);
    const createSeconds = (Date.now() - createStart) / 1000;
    const margin = dueAlone.getTime() - FAST_PATH_WINDOW_MS - Date.now();
    print(
      `created in ${createSeconds.toFixed(0)} s; ${(margin / 1000).toFixed(0)} s to spare before ` +
        "the fast-path window (the dispatcher claims them)",
    );
    if (margin < 0) print("warning: some jobs were claimed at create (fast path), not by a pass");

    await sleep(Math.max(0, dueAlone.getTime() - Date.now()));
    print("B alone is due…");
    await sleep(Math.max(0, dueTogether.getTime() - Date.now()));
    print("A and B are due…");
    await waitUntilFinished(a, aIds, print, dueTogether.getTime() + 600_000);
    print("reading every run…");
    const aRuns = await runsOf(a, aIds);
    const bAloneRuns = await runsOf(b, bAloneIds);
    const bBesideRuns = await runsOf(b, bBesideIds);
    const bAlone = lagFigures(bAloneRuns);
    const bBesideA = lagFigures(bBesideRuns);
    const aFigures = lagFigures(aRuns);
    const aFinished = aRuns.flatMap((r) => (r.finishedAt ? [Date.parse(r.finishedAt)] : []));
    const result0 = {
      bAlone: { ...bAlone, dueAt: dueAlone.toISOString() },
      bBesideA: { ...bBesideA, dueAt: dueTogether.toISOString() },
      bP99Ratio: ratio(bBesideA.p99, bAlone.p99),
      a: {
        ...aFigures,
        highestConcurrentRuns: highestConcurrency(aRuns),
        drainSeconds: (Math.max(...aFinished) - dueTogether.getTime()) / 1000,
        concurrencyCap,
        requestsPerSecond: aRequestsPerSecond,
      },
    };
    print(
      `B alone p99 ${bAlone.p99} ms; beside A p99 ${bBesideA.p99} ms (×${result0.bP99Ratio.toFixed(2)}); ` +
        `A: ${aFigures.succeeded}/${aFigures.runs} succeeded, at most ${result0.a.highestConcurrentRuns} at once, ` +
        `drained in ${result0.a.drainSeconds.toFixed(1)} s`,
    );

    print("API: B's baseline…");
    const bRate = options.bRequestsPerSecond ?? 10;
    const floodSeconds = options.floodSeconds ?? 10;
    const bAloneLatency = await paced(rawB, bRate * floodSeconds, floodSeconds);
    print(`API: A floods with ${options.floodRequests ?? 2000} requests in ${floodSeconds} s…`);
    const [aFlood, bDuring] = await Promise.all([
      paced(rawA, options.floodRequests ?? 2000, floodSeconds),
      paced(rawB, bRate * floodSeconds, floodSeconds),
    ]);
    const flood = {
      aRequests: aFlood,
      bAlone: bAloneLatency,
      bDuringFlood: bDuring,
      bP99Ratio: ratio(bDuring.p99, bAloneLatency.p99),
    };
    print(
      `A: ${aFlood.throttled} of ${aFlood.requests} answered 429; B: ${bDuring.ok}/${bDuring.requests} ok, ` +
        `p99 ${bDuring.p99} ms beside ${bAloneLatency.p99} ms alone (×${flood.bP99Ratio.toFixed(2)})`,
    );
    const cpu = cpus();
    const result: FairnessResult = {
      ...result0,
      flood,
      settings: {
        workers,
        sleepMs,
        lookaheadSeconds: LOOKAHEAD_SECONDS,
        tickSeconds: TICK_SECONDS,
      },
      createSeconds,
      loadAverage: { atStart: loadAtStart, atEnd: loadavg().map((l) => Number(l.toFixed(2))) },
      machine: `${cpu.length} × ${cpu[0]?.model ?? "cpu"}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
      measuredAt: new Date().toISOString(),
    };
    if (options.resultsDir !== null) {
      const dir = resolve(options.resultsDir ?? join(import.meta.dirname, "results"));
      await mkdir(dir, { recursive: true });
      const stem = join(dir, `fairness-${result.measuredAt.replace(/[:.]/g, "-")}`);
      await writeFile(`${stem}.json`, `${JSON.stringify(result, null, 2)}\n`);
      await writeFile(`${stem}.md`, markdownOf(result));
      print(`wrote ${stem}.json and .md`);
    }
    return result;
  } finally {
    await sandbox.stop();
  }
}

const wholeSecond = (ms: number) => new Date(Math.ceil(ms / 1000) * 1000);
const ratio = (x: number, y: number) => (y > 0 ? x / y : Number.NaN);

/**
 * The same client, except that a 429 (the tenant's request rate) waits as told and a 503 (busy)
 * backs off, up to 20 attempts: the bench's own setup and reading must not lose answers to A's
 * quota.
 */
function patient(api: Api): Api {
  return async <T>(method: string, path: string, body?: unknown) => {
    for (let attempt = 1; ; attempt++) {
      const response = await api<T>(method, path, body);
      if ((response.status !== 429 && response.status !== 503) || attempt >= 20) return response;
      const retryAfter = Number(response.headers.get("retry-after") ?? "");
      await sleep(
        Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : 200 * attempt,
      );
    }
  };
}

/** The caller's concurrentRuns quota, as `GET /quotas` tells it. */
async function readConcurrencyCap(api: Api): Promise<number | null> {
  const response = await api<{ quotas?: { concurrentRuns?: number | null } }>("GET", "/quotas");
  if (response.status !== 200)
    throw new Error(`GET /quotas: ${response.status} ${JSON.stringify(response.body)}`);
  return response.body.quotas?.concurrentRuns ?? null;
}

async function createOneOffs(
  api: Api,
  name: string,
  count: number,
  runAt: Date,
  sleepMs: number,
): Promise<string[]> {
  const ids: string[] = [];
  await forEachConcurrently(
    Array.from({ length: count }, (_, i) => i),
    8,
    async (i) => {
      const response = await api<{ id: string }>("POST", "/jobs", {
        name: `${name}-${i}`,
        type: "sleep",
        payload: { ms: sleepMs },
        schedule: { runAt: runAt.toISOString() },
      });
      if (response.status !== 201 && response.status !== 200)
        throw new Error(`create ${name}-${i}: ${response.status} ${JSON.stringify(response.body)}`);
      ids.push(response.body.id);
    },
  );
  return ids;
}

/** Waits until a sample of the jobs (then all of them) have a finished run. */
async function waitUntilFinished(
  api: Api,
  ids: readonly string[],
  print: (line: string) => void,
  deadline: number,
): Promise<void> {
  const finished = new Set<string>();
  while (finished.size < ids.length && Date.now() < deadline) {
    const pending = ids.filter((id) => !finished.has(id));
    const every = Math.ceil(pending.length / 100);
    const sample = pending.filter((_, i) => i % every === 0);
    const check = async (id: string) => {
      const page = await api<{ items?: RunDto[] }>("GET", `/jobs/${id}/runs?limit=5`);
      if (page.status !== 200)
        throw new Error(`GET /jobs/${id}/runs: ${page.status} ${JSON.stringify(page.body)}`);
      if (page.body.items?.some((r) => r.status !== "queued" && r.status !== "running"))
        finished.add(id);
    };
    await forEachConcurrently(sample, 8, check);
    if (sample.length < pending.length && sample.every((id) => finished.has(id)))
      await forEachConcurrently(
        pending.filter((id) => !finished.has(id)),
        8,
        check,
      );
    if (finished.size < ids.length) {
      print(`  ${finished.size}/${ids.length} of A finished`);
      await sleep(2000);
    }
  }
}

/** Each job's first run (one-offs that succeed have one). */
async function runsOf(api: Api, ids: readonly string[]): Promise<RunDto[]> {
  const runs: RunDto[] = [];
  await forEachConcurrently(ids, 8, async (id) => {
    const page = await api<{ items?: RunDto[] }>("GET", `/jobs/${id}/runs?limit=10`);
    if (page.status !== 200)
      throw new Error(`GET /jobs/${id}/runs: ${page.status} ${JSON.stringify(page.body)}`);
    const items = page.body.items ?? [];
    const first = items.at(-1);
    if (first) runs.push(first);
  });
  return runs;
}

function lagFigures(runs: readonly RunDto[]): LagFigures {
  const ok = runs.filter((r) => r.status === "succeeded" && r.startedAt);
  const lags = ok
    .map((r) => Date.parse(r.startedAt ?? "") - Date.parse(r.scheduledFor))
    .sort((x, y) => x - y);
  return {
    runs: runs.length,
    succeeded: ok.length,
    p50: percentile(lags, 50),
    p95: percentile(lags, 95),
    p99: percentile(lags, 99),
    max: lags.at(-1) ?? Number.NaN,
  };
}

/** The most runs in progress at one instant, from their start and finish times. */
function highestConcurrency(runs: readonly RunDto[]): number {
  const events: [number, number][] = [];
  for (const run of runs) {
    if (!run.startedAt || !run.finishedAt) continue;
    events.push([Date.parse(run.startedAt), 1], [Date.parse(run.finishedAt), -1]);
  }
  // A finish at the instant of a start frees its slot first.
  events.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let now = 0;
  let most = 0;
  for (const [, delta] of events) {
    now += delta;
    most = Math.max(most, now);
  }
  return most;
}

/** `count` cheap reads (`GET /jobs?limit=1`) spread evenly over `seconds`; their answers and latencies. */
async function paced(api: Api, count: number, seconds: number): Promise<LatencyFigures> {
  const start = Date.now();
  const answers = await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      await sleep(Math.max(0, start + (i * seconds * 1000) / count - Date.now()));
      const sent = Date.now();
      try {
        const response = await api("GET", "/jobs?limit=1");
        return { status: response.status, ms: Date.now() - sent };
      } catch {
        return { status: 0, ms: Date.now() - sent };
      }
    }),
  );
  const okLatencies = answers
    .filter((a) => a.status === 200)
    .map((a) => a.ms)
    .sort((x, y) => x - y);
  return {
    requests: count,
    ok: okLatencies.length,
    throttled: answers.filter((a) => a.status === 429).length,
    other: answers.filter((a) => a.status !== 200 && a.status !== 429).length,
    p50: percentile(okLatencies, 50),
    p99: percentile(okLatencies, 99),
    max: okLatencies.at(-1) ?? Number.NaN,
  };
}

function markdownOf(r: FairnessResult): string {
  const lagRow = (name: string, f: LagFigures) =>
    `| ${name} | ${f.succeeded}/${f.runs} | ${f.p50} | ${f.p95} | ${f.p99} | ${f.max} |`;
  const latencyRow = (name: string, f: LatencyFigures) =>
    `| ${name} | ${f.requests} | ${f.ok} | ${f.throttled} | ${f.other} | ${f.p50} | ${f.p99} | ${f.max} |`;
  return `# Fairness between tenants (\`npm run bench:fairness\`)

Measured ${r.measuredAt} on ${r.machine}; load average ${r.loadAverage.atStart.join(", ")} at the
start, ${r.loadAverage.atEnd.join(", ")} at the end. Sandbox (DynamoDB Local + fauxqs), ${r.settings.workers}
worker slots, each run a \`sleep\` of ${r.settings.sleepMs} ms, lookahead ${r.settings.lookaheadSeconds} s,
tick ${r.settings.tickSeconds} s; created over ${r.createSeconds.toFixed(0)} s, all before the fast-path window, so a dispatcher pass claimed every job.

## Start lag (startedAt − scheduledFor, ms)

| series | succeeded | p50 | p95 | p99 | max |
| --- | --- | --- | --- | --- | --- |
${lagRow(`B alone (due ${r.bAlone.dueAt})`, r.bAlone)}
${lagRow(`B beside A (due ${r.bBesideA.dueAt})`, r.bBesideA)}
${lagRow("A (same second)", r.a)}

- B's p99 beside A is ${r.bP99Ratio.toFixed(2)}× its p99 alone (goal: at most 1.5×).
- A's quotas: concurrentRuns ${r.a.concurrencyCap ?? "none"}, requestsPerSecond ${r.a.requestsPerSecond}.
- A ran at most ${r.a.highestConcurrentRuns} runs at once and drained in ${r.a.drainSeconds.toFixed(1)} s.

## API flood (\`GET /jobs?limit=1\`, latency of the 200s in ms)

| series | sent | 200 | 429 | other | p50 | p99 | max |
| --- | --- | --- | --- | --- | --- | --- | --- |
${latencyRow("B alone", r.flood.bAlone)}
${latencyRow("A's flood", r.flood.aRequests)}
${latencyRow("B during A's flood", r.flood.bDuringFlood)}

- B's p99 during the flood is ${r.flood.bP99Ratio.toFixed(2)}× its p99 alone (goal: at most 2×).
`;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const values = benchArgs(import.meta.url, {
    "a-jobs": { type: "string", default: "3000" },
    "b-jobs": { type: "string", default: "30" },
    workers: { type: "string", default: "64" },
    "a-concurrent-runs": { type: "string" },
    "a-requests-per-second": { type: "string", default: "50" },
    "sleep-ms": { type: "string", default: "200" },
    "flood-requests": { type: "string", default: "2000" },
  });
  await runFairness({
    aJobs: Number(values["a-jobs"]),
    bJobs: Number(values["b-jobs"]),
    workers: Number(values.workers),
    ...(values["a-concurrent-runs"] === undefined
      ? {}
      : {
          aConcurrentRuns:
            values["a-concurrent-runs"] === "none" ? null : Number(values["a-concurrent-runs"]),
        }),
    aRequestsPerSecond: Number(values["a-requests-per-second"]),
    sleepMs: Number(values["sleep-ms"]),
    floodRequests: Number(values["flood-requests"]),
  });
}
