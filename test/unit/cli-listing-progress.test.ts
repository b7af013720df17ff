import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { EXIT } from "../../client/cli/exit-codes.js";
import { withProgress } from "../../client/cli/progress.js";
import { type PagesRead, SchedulerClient } from "../../client/index.js";
import { endedRun } from "../support/api-runs.js";
import { runCaptured, spawnWitnessed } from "../support/cli-run.js";

/**
 * A listing that reads page after empty page (a filtered listing of a job with millions of runs,
 * or a server that answers empty pages with new cursors for ever) shows how far it has read on a
 * terminal's stderr, and nothing anywhere else. A local server answers the cursor `p<n>` with an
 * empty page and the cursor `p<n+1>`, until `emptyPages`, where it answers one run and no cursor;
 * past MOST pages it answers 500, so a listing that would never end fails rather than hangs. It
 * answers `answerAfterMs` after each request, and tells `arrived` of each request's number.
 */
let server: Server;
let baseUrl: string;
/** Empty pages before the page with the run; Infinity: never a run. */
let emptyPages = 0;
const MOST = 40;
let answerAfterMs = 0;
/** The requests the server has received this case. */
let requests = 0;
let arrived: (request: number) => void = () => {};

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
    requests += 1;
    arrived(requests);
    const page =
      n < emptyPages ? { items: [], nextCursor: `p${n + 1}` } : { items: [run], nextCursor: null };
    const answer = () =>
      response
        .writeHead(n >= MOST ? 500 : 200, { "Content-Type": "application/json" })
        .end(JSON.stringify(n >= MOST ? { error: { code: "internal", message: "no end" } } : page));
    if (answerAfterMs === 0) answer();
    else setTimeout(answer, answerAfterMs);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

beforeEach(() => {
  emptyPages = 0;
  answerAfterMs = 0;
  requests = 0;
  arrived = () => {};
});

/** The CLI with stderr a terminal (`tty`) or not, and a clock `tick` ms further each time it is read. */
const cli = (tty: boolean, args: readonly string[], tick = 0) => {
  let clock = 0;
  return runCaptured(
    ["--api", baseUrl, "--key", "k", ...args],
    {},
    {
      stderrIsTty: tty,
      now: () => {
        clock += tick;
        return clock;
      },
    },
  );
};

/**
 * What a terminal shows of `text`: a carriage return goes back to the line's start, and what is
 * written after it overwrites what was there; each line's trailing spaces are dropped.
 */
function screen(text: string): string {
  const lines: string[][] = [[]];
  let column = 0;
  for (const char of text) {
    const line = lines[lines.length - 1] ?? [];
    if (char === "\n") {
      lines.push([]);
      column = 0;
    } else if (char === "\r") column = 0;
    else line[column++] = char;
  }
  return lines.map((line) => line.join("").trimEnd()).join("\n");
}

/**
 * Each listing, and what its line says while it has read nothing: a listing filtered by status
 * reads empty pages honestly (a page's items the filter passed over), an unfiltered one only from
 * a server answering empty pages with cursors.
 */
const LISTINGS = [
  { args: ["runs", "list", JOB, "--status", "dead"], none: "no match yet" },
  { args: ["jobs", "list", "--status", "paused"], none: "no match yet" },
  { args: ["dead-letters", "list"], none: "nothing yet" },
].map((listing) => ({ command: `${listing.args[0]} ${listing.args[1]}`, ...listing }));

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

