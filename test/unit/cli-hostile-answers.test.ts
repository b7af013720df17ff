import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { EXIT } from "../../client/cli/exit-codes.js";
import { SchedulerApiError, SchedulerClient } from "../../client/index.js";
import { LIMITS, RUN_STATUSES } from "../../shared/api/schemas/common.js";
import { boundCursor } from "../../shared/jobs/cursor.js";
import { runId, runSortKey } from "../../shared/keys.js";
import { deadLetterPk, jobKey, tenantPk } from "../../shared/storage/items.js";
import { runKey } from "../../shared/storage/runs.js";
import { runCaptured } from "../support/cli-run.js";
import { rejection } from "../support/rejection.js";

/**
 * The CLI against answers the API does not give: whatever sits at the URL it was pointed at (a
 * proxy's error page, a captive portal, a wrong host), or API errors that quote the caller's input.
 * A local HTTP server answers each request with the raw status, headers and body a test sets.
 */
interface RawAnswer {
  readonly status: number;
  readonly headers?: Record<string, string>;
  readonly body: string;
}

let server: Server;
let baseUrl: string;
let answer: RawAnswer = { status: 200, body: "{}" };
/** Requests the server was sent. */
let received = 0;

beforeAll(async () => {
  server = createServer((request, response) => {
    received += 1;
    request.resume();
    request.on("end", () => {
      response.writeHead(answer.status, answer.headers).end(answer.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

beforeEach(() => {
  answer = { status: 200, body: "{}" };
});

const cli = (...args: string[]) => runCaptured(["--api", baseUrl, "--key", "k", ...args]);

/**
 * What a terminal acts on, but the line breaks that end printed lines: C0 and C1 controls (ESC
 * starts a sequence; U+009B is an 8-bit CSI) and DEL.
 */
const controlsIn = (text: string) =>
  [...text].filter((char) => {
    const code = char.charCodeAt(0);
    return char !== "\n" && (code < 0x20 || (code >= 0x7f && code <= 0x9f));
  });

/** Clears the screen, sets the window title and prints an OSC 8 link, as a hostile page might. */
const TERMINAL_ATTACK =
  "\u001b[2J\u001b[H\u001b]0;pwned\u0007\u001b]8;;https://evil.example/\u001b\\click\u001b]8;;\u001b\\\u009b31m";

describe("error output carries nothing a terminal acts on", () => {
  it("a non-JSON 5xx page is quoted with its control characters escaped", async () => {
    answer = {
      status: 500,
      headers: { "Content-Type": "text/html" },
      body: `<h1>Internal error</h1>${TERMINAL_ATTACK}`,
    };
    const { code, out, err } = await cli("jobs", "list");
    expect(code).toBe(EXIT.failed);
    expect(out).toBe("");
    expect(err).toContain(
      "error: unexpected_response (500): 500 Internal Server Error: <h1>Internal error</h1>",
    );
    expect(err).toContain(String.raw`\u001b[2J\u001b[H\u001b]0;pwned\u0007`);
    expect(controlsIn(err)).toEqual([]);
  });

  it("an API error whose message and issues quote the input is printed escaped, one line an issue", async () => {
    const field = `target.headers.x${TERMINAL_ATTACK}`;
    answer = {
      status: 400,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        error: {
          code: "validation_failed",
          message: `unknown field "${TERMINAL_ATTACK}"`,
          field,
          issues: [
            { field: "name", message: `unknown field "${TERMINAL_ATTACK}"` },
            { field, message: "line one\nline two" },
          ],
        },
      }),
    };
    const { code, err } = await cli("jobs", "list");
    expect(code).toBe(EXIT.invalid);
    expect(controlsIn(err)).toEqual([]);
    expect(err.trimEnd().split("\n")).toEqual([
      String.raw`error: validation_failed (400): unknown field "\u001b[2J\u001b[H\u001b]0;pwned\u0007\u001b]8;;https://evil.example/\u001b\click\u001b]8;;\u001b\\u009b31m"`,
      String.raw`  target.headers.x\u001b[2J\u001b[H\u001b]0;pwned\u0007\u001b]8;;https://evil.example/\u001b\click\u001b]8;;\u001b\\u009b31m: line one\nline two`,
    ]);
  });

  it("a 200 that is not JSON: the parser's message, which quotes the body, is escaped", async () => {
    answer = {
      status: 200,
      headers: { "Content-Type": "application/json" },
      body: `<html>${TERMINAL_ATTACK}`,
    };
    const { code, err } = await cli("jobs", "list");
    expect(code).toBe(EXIT.failed);
    expect(err).toMatch(/^error: /);
    expect(controlsIn(err)).toEqual([]);
  });
});

/** A job as the API answers it, named by the test. */
const jobNamed = (name: string) => ({
  id: "01M8VCNM4ZMPF7BCFTZR1WJYJ7",
  name,
  type: "noop",
  status: "active",
  schedule: { runAt: "2030-01-01T00:00:00.000Z" },
  payload: { note: name },
  priority: "normal",
  timeoutSeconds: 300,
  window: null,
  nextRunAt: "2030-01-01T00:00:00.000Z",
  version: 1,
  policies: {
    retry: { maxAttempts: 3, initialDelaySeconds: 30, maxDelaySeconds: 3600 },
    misfirePolicy: "fire_once",
    overlapPolicy: "skip",
    maxConcurrent: 1,
    inFlight: "skip",
  },
  createdAt: "2029-12-31T00:00:00.000Z",
  updatedAt: "2029-12-31T00:00:00.000Z",
  lastRun: null,
  endAt: null,
  maxRuns: null,
  occurrencesQueued: 1,
  dependents: [],
});

/**
 * Characters JSON.stringify leaves as they are that a terminal still acts on: an 8-bit CSI
 * (U+009B, a C1 control xterm obeys in UTF-8), the right-to-left override and the other
 * bidirectional embeddings, overrides and isolates (they reorder the rest of the line in a terminal
 * that lays out bidirectional text), the directional marks (they turn the neutral characters
 * beside them, a column's spaces), and the Unicode line and paragraph separators.
 */
const REORDERING =
  "\u009b2J\u202eevil\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069 \u200e\u200f\u061c \u2028\u2029 plain";
const reorderingIn = (text: string) =>
  [...text].filter((char) =>
    /[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\u2028\u2029]/.test(char),
  );

/** `jobs get` (after `flags`) of a job named `name`, as the server answers it, and that job. */
async function getJobNamed(name: string, ...flags: string[]) {
  const job = jobNamed(name);
  answer = {
    status: 200,
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(job),
  };
  return { job, ...(await cli(...flags, "jobs", "get", job.id)) };
}

describe("names a terminal would reorder or obey", () => {
  it("-o json escapes them, and the JSON still reads back as the API answered", async () => {
    const { job, code, out } = await getJobNamed(REORDERING, "-o", "json");
    expect(code).toBe(EXIT.ok);
    expect(JSON.parse(out)).toEqual(job);
    expect(controlsIn(out)).toEqual([]);
    expect(reorderingIn(out)).toEqual([]);
    expect(out).toContain(String.raw`"name": "\u009b2J\u202eevil`);
  });

  it("-o json escapes the format characters a terminal draws as nothing, and reads back the same", async () => {
    // A zero-width space, a right-to-left override, a word joiner, a byte order mark and a tag
    // character (beyond U+FFFF, its surrogate pair's escapes: JSON has no \u{…}).
    const name = "pay\u200broll\u202eevil\u2060\ufeff\u{e0041}end";
    const { job, code, out } = await getJobNamed(name, "-o", "json");
    expect(code).toBe(EXIT.ok);
    expect(out).toContain(String.raw`"name": "pay\u200broll\u202eevil\u2060\ufeff\udb40\udc41end"`);
    expect([...out].filter((char) => /\p{Cf}/u.test(char))).toEqual([]);
    expect(JSON.parse(out)).toEqual(job);
    expect((JSON.parse(out) as { name: string }).name).toBe(name);
  });

  it("tables print them as escapes", async () => {
    const got = await getJobNamed(REORDERING);
    expect(got.code).toBe(EXIT.ok);
    expect(controlsIn(got.out)).toEqual([]);
    expect(reorderingIn(got.out)).toEqual([]);
    expect(got.out).toContain(String.raw`name        \u009b2J\u202eevil\u202a`);
  });
});

describe("answers API Gateway gives itself: the API's codes for their statuses, and their exit codes", () => {
  it("its throttle's 429 {message} exits 8 as a rate_limited does, after the retries", async () => {
    // The stage's route throttle (infra/constructs/api.ts) answers before the function does.
    answer = {
      status: 429,
      headers: { "Content-Type": "application/json", "Retry-After": "0" },
      body: JSON.stringify({ message: "Too Many Requests" }),
    };
    const { code, err } = await cli("jobs", "list");
    expect(err).toContain("error: rate_limited (429): Too Many Requests");
    expect(code).toBe(EXIT.busy);
  });

  it("its JWT authorizer's 401 {message} (no token, an expired one) exits 7 as an unauthorized does", async () => {
    // A stack with the JWT option: API Gateway's authorizer refuses the token before the function runs.
    answer = {
      status: 401,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ message: "Unauthorized" }),
    };
    const { code, err } = await cli("jobs", "list");
    expect(err).toContain("error: unauthorized (401): Unauthorized");
    expect(code).toBe(EXIT.unauthorized);
  });

  it("its 413 {message} for a body over the function's payload limit exits 3 as a payload_too_large does", async () => {
    answer = {
      status: 413,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ message: "Request Entity Too Large" }),
    };
    const { code } = await cli(
      "jobs",
      "create",
      "--type",
      "noop",
      "--run-at",
      "2030-01-01T00:00:00Z",
    );
    expect(code).toBe(EXIT.invalid);
  });

  it("a 503 {message} exits 8 as a busy does", async () => {
    answer = {
      status: 503,
      headers: { "Content-Type": "application/json", "Retry-After": "0" },
      body: JSON.stringify({ message: "Service Unavailable" }),
    };
    expect((await cli("jobs", "list")).code).toBe(EXIT.busy);
  });

  it("a 502 or 504 exits 8 for a read, a pause or a preview, which can be run again; 1 for a trigger, which may have been applied", async () => {
    for (const status of [502, 504]) {
      // API Gateway sends no Retry-After; this one spares the test the read's doubling waits.
      answer = {
        status,
        headers: { "Retry-After": "0" },
        body: JSON.stringify({ message: "Internal Server Error" }),
      };
      expect((await cli("jobs", "list")).code, `${status}`).toBe(EXIT.busy);
      // A pause's repeat answers the job as it stands (docs/api.md "Retrying requests").
      expect((await cli("jobs", "pause", "01JOB")).code, `${status}`).toBe(EXIT.busy);
      expect((await cli("jobs", "trigger", "01JOB")).code, `${status}`).toBe(EXIT.failed);
      // A schedule's preview is a POST that writes nothing: run again as a read is.
      const preview = await cli("schedules", "preview", "--cron", "0 9 * * *", "--timezone", "UTC");
      expect(preview.code, `${status}`).toBe(EXIT.busy);
    }
  });

  it("--help names the preview among the requests retried and exiting 8, as docs/cli.md does", async () => {
    const { code, out } = await cli("--help");
    expect(code).toBe(EXIT.ok);
    const help = out.replace(/\s+/g, " ");
    expect(help).toMatch(/8 busy or unavailable, try again \([^)]*\bpreview\b[^)]*\)/);
    expect(help).toMatch(/A 429 or 503 to a request safe to repeat \([^)]*\bpreview\b[^)]*\)/);
  });
});

