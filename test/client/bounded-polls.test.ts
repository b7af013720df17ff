import type { AddressInfo } from "node:net";
import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { type ServerType, serve } from "@hono/node-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXIT } from "../../client/cli/exit-codes.js";
import { runCli } from "../../client/cli/main.js";
import { type JobHandle, SchedulerClient } from "../../client/index.js";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { runId, runSortKey } from "../../shared/keys.js";
import { runKeyOf } from "../../shared/storage/run-reads.js";
import { JOB_TYPES } from "../api/support.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { putItems } from "../support/seed.js";

/**
 * `runs watch` and `waitForRun` without a runId on a job with a long run history: each poll after
 * the first reads the runs that can have changed (docs/cli.md "Waiting"), not the whole history;
 * the first reads the newest page and the occurrences since its look-back.
 * The API app on DynamoDB Local behind a local HTTP server that counts the listing's requests; the
 * history is 300 finished runs written straight into the table, days old.
 */
const KEY = "bounded-polls-key";
const TENANT = "tenant-bounded-polls";
const HISTORY = 300;

let f: EngineFixture;
let server: ServerType;
let baseUrl: string;
/** Each listing request of the job's runs: whether it followed a cursor, and its `from`. */
let listings: { cursor: boolean; from: string | null }[] = [];
/** Run before the listing request numbered by its key (1 = the first read) is answered. */
let beforeRead = new Map<number, () => Promise<void>>();

beforeAll(async () => {
  f = await createEngineFixture();
  const app = createApiApp({
    engine: f.engine,
    jobTypes: JOB_TYPES,
    authenticate: bearerAuthenticator(new Map([[KEY, TENANT]])),
    adminTenants: [],
  });
  const counted = async (request: Request) => {
    const url = new URL(request.url);
    if (request.method === "GET" && /\/runs$/.test(url.pathname)) {
      const cursor = url.searchParams.has("cursor");
      if (!cursor) await beforeRead.get(listings.filter((l) => !l.cursor).length + 1)?.();
      listings.push({ cursor, from: url.searchParams.get("from") });
    }
    return app.fetch(request);
  };
  await new Promise<void>((resolve) => {
    server = serve({ fetch: counted, port: 0, hostname: "127.0.0.1" }, (info: AddressInfo) => {
      baseUrl = `http://127.0.0.1:${info.port}`;
      resolve();
    });
  });
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await f.destroy();
});

const client = () => new SchedulerClient({ baseUrl, auth: { kind: "bearer", key: KEY } });

/** A history run to write: its place among the HISTORY (0 the newest), attempt and status. */
interface HistoryRun {
  readonly index: number;
  readonly attempt: number;
  readonly status: "SUCCEEDED" | "FAILED" | "QUEUED";
}

/**
 * A recurring job with HISTORY succeeded runs, an hour apart, ending a day ago; `runs` replace or
 * add runs of those occurrences.
 */
async function jobWithHistory(runs: readonly HistoryRun[] = []): Promise<JobHandle> {
  const handle = await client().jobs.create({
    type: "noop",
    schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
  });
  const model = await handle.trigger();
  const { Item: item } = await f.engine.doc.send(
    new GetCommand({
      TableName: f.engine.tables.runs,
      Key: runKeyOf({ jobId: handle.id, scheduledFor: model.scheduledFor, attempt: 1 }),
    }),
  );
  if (item === undefined) throw new Error("no run item");
  await client().runs.cancel(handle.id, model.runId);
  const { inflightPk: _pk, inflightSk: _sk, ...finished } = item;
  const dayAgo = Date.now() - 86_400_000;
  const succeeded = Array.from(
    { length: HISTORY },
    (_, index): HistoryRun => ({
      index,
      attempt: 1,
      status: "SUCCEEDED",
    }),
  );
  const items = [...succeeded, ...runs].map(({ index, attempt, status }) => {
    const scheduledFor = new Date(dayAgo - index * 3_600_000).toISOString();
    const ended = status !== "QUEUED";
    return {
      ...finished,
      sk: runSortKey(scheduledFor, attempt),
      runId: runId(handle.id, scheduledFor, attempt),
      scheduledFor,
      attempt,
      dueAt: scheduledFor,
      plannedFor: scheduledFor,
      status,
      startedAt: ended ? scheduledFor : null,
      finishedAt: ended ? scheduledFor : null,
    };
  });
  // The runs given replace the succeeded ones of their keys (a batch takes a key once).
  const byKey = new Map(items.map((run) => [run.sk, run]));
  const unique = [...byKey.values()];
  await putItems(f, f.engine.tables.runs, unique);
  return handle;
}