describe("a listing of many empty pages, stderr a terminal", () => {
  it("runs list --status dead shows the pages read, then erases the line and prints the run", async () => {
    emptyPages = 25;
    const { code, out, err } = await cli(true, ["runs", "list", JOB, "--status", "dead"]);
    expect(code).toBe(EXIT.ok);
    expect(err).toContain("\rreading: 10 pages, no match yet (Ctrl-C stops)");
    expect(err).toContain("\rreading: 25 pages, no match yet (Ctrl-C stops)");
    // The last page held the run.
    expect(err).toContain("\rreading: 26 pages, 1 run so far (Ctrl-C stops)");
    // Nothing of it stays on the screen, and stdout is what it is without a terminal.
    expect(screen(err)).toBe("");
    expect(out).toBe((await cli(false, ["runs", "list", JOB, "--status", "dead"])).out);
    expect(out.split("\n")[1]).toMatch(new RegExp(`^${run.runId}\\s+2\\s+dead\\s`));
  });

  it("-o json: the progress is on stderr, stdout is the JSON alone", async () => {
    emptyPages = 12;
    const { code, out, err } = await cli(true, ["-o", "json", "runs", "list", JOB]);
    expect(code).toBe(EXIT.ok);
    // Unfiltered: no run was passed over, the server answered empty pages.
    expect(err).toContain("reading: 12 pages, nothing yet (Ctrl-C stops)");
    expect(JSON.parse(out)).toEqual([run]);
  });

  it("a slow listing shows it after 2 s, before 10 pages", async () => {
    emptyPages = 3;
    // Each read of the clock 1 s on: the command's start, then a page each.
    const { code, err } = await cli(true, ["runs", "list", JOB], 1000);
    expect(code).toBe(EXIT.ok);
    expect(err).not.toContain("reading: 1 page,");
    expect(err).toContain("\rreading: 2 pages, nothing yet (Ctrl-C stops)");
    expect(screen(err)).toBe("");
  });

  it("a short listing shows nothing", async () => {
    emptyPages = 3;
    const { code, err } = await cli(true, ["runs", "list", JOB]);
    expect(code).toBe(EXIT.ok);
    expect(err).toBe("");
  });

  it("a short listing shows nothing when the wall clock steps an hour forward while it reads", async () => {
    emptyPages = 3;
    // No clock given; the machine's wall clock steps (NTP, a laptop waking) as the first page is
    // asked for.
    const machine = Date.now.bind(Date);
    vi.spyOn(Date, "now").mockImplementation(() => machine() + (requests > 0 ? 3_600_000 : 0));
    try {
      const { code, err } = await runCaptured(
        ["--api", baseUrl, "--key", "k", "runs", "list", JOB],
        {},
        {
          stderrIsTty: true,
        },
      );
      expect(code).toBe(EXIT.ok);
      expect(err).toBe("");
    } finally {
      vi.restoreAllMocks();
    }
  });

  it.each(LISTINGS)(
    "$command: pages that never end show progress, erased before the error",
    async ({ args, none }) => {
      emptyPages = Number.POSITIVE_INFINITY;
      const { code, out, err } = await cli(true, args);
      expect(code).toBe(EXIT.failed);
      expect(out).toBe("");
      expect(err).toContain(`\rreading: ${MOST} pages, ${none} (Ctrl-C stops)`);
      expect(screen(err)).toMatch(/^error: internal \(500\): no end\n$/);
    },
  );

  it("runs watch shows a poll's pages, erased before the runs print", async () => {
    emptyPages = 15;
    const { code, out, err } = await cli(true, [
      ...["runs", "watch", JOB, "--since", "2029-12-31T00:00:00Z", "--count", "1"],
    ]);
    expect(code).toBe(EXIT.ok);
    expect(err).toContain("\rreading: 15 pages, nothing yet (Ctrl-C stops)");
    expect(screen(err)).toBe("");
    expect(out.split("\n")[1]).toMatch(new RegExp(`^${run.runId}\\s+2\\s+dead\\s`));
  });
});

describe("stderr not a terminal", () => {
  it.each(LISTINGS)("$command: nothing but the error, however many pages", async ({ args }) => {
    emptyPages = Number.POSITIVE_INFINITY;
    const { code, err } = await cli(false, args, 1000);
    expect(code).toBe(EXIT.failed);
    expect(err).toBe("error: internal (500): no end\n");
  });

  it("runs list prints the run alone", async () => {
    emptyPages = 25;
    const { code, out, err } = await cli(false, ["runs", "list", JOB, "--status", "dead"], 1000);
    expect(code).toBe(EXIT.ok);
    expect(err).toBe("");
    expect(out).not.toContain("reading");
  });
});

describe("Ctrl-C", () => {
  // Each page answered 300 ms after its request: Ctrl-C comes while the third is unanswered.
  const SLOW_PAGE_MS = 300;

  it.each(LISTINGS)(
    "$command: the bin ends at once, exit 130, nothing printed, no page asked for after",
    async ({ args }) => {
      emptyPages = Number.POSITIVE_INFINITY;
      answerAfterMs = SLOW_PAGE_MS;
      const child = spawnWitnessed(["--api", baseUrl, "--key", "k", ...args], {
        cwd: process.cwd(),
        env: process.env,
      });
      arrived = (request) => {
        if (request === 3) child.process.kill("SIGINT");
      };
      const { code, out, err, end } = await child.outcome;
      expect(code).toBe(EXIT.interrupted);
      // The command's own end: the process ran out of work, not ended by the bin's process.exit
      // 2 s after Ctrl-C (a read still running, a socket or timer keeping it alive), and no timer
      // keeping it alive ran after the command returned.
      expect(end).toEqual({ drained: true, timersAfterCommand: 0 });
      expect(requests).toBe(3);
      expect(out).toBe("");
      expect(err).toBe("");
    },
    20_000,
  );

  it("a listing showing its progress erases the line and exits 130", async () => {
    emptyPages = Number.POSITIVE_INFINITY;
    answerAfterMs = SLOW_PAGE_MS;
    const interrupt = new AbortController();
    arrived = (request) => {
      if (request === 12) interrupt.abort();
    };
    const { code, out, err } = await runCaptured(
      ["--api", baseUrl, "--key", "k", "runs", "list", JOB, "--status", "dead"],
      {},
      { stderrIsTty: true, signal: interrupt.signal },
    );
    expect(code).toBe(EXIT.interrupted);
    expect(requests).toBe(12);
    expect(err).toContain("\rreading: 11 pages, no match yet (Ctrl-C stops)");
    expect(screen(err)).toBe("");
    expect(out).toBe("");
  });

  it("the line is erased when the bin ends the command still reading (exiting)", async () => {
    let err = "";
    const exiting = new AbortController();
    const io = {
      stdout: () => {},
      stderr: (text: string) => {
        err += text;
      },
      env: {},
      stderrIsTty: true,
      exiting: exiting.signal,
    };
    let onScreen: string | undefined;
    await withProgress(io, { noun: "run", filtered: true }, async ({ onPage }) => {
      for (let pages = 1; pages <= 12; pages++) onPage?.({ pages, items: 0 });
      expect(screen(err)).toBe("reading: 12 pages, no match yet (Ctrl-C stops)");
      exiting.abort();
      onScreen = screen(err);
    });
    expect(onScreen).toBe("");
  });
});