describe("the lines above a table escape what the answer holds, as the table does", () => {
  const answerWith = (body: unknown) => {
    answer = {
      status: 200,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    };
  };

  it("schedules preview: the schedule and zone line", async () => {
    answerWith({
      schedule: { cron: `0 9 * * *${TERMINAL_ATTACK}`, timezone: `UTC${TERMINAL_ATTACK}` },
      timezone: `UTC${TERMINAL_ATTACK}`,
      occurrences: [{ utc: "2030-01-01T09:00:00.000Z", local: "2030-01-01T09:00:00.000Z" }],
    });
    const { code, out } = await cli("schedules", "preview", "--job", "01M8VCNM4ZMPF7BCFTZR1WJYJ7");
    expect(code).toBe(EXIT.ok);
    expect(out).toContain(String.raw`cron "0 9 * * *\u001b[2J`);
    expect(controlsIn(out)).toEqual([]);
  });

  it("quotas get: the tenant line", async () => {
    answerWith({
      tenantId: `tenant${TERMINAL_ATTACK}`,
      runningRuns: 0,
      quotas: {
        activeJobs: 10,
        runsPerMinute: null,
        concurrentRuns: null,
        requestsPerSecond: null,
        maxPriority: "high",
      },
      override: {},
    });
    const { code, out } = await cli("quotas", "get");
    expect(code).toBe(EXIT.ok);
    expect(out).toContain(String.raw`tenant tenant\u001b[2J`);
    expect(controlsIn(out)).toEqual([]);
  });

  it("webhook-secret get and rotate: the secret, the one line they print", async () => {
    answerWith({ secret: `whsec_${TERMINAL_ATTACK}` });
    for (const command of ["get", "rotate"]) {
      const { code, out } = await cli("webhook-secret", command);
      expect(code, command).toBe(EXIT.ok);
      expect(out, command).toContain(String.raw`whsec_\u001b[2J\u001b[H\u001b]0;pwned\u0007`);
      expect(controlsIn(out), command).toEqual([]);
    }
  });
});

