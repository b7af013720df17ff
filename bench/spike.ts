import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { cpus, tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { sleep } from "../shared/clock.js";
import { forEachConcurrently } from "../shared/concurrency.js";
import { type ApiAuth, apiClient, authModeFromEnv } from "../test/support/api-client.js";
import { type SandboxProcess, spawnSandbox } from "../test/support/sandbox-process.js";
import { benchArgs } from "./args.js";
import { percentile } from "./percentile.js";

/**
 * Spike: N one-off jobs, created ahead of time, all due on the same second.
 * Reports the start lag (startedAt − scheduledFor) percentiles and the time
 * to drain (last finishedAt − the due second). Talks to the API over HTTP
 * only: a sandbox CLI it spawns, or SCHEDULER_API_URL: with SCHEDULER_API_KEY
 * as a bearer key, or without it (or with SCHEDULER_API_AUTH=iam) signed with
 * SigV4 for a deployed stack's IAM-authorized API, credentials from the AWS
 * SDK's default chain (AWS_PROFILE, AWS_REGION).
 */
export interface SpikeOptions {
  readonly jobs: number;
  /**
   * Sandbox worker concurrency (ignored with SCHEDULER_API_URL). Default: one slot per job up to
   * 1,000, as a Lambda fleet scaled out to the spike would have (workerConcurrency goes to 1,000).
   */
  readonly workers?: number;
  /** Concurrent POSTs while creating. */
  readonly concurrency?: number;
  /** Lead time per job: the jobs are due this long (times N, plus `baseLeadMs`) after the first create. */
  readonly msPerCreate?: number;
  /** The lead's fixed part (default 15 s). */
  readonly baseLeadMs?: number;
  readonly print?: (line: string) => void;
  /**
   * Where the sandbox keeps its DynamoDB Local data. Default: /dev/shm where there is one, so that
   * the emulator's SQLite writes measure memory, not this machine's disk; else the OS's temporary
   * directory.
   */
  readonly dataParent?: string;
  /** Where the JSON goes; null to write nothing. */
  readonly resultsDir?: string | null;
}

export interface SpikeResult {
  readonly jobs: number;
  readonly succeeded: number;
  readonly notSucceeded: number;
  readonly dueAt: string;
  readonly createSeconds: number;
  readonly createPerSecond: number;
  readonly lagMs: { p50: number; p95: number; p99: number; max: number; min: number };
  readonly drainSeconds: number;
  /** Every succeeded run's start lag, sorted: what the lag chart draws. */
  readonly lagsMs: readonly number[];
  readonly workers: number;
  readonly target: string;
  /** Where the sandbox's DynamoDB Local kept its data. */
  readonly dataParent: string | null;
  readonly machine: string;
  readonly measuredAt: string;
}

const TMPFS = "/dev/shm";
const DEFAULT_MS_PER_CREATE = 30;

interface RunDto {
  status: string;
  scheduledFor: string;
  startedAt: string | null;
  finishedAt: string | null;
}

export async function runSpike(options: SpikeOptions): Promise<SpikeResult> {
  const print = options.print ?? ((line: string) => console.log(line));
  const workers = options.workers ?? Math.min(options.jobs, 1000);
  const dataParent = options.dataParent ?? (existsSync(TMPFS) ? TMPFS : tmpdir());
  const concurrency = options.concurrency ?? 8;
  let sandbox: SandboxProcess | null = null;
  let url = process.env.SCHEDULER_API_URL;
  const sandboxKey = "spike-key";
  let auth: ApiAuth = { kind: "bearer", key: sandboxKey };
  if (url)
    auth =
      authModeFromEnv(process.env) === "iam"
        ? { kind: "iam" }
        : { kind: "bearer", key: process.env.SCHEDULER_API_KEY ?? sandboxKey };
  if (!url) {
    print(`starting a sandbox (${workers} workers)…`);
    sandbox = await spawnSandbox({
      workers,
      dataParent,
      // The production tick: every run here is claimed at create (fast path), so a faster tick
      // would only add its shard scans and lease writes to what the spike measures.
      tickSeconds: 60,
      env: {
        SCHEDULER_API_KEYS: `${sandboxKey}=spike`,
        // The widest lookahead, so that every job is claimed and enqueued (with its delay) at create.
        LOOKAHEAD_SECONDS: "600",
        // Late starts under the spike must still run, not be skipped as misfires.
        MISFIRE_GRACE_SECONDS: "3600",
        // The spike measures start lag, not the API's request quota: at the deployed default (50
        // requests a second, two seconds' burst) a quiet machine's 55-100 creates/s met 429s.
        QUOTA_REQUESTS_PER_SECOND: "1000",
      },
    });
    url = sandbox.url;
  }
  const api = apiClient(url, auth);
  try {
    // The sandbox takes 55-100 creates/s here (a create inside the lookahead is a BatchWriteItem and
    // a PutItem); the default leaves room for half that.
    const leadMs =
      (options.baseLeadMs ?? 15_000) +
      options.jobs * (options.msPerCreate ?? DEFAULT_MS_PER_CREATE);
    const dueAt = new Date(Math.ceil((Date.now() + leadMs) / 1000) * 1000);
    const due = dueAt.toISOString();
    print(`creating ${options.jobs} one-off jobs due at ${due} (${concurrency} concurrent POSTs)…`);
    const ids: string[] = [];
    const createStart = Date.now();
    await forEachConcurrently(
      Array.from({ length: options.jobs }, (_, i) => i),
      concurrency,
      async (i) => {
        for (let attempt = 1; ; attempt++) {
          const response = await api<{ id: string }>("POST", "/jobs", {
            name: `spike-${i}`,
            type: "noop",
            schedule: { runAt: due },
          });
          if (response.status === 201 || response.status === 200) {
            ids.push(response.body.id);
            return;
          }
          // Only a 503 (busy) is retried; a create that failed with a 5xx wrote nothing.
          if (attempt >= 5 || response.status !== 503)
            throw new Error(`create ${i}: ${response.status} ${JSON.stringify(response.body)}`);
          await sleep(200 * attempt);
        }
      },
    );
    const createSeconds = (Date.now() - createStart) / 1000;
    print(
      `created in ${createSeconds.toFixed(1)} s (${(options.jobs / createSeconds).toFixed(0)}/s), ` +
        `${((dueAt.getTime() - Date.now()) / 1000).toFixed(1)} s before they are due`,
    );
    if (Date.now() >= dueAt.getTime())
      throw new Error(
        "creating the jobs took longer than the lead time; they were not ahead of time",
      );

    const finished = new Map<string, RunDto>();
    const drainDeadline = dueAt.getTime() + 120_000 + options.jobs * 50;
    await sleep(Math.max(0, dueAt.getTime() - Date.now() + 1000));
    const check = async (id: string) => {
      const page = await api<{ items: RunDto[] }>("GET", `/jobs/${id}/runs?limit=10`);
      const done = page.body.items?.find((r) => r.status !== "queued" && r.status !== "running");
      if (done) finished.set(id, done);
    };
    while (finished.size < ids.length && Date.now() < drainDeadline) {
      const pending = ids.filter((id) => !finished.has(id));
      // Polling every job while they run would compete with the runs it measures: watch a sample
      // of up to 200 until it has finished, then read the rest. Lags come from the runs themselves.
      const every = Math.ceil(pending.length / 200);
      const sample = pending.filter((_, i) => i % every === 0);
      await forEachConcurrently(sample, concurrency, check);
      if (sample.length < pending.length && sample.every((id) => finished.has(id)))
        await forEachConcurrently(
          pending.filter((id) => !finished.has(id)),
          concurrency,
          check,
        );
      if (finished.size < ids.length) {
        print(`  ${finished.size}/${ids.length} finished`);
        await sleep(1000);
      }
    }
    const runs = [...finished.values()];
    const ok = runs.filter((r) => r.status === "succeeded");
    const lags = ok
      .map((r) => Date.parse(r.startedAt ?? "") - Date.parse(r.scheduledFor))
      .sort((a, b) => a - b);
    const lastFinish = Math.max(...ok.map((r) => Date.parse(r.finishedAt ?? "")));
    const cpu = cpus();
    const result: SpikeResult = {
      jobs: options.jobs,
      succeeded: ok.length,
      notSucceeded: options.jobs - ok.length,
      dueAt: due,
      createSeconds,
      createPerSecond: Math.round(options.jobs / createSeconds),
      lagMs: {
        p50: percentile(lags, 50),
        p95: percentile(lags, 95),
        p99: percentile(lags, 99),
        max: lags.at(-1) ?? Number.NaN,
        min: lags[0] ?? Number.NaN,
      },
      drainSeconds: (lastFinish - dueAt.getTime()) / 1000,
      lagsMs: lags,
      workers,
      target: sandbox ? "sandbox (DynamoDB Local + fauxqs)" : url,
      dataParent: sandbox ? dataParent : null,
      machine: `${cpu.length} × ${cpu[0]?.model ?? "cpu"}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
      measuredAt: new Date().toISOString(),
    };
    print(
      `spike N=${result.jobs}: succeeded ${result.succeeded}/${result.jobs}; start lag p50 ${result.lagMs.p50} ms, ` +
        `p95 ${result.lagMs.p95} ms, p99 ${result.lagMs.p99} ms, max ${result.lagMs.max} ms; drained in ${result.drainSeconds.toFixed(1)} s`,
    );
    if (options.resultsDir !== null) {
      const dir = resolve(options.resultsDir ?? join(import.meta.dirname, "results"));
      await mkdir(dir, { recursive: true });
      const file = join(
        dir,
        `spike-${result.jobs}-${result.measuredAt.replace(/[:.]/g, "-")}.json`,
      );
      await writeFile(file, `${JSON.stringify(result, null, 2)}\n`);
      print(`wrote ${file}`);
    }
    return result;
  } finally {
    if (sandbox) await sandbox.stop();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const values = benchArgs(import.meta.url, {
    jobs: { type: "string", default: "10000" },
    workers: { type: "string" },
    concurrency: { type: "string", default: "8" },
    "ms-per-create": { type: "string", default: String(DEFAULT_MS_PER_CREATE) },
    "data-parent": { type: "string" },
  });
  const result = await runSpike({
    jobs: Number(values.jobs),
    ...(values.workers ? { workers: Number(values.workers) } : {}),
    concurrency: Number(values.concurrency),
    msPerCreate: Number(values["ms-per-create"]),
    ...(values["data-parent"] ? { dataParent: values["data-parent"] } : {}),
  });
  process.exit(result.notSucceeded === 0 ? 0 : 1);
}
