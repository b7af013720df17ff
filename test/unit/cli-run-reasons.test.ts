import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXIT } from "../../client/cli/exit-codes.js";
import type { Run } from "../../client/index.js";
import { endedRun } from "../support/api-runs.js";
import { runCaptured } from "../support/cli-run.js";

/**
 * What `runs list`, `runs watch` and `dead-letters list` print of why a run ended as it did: a
 * dead run's `error` is its last attempt's, its `reason` says why it is dead ("gave up after 2
 * attempts: …", "non-retryable error: …"), quoting that error. A local server answers every
 * request with one page of the runs a test sets.
 */
let server: Server;
let baseUrl: string;
let page: Run[] = [];

beforeAll(async () => {
  server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      response
        .writeHead(200, { "Content-Type": "application/json" })
        .end(JSON.stringify({ items: page, nextCursor: null }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

const cli = (...args: string[]) => runCaptured(["--api", baseUrl, "--key", "k", ...args]);

const JOB = "01M8VCNM4ZMPF7BCFTZR1WJYJ7";

/** A run ended `status` at its `attempt`, as the API answers it. */
const ended = (
  attempt: number,
  status: Run["status"],
  error: string | null,
  reason: string | null,
) => endedRun(JOB, attempt, status, error, reason);

const GAVE_UP = "gave up after 2 attempts: HTTP 500: internal error";
const dead = ended(2, "dead", "HTTP 500: internal error", GAVE_UP);
const failed = ended(1, "failed", "HTTP 500: internal error", null);
/** A long error is quoted by the reason shortened: its head, then "…" (shared/retry.ts). */
const longError = `HTTP 502: ${"x".repeat(600)}`;
const deadLong = ended(3, "dead", longError, `non-retryable error: ${longError.slice(0, 499)}…`);
/** A reason that does not quote the error: both are shown. */
const cancelled = ended(4, "cancelled", "sleep interrupted: run cancelled", "job deleted");

const rowOf = (out: string, run: Run) =>
  out.split("\n").find((line) => line.startsWith(run.runId)) ?? "";

describe("why a run ended, in the tables", () => {
  it("runs list shows a dead run's reason, which quotes its error, and an error alone or beside another reason", async () => {
    page = [cancelled, deadLong, dead, failed];
    const { code, out } = await cli("runs", "list", JOB);
    expect(code).toBe(EXIT.ok);
    expect(out).toMatch(
      /^RUN\s+ATTEMPT\s+STATUS\s+SCHEDULED FOR\s+STARTED\s+DURATION\s+ERROR \/ REASON\n/,
    );
    expect(rowOf(out, dead)).toMatch(/\s{2}gave up after 2 attempts: HTTP 500: internal error$/);
    expect(rowOf(out, failed)).toMatch(/\s{2}HTTP 500: internal error$/);
    expect(rowOf(out, deadLong)).toMatch(/\s{2}non-retryable error: HTTP 502: x+…$/);
    expect(rowOf(out, cancelled)).toMatch(
      /\s{2}job deleted \(error: sleep interrupted: run cancelled\)$/,
    );
  });

  it("runs watch prints the same as each run ends", async () => {
    page = [dead];
    const { code, out } = await cli(
      ...["runs", "watch", JOB, "--since", "2029-12-31T00:00:00Z", "--count", "1"],
    );
    expect(code).toBe(EXIT.ok);
    expect(rowOf(out, dead)).toMatch(/\s{2}gave up after 2 attempts: HTTP 500: internal error$/);
  });

  it("dead-letters list too", async () => {
    page = [dead];
    const { code, out } = await cli("dead-letters", "list");
    expect(code).toBe(EXIT.ok);
    const row = out.split("\n").find((line) => line.startsWith(JOB)) ?? "";
    expect(row).toMatch(/\s{2}gave up after 2 attempts: HTTP 500: internal error$/);
  });

  it("-o json prints the runs as the API answered them, one object a line for runs watch", async () => {
    page = [cancelled, deadLong, dead, failed];
    const listed = await cli("-o", "json", "runs", "list", JOB);
    expect(JSON.parse(listed.out)).toEqual(page);
    page = [dead];
    const watched = await cli(
      ...["-o", "json", "runs", "watch", JOB, "--since", "2029-12-31T00:00:00Z", "--count", "1"],
    );
    expect(
      watched.out
        .trimEnd()
        .split("\n")
        .map((line) => JSON.parse(line)),
    ).toEqual([dead]);
  });
});