describe("a listing whose answer would never end it", () => {
  it("a page answering the cursor it was asked for is an error, not a loop", async () => {
    let requests = 0;
    const looping = createServer((request, response) => {
      requests += 1;
      request.resume();
      // Past 20 requests the listing was looping: a 500 ends it, so a failing test ends too.
      response
        .writeHead(requests > 20 ? 500 : 200, { "Content-Type": "application/json" })
        .end(JSON.stringify({ items: [], nextCursor: "the-same-cursor" }));
    });
    await new Promise<void>((resolve) => looping.listen(0, "127.0.0.1", resolve));
    try {
      const { code, err } = await runCaptured([
        "--api",
        `http://127.0.0.1:${(looping.address() as AddressInfo).port}`,
        "--key",
        "k",
        "jobs",
        "list",
      ]);
      expect(requests).toBe(2);
      expect(code).toBe(EXIT.failed);
      expect(err).toContain(
        "the listing answered the cursor it was sent (the-same-cursor) as its next",
      );
    } finally {
      await new Promise<void>((resolve) => looping.close(() => resolve()));
    }
  });
  it("pages whose cursors go round (a, b, a, …) are an error once a cursor comes back, not a loop", async () => {
    const asked: string[] = [];
    const cycling = createServer((request, response) => {
      const cursor = new URL(request.url ?? "/", "http://x").searchParams.get("cursor") ?? "";
      asked.push(cursor);
      request.resume();
      // Past 20 requests the listing was looping: a 500 ends it, so a failing test ends too.
      response
        .writeHead(asked.length > 20 ? 500 : 200, { "Content-Type": "application/json" })
        .end(JSON.stringify({ items: [], nextCursor: cursor === "page-a" ? "page-b" : "page-a" }));
    });
    await new Promise<void>((resolve) => cycling.listen(0, "127.0.0.1", resolve));
    try {
      const { code, err } = await runCaptured([
        "--api",
        `http://127.0.0.1:${(cycling.address() as AddressInfo).port}`,
        "--key",
        "k",
        "runs",
        "list",
        "J1",
      ]);
      expect(asked).toEqual(["", "page-a", "page-b"]);
      expect(code).toBe(EXIT.failed);
      expect(err).toContain(
        "the listing answered a cursor it was sent before (page-a) as its next",
      );
    } finally {
      await new Promise<void>((resolve) => cycling.close(() => resolve()));
    }
  });
});

