import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type PagesRead, SchedulerClient } from "../../client/index.js";
import { endedRun } from "../support/api-runs.js";

/**
 * A listing that reads page after empty page (a filtered listing of a job with millions of runs,
 * or a server that answers empty pages with new cursors for ever) shows how far it has read on a
 * terminal's stderr, and nothing anywhere else. A local server answers the cursor `p<n>` with an
 * empty page and the cursor `p<n+1>`, until `emptyPages`, where it answers one run and no cursor;
 * past MOST pages it answers 500, so a listing that would never end fails rather than hangs.
 */
let server: Server;
let baseUrl: string;
/** Empty pages before the page with the run; Infinity: never a run. */
let emptyPages = 0;
const MOST = 40;

const JOB = "01M8VCNM4ZMPF7BCFTZR1WJYJ7";
const run = endedRun(
  JOB,
  2,
  "dead",
  "HTTP 500: internal error",
  "gave up after 2 attempts: HTTP 500: internal error",
);

beforeAll(async () => {
  server = createServer((request, response) => {
    const cursor = new URL(request.url ?? "/", "http://x").searchParams.get("cursor") ?? "p0";
    const n = Number(cursor.slice(1));
    request.resume();
    const page =
      n < emptyPages ? { items: [], nextCursor: `p${n + 1}` } : { items: [run], nextCursor: null };
    response
      .writeHead(n >= MOST ? 500 : 200, { "Content-Type": "application/json" })
      .end(JSON.stringify(n >= MOST ? { error: { code: "internal", message: "no end" } } : page));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

beforeEach(() => {
  emptyPages = 0;
});

describe("the client's listings", () => {
  it("tell onPage of each page read, before its items", async () => {
    emptyPages = 3;
    const client = new SchedulerClient({ baseUrl, auth: { kind: "bearer", key: "k" } });
    const told: (PagesRead | string)[] = [];
    for await (const listed of client.runs.list(JOB, { onPage: (read) => told.push(read) }))
      told.push(listed.runId);
    expect(told).toEqual([
      { pages: 1, items: 0 },
      { pages: 2, items: 0 },
      { pages: 3, items: 0 },
      { pages: 4, items: 1 },
      run.runId,
    ]);
  });
});
