import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCaptured } from "../support/cli-run.js";
import { actedOn } from "../support/terminal-text.js";

/**
 * The CLI's tables against a server that is not the API (a wrong --api, a proxy that rewrites
 * answers): every string it prints goes through printable (client/cli/output.ts), so that no
 * terminal sequence in an answer reaches the terminal. The client checks a job's id, status and
 * version and a run's ids and status, not the other fields' types: a field the API sends as a
 * string, sent as a list of strings, reaches printable as the list, which it prints as its JSON
 * text, escaped (a `for…of` over the list walked its elements and printed each whole, escapes and
 * all). Here OSC 52 (a terminal that allows it puts the text on the clipboard: a command to paste)
 * and OSC 8 (a link whose text and address differ).
 */
const OSC52 = "x\u001b]52;c;cm0gLXJmIH4K\u0007";
const OSC8 = "see \u001b]8;;https://evil.example/\u0007the docs\u001b]8;;\u0007";

const job = {
  id: "job-1",
  name: [OSC52],
  type: [OSC8],
  status: "active",
  version: 1,
  schedule: { cron: "0 9 * * *", timezone: "UTC" },
  nextRunAt: null,
  endAt: null,
  maxRuns: null,
  occurrencesQueued: 0,
  lastRun: null,
  priority: "normal",
  timeoutSeconds: 300,
  window: null,
  policies: {
    retry: { maxAttempts: 3, initialDelaySeconds: 1, maxDelaySeconds: 30 },
    misfirePolicy: "run_once",
    overlapPolicy: "skip",
    maxConcurrent: 1,
    inFlight: "keep",
  },
  target: null,
  dependents: [],
  payload: null,
  createdAt: "2030-01-01T00:00:00.000Z",
  updatedAt: "2030-01-01T00:00:00.000Z",
};

/** A run with the fields runFields and runRow print without a dash (the others print "-"). */
const run = {
  runId: "run-1",
  jobId: "job-1",
  status: "failed",
  attempt: 1,
  scheduledFor: [OSC52],
  plannedFor: [OSC8],
  dueAt: "2030-01-01T00:00:00.000Z",
  durationMs: null,
  error: null,
  reason: null,
  jobVersion: 1,
  cancelRequestedAt: null,
};

const ANSWERS: Readonly<Record<string, unknown>> = {
  "/jobs/job-1": job,
  "/jobs": { items: [job], nextCursor: null },
  "/jobs/job-1/runs/run-1": run,
  "/jobs/job-1/runs": { items: [run], nextCursor: null },
};

let server: Server;
let api: string;

beforeAll(async () => {
  server = createServer((request, response) => {
    const path = new URL(request.url ?? "/", "http://x").pathname;
    const body = ANSWERS[path];
    response.writeHead(body === undefined ? 404 : 200, { "Content-Type": "application/json" });
    response.end(JSON.stringify(body ?? { error: { code: "not_found", message: "no" } }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  api = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe("a field the API sends as a string, answered as a list of strings", () => {
  for (const args of [
    ["jobs", "get", "job-1"],
    ["jobs", "list"],
    ["runs", "get", "job-1", "run-1"],
    ["runs", "list", "job-1"],
  ]) {
    it(`${args.join(" ")} prints no terminal sequence of it`, async () => {
      const printed = await runCaptured(["--api", api, "--key", "k", ...args]);
      expect(printed.err).toBe("");
      // Each line printed with a character a terminal acts on, as JSON (so this output is inert).
      const acted = printed.out.split("\n").filter((line) => actedOn(line).length > 0);
      expect(acted.map((line) => JSON.stringify(line))).toEqual([]);
    });
  }
});