describe("a listing whose next cursor could not be sent back", () => {
  /** A server answering each page with `page(n)` (n from 1), and past 5 requests a 500 that ends a failing test. */
  async function listing(page: (n: number) => object) {
    const asked: string[] = [];
    // Its request line may be as long as a 4 MiB cursor makes it (Node's own limit is 16 KiB).
    const lister = createServer({ maxHeaderSize: 16 * 1024 * 1024 }, (request, response) => {
      asked.push(new URL(request.url ?? "/", "http://x").searchParams.get("cursor") ?? "");
      request.resume();
      response
        .writeHead(asked.length > 5 ? 500 : 200, { "Content-Type": "application/json" })
        .end(JSON.stringify(page(asked.length)));
    });
    await new Promise<void>((resolve) => lister.listen(0, "127.0.0.1", resolve));
    return {
      asked,
      url: `http://127.0.0.1:${(lister.address() as AddressInfo).port}`,
      close: () => new Promise<void>((resolve) => lister.close(() => resolve())),
    };
  }

  it("jobs list: pages of 4 MiB cursors, each new, are refused at the first, not held one after another", async () => {
    // Each cursor a new one: the check for a cursor asked before never fires, and every cursor
    // followed was kept (272 MB in 10 s).
    const { asked, url, close } = await listing((n) => ({
      items: [],
      nextCursor: `${n}`.padEnd(4 * 1024 * 1024, "x"),
    }));
    try {
      const { code, out, err } = await runCaptured(["--api", url, "--key", "k", "jobs", "list"]);
      expect(asked.map((cursor) => cursor.length)).toEqual([0]);
      expect(code).toBe(EXIT.failed);
      expect(out).toBe("");
      expect(err).toBe(
        `error: unexpected_response (200): GET /jobs: the 200 answer is not a page of jobs: nextCursor is ${4 * 1024 * 1024} characters, over the ${LIMITS.cursorChars} a cursor sent back may be\n`,
      );
    } finally {
      await close();
    }
  });

  it("the client's listing follows a cursor as long as the API takes back, and refuses one longer", async () => {
    const { asked, url, close } = await listing((n) => ({
      items: [{ runId: `R${n}`, jobId: "J1", status: "succeeded" }],
      nextCursor: "c".repeat(LIMITS.cursorChars - 1 + n),
    }));
    try {
      const client = new SchedulerClient({ baseUrl: url, auth: { kind: "bearer", key: "k" } });
      const seen: string[] = [];
      const listed = (async () => {
        for await (const run of client.runs.list("J1")) seen.push(run.runId);
      })();
      const error = await rejection(listed, SchedulerApiError);
      expect([error.code, error.message]).toEqual([
        "unexpected_response",
        `GET /jobs/{id}/runs: the 200 answer is not a page of runs: nextCursor is ${LIMITS.cursorChars + 1} characters, over the ${LIMITS.cursorChars} a cursor sent back may be`,
      ]);
      expect(asked.map((cursor) => cursor.length)).toEqual([0, LIMITS.cursorChars]);
      // The page that carried the cursor is refused whole: its run is not listed either.
      expect(seen).toEqual(["R1"]);
    } finally {
      await close();
    }
  });

  it("holds every cursor the API makes: its longest, at the longest ids, tenant and filters, is well within", () => {
    // base64url of ASCII JSON: characters and bytes are one, so the API's and the client's counts agree.
    const tenant = "|".repeat(256);
    const job = "-".repeat(64);
    const when = "9999-12-31T23:59:59.999Z";
    const statuses = RUN_STATUSES.map((status) => status.toUpperCase()).join(",");
    const farthest = [new Date(-8.64e15), new Date(8.64e15)].map((at) => at.toISOString());
    const cursors = [
      boundCursor({ tenantPk: tenantPk(tenant), tenantSk: job, ...jobKey(job) }, "status=PAUSED"),
      boundCursor(
        { ...jobKey(job), sk: runSortKey(when, 9999) },
        `status=${statuses}&from=${farthest[0]}&to=${farthest[1]}`,
      ),
      boundCursor(
        {
          deadPk: deadLetterPk(tenant),
          deadSk: `${when}#${runId(job, when, 9999)}`,
          ...runKey(job, when, 9999),
        },
        undefined,
      ),
    ];
    const longest = Math.max(...cursors.map((cursor) => cursor?.length ?? 0));
    expect(longest).toBeLessThanOrEqual(LIMITS.cursorChars);
  });
});