/** Requests of each read of the runs: the first request of a read and the pages it followed. */
const requestsPerRead = () => {
  const reads: number[] = [];
  for (const listing of listings) {
    if (listing.cursor) reads[reads.length - 1] = (reads.at(-1) ?? 0) + 1;
    else reads.push(1);
  }
  return reads;
};

/** A run that ends (cancelled) on the job, made by a client whose requests are not counted. */
const endedRun = (jobId: string) => async () => {
  const side = client();
  const run = await side.jobs.handle(jobId).trigger();
  await side.runs.cancel(jobId, run.runId);
};

describe("polls of a job with a long run history", () => {
  it("waitForRun without a runId: the first poll and each after it read one page", async () => {
    const handle = await jobWithHistory();
    listings = [];
    // The run the wait ends with ends just before its fourth read: three polls see nothing new.
    beforeRead = new Map([[4, endedRun(handle.id)]]);
    const run = await handle.waitForRun({ pollMs: 1, timeoutMs: 60_000 });
    expect(run).toMatchObject({ jobId: handle.id, status: "cancelled" });
    expect(Date.parse(run.scheduledFor)).toBeGreaterThan(Date.now() - 86_400_000);
    // The first read too is one page: the history is days older than the wait's look-back; the
    // polls after it read only what can have changed, from the newest occurrence on.
    expect(requestsPerRead()).toEqual([1, 1, 1, 1]);
    for (const listing of listings.slice(1))
      expect(Date.parse(listing.from ?? "")).toBeGreaterThan(Date.now() - 86_400_000);
  });

  it("waitForRun without a runId: a run that ended before the wait, next to the first page, is not the next one", async () => {
    // The first page (100 runs: the job's cancelled trigger, then 99 of the history) ends with a
    // queued retry (attempt 2) of an old occurrence: the polls after the first read from that
    // occurrence, where its attempt 1, failed long ago, is the first run of the second page, which
    // the first poll did not read.
    const handle = await jobWithHistory([
      { index: 98, attempt: 1, status: "FAILED" },
      { index: 98, attempt: 2, status: "QUEUED" },
    ]);
    listings = [];
    beforeRead = new Map([[3, endedRun(handle.id)]]);
    const run = await handle.waitForRun({ pollMs: 1, timeoutMs: 60_000 });
    expect(run).toMatchObject({ jobId: handle.id, status: "cancelled" });
    expect(requestsPerRead()[0]).toBe(1);
  });

  it("runs watch: the first poll and each after it read one page", async () => {
    const handle = await jobWithHistory();
    listings = [];
    beforeRead = new Map([[4, endedRun(handle.id)]]);
    let out = "";
    const code = await runCli(
      [
        ...["--api", baseUrl, "--key", KEY, "-o", "json"],
        ...["runs", "watch", handle.id, "--interval", "1", "--count", "1"],
      ],
      {
        stdout: (text) => {
          out += text;
        },
        stderr: () => undefined,
        env: {},
      },
    );
    expect(code).toBe(EXIT.ok);
    expect(JSON.parse(out)).toMatchObject({ jobId: handle.id, status: "cancelled" });
    const reads = requestsPerRead();
    expect(reads).toHaveLength(4);
    // The first read too is one page: the history is days older than the watch's look-back.
    expect(reads).toEqual([1, 1, 1, 1]);
  });
});