describe("with -o json every error on stderr is one JSON line", () => {
  it("usage errors too: a missing argument, a bad option value, an unreadable --file; exit 2", async () => {
    for (const args of [
      ["jobs", "get"],
      ["runs", "list", "X", "--status", "bogus"],
      ["jobs", "create", "--file", "/nonexistent/job.json"],
      ["jobs", "frobnicate"],
    ]) {
      const { code, out, err } = await cli("-o", "json", ...args);
      expect(code, args.join(" ")).toBe(EXIT.usage);
      expect(out).toBe("");
      expect(err.endsWith("\n") && err.trimEnd().split("\n").length === 1, err).toBe(true);
      const parsed = JSON.parse(err) as { error: { message: string } };
      expect(parsed.error.message, args.join(" ")).not.toMatch(/^error:/);
      expect(parsed.error.message.length).toBeGreaterThan(0);
    }
    // Without -o json they stay as commander prints them, with the command's help.
    const plain = await cli("jobs", "get");
    expect(plain.err).toMatch(
      /^error: missing required argument 'id'\n\nUsage: scheduler jobs get/,
    );
  });

  it("an id that is no id (empty, `.`, `..`) is a usage error too: exit 2, naming it, nothing sent", async () => {
    const before = received;
    for (const args of [
      ["jobs", "get", ".."],
      ["jobs", "delete", ""],
      ["runs", "cancel", "J", ".."],
      ["runs", "get", ".", "R"],
      ["dead-letters", "replay", ".."],
      ["quotas", "get", "."],
    ]) {
      const { code, out, err } = await cli("-o", "json", ...args);
      expect(code, args.join(" ")).toBe(EXIT.usage);
      expect(out).toBe("");
      const parsed = JSON.parse(err) as { error: { message: string } };
      expect(parsed.error.message, args.join(" ")).toMatch(/is no id/);
    }
    const plain = await cli("jobs", "trigger", "..");
    expect(plain.code).toBe(EXIT.usage);
    expect(plain.err).toBe('error: id: ".." is no id (a URL reads it as a path, not a segment)\n');
    expect(received - before).toBe(0);
  });
});
