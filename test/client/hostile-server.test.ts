import { getEventListeners } from "node:events";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { EXIT } from "../../client/cli/exit-codes.js";
import { runCli } from "../../client/cli/main.js";
import {
  RequestTimeoutError,
  type RetryOptions,
  SchedulerApiError,
  SchedulerClient,
  SchedulerClientError,
} from "../../client/index.js";
import { spawnRunning, spawnWitnessed } from "../support/cli-run.js";
import { collector } from "../support/collector.js";
import { rejection } from "../support/rejection.js";

/**
 * The client and the CLI against a local HTTP server that misbehaves as it is told: one that
 * never answers, or stalls the body after the headers. Each case sets `behave`; the server records
 * every request that reaches it.
 */
type Behaviour = (request: IncomingMessage, response: ServerResponse) => void;

interface Received {
  readonly method: string;
  readonly path: string;
  readonly idempotencyKey: string | undefined;
}

let server: Server;
let baseUrl: string;
let behave: Behaviour;
let received: Received[] = [];
/**
 * Each case's own key: a request a case gave up on may reach the server only after the next case
 * began (on a loaded machine), and is not that case's to count.
 */
let key = "k0";
let cases = 0;

/** Accepts the request and never answers. */
const silent: Behaviour = () => undefined;
/** Sends a 200's headers and the start of a body, then nothing more. */
const stallsBody: Behaviour = (_, response) => {
  response.writeHead(200, { "Content-Type": "application/json" });
  response.write('{"items": [');
};

const MiB = 1024 * 1024;
/** What the last `streams` answer wrote before its connection closed. */
let streamedBytes = 0;

/**
 * A JSON answer of `status` that goes on for `totalBytes` (sent as it is read: the socket's
 * back-pressure paces it), declaring no length: a server that streams without end, bounded only
 * so that a client that reads it all does not take the test machine's memory with it.
 */
const streams =
  (status: number, totalBytes: number): Behaviour =>
  (_, response) => {
    streamedBytes = 0;
    response.writeHead(status, { "Content-Type": "application/json" });
    response.write('{"items": [], "nextCursor": null, "padding": "');
    const chunk = Buffer.alloc(64 * 1024, "x");
    const more = () => {
      while (streamedBytes < totalBytes) {
        streamedBytes += chunk.length;
        if (!response.write(chunk)) return;
      }
      response.end('"}');
    };
    response.on("drain", more);
    more();
  };

beforeAll(async () => {
  server = createServer((request, response) => {
    const authorization = request.headers.authorization;
    if (authorization === `Bearer ${key}` || authorization === "Bearer local-dev-key")
      received.push({
        method: request.method ?? "",
        path: request.url ?? "",
        idempotencyKey: request.headers["idempotency-key"]?.toString(),
      });
    request.resume();
    behave(request, response);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

beforeEach(() => {
  behave = silent;
  received = [];
  cases += 1;
  key = `k${cases}`;
});

/** A client with a short time limit whose retry waits are recorded, not slept. */
function clientWith(timeoutMs: number, retry: RetryOptions = {}) {
  const waits: number[] = [];
  const client = new SchedulerClient({
    baseUrl,
    auth: { kind: "bearer", key },
    timeoutMs,
    retry: {
      sleep: async (ms) => {
        waits.push(ms);
      },
      ...retry,
    },
  });
  return { client, waits };
}

const requests = () => received.map((r) => `${r.method} ${r.path}`);
/**
 * Until `check` passes: a request given up on may reach the server a moment after the error, and
 * a bin spawned here (node starting, its modules loading) sends its first request only seconds on
 * a loaded machine (under a load of 13 on 2 cores, more than 5 s): a failing check waits up to
 * 15 s, within the cases' 20 s.
 */
const arrived = (check: () => void) => vi.waitFor(check, { timeout: 15_000, interval: 20 });

async function cli(
  args: readonly string[],
  env: Readonly<Record<string, string | undefined>> = {},
) {
  let stderr = "";
  const code = await runCli(args, {
    stdout: () => undefined,
    stderr: (text) => {
      stderr += text;
    },
    env,
    // Its retries go on at once: these cases are about what the CLI does once they are spent. The
    // waits themselves are the client's (clientWith's cases here, client-retries), and the real
    // timer's is the Ctrl-C cases' below, which run the CLI without this.
    retrySleep: async () => undefined,
  });
  return { code, stderr };
}

describe("a request that takes too long", () => {
  it("a server that never answers: a timeout error naming the request and the limit", async () => {
    const { client } = clientWith(200, { attempts: 0 });
    const started = Date.now();
    const error = await rejection(client.health(), RequestTimeoutError);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(error).toBeInstanceOf(SchedulerClientError);
    expect([error.code, error.timeoutMs, error.method, error.repeatable]).toEqual([
      "timeout",
      200,
      "GET",
      true,
    ]);
    expect(error.message).toBe("GET /health did not finish within 200 ms");
  });

  it("a transport that loses the abort: the limit holds all the same", async () => {
    // Node 20's fetch can lose an abort: the signal combined with AbortSignal.any, or the one a
    // Request makes for its init's, is held weakly and may be collected first. Under load the CLI
    // then waited for ever on a server that never answers. A fetch that ignores its signal:
    const client = new SchedulerClient({
      baseUrl,
      auth: { kind: "bearer", key },
      timeoutMs: 200,
      retry: { attempts: 0 },
      fetch: () => new Promise<Response>(() => undefined),
    });
    const started = Date.now();
    const error = await rejection(client.health(), RequestTimeoutError);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(error.message).toBe("GET /health did not finish within 200 ms");
  }, 5000);

  it("headers then a stalled body: the limit covers reading the body", async () => {
    behave = stallsBody;
    // Long enough for the headers to come first on a loaded machine.
    const { client } = clientWith(1000, { attempts: 0 });
    const error = await rejection(client.jobs.page(), RequestTimeoutError);
    expect(error.message).toBe("GET /jobs did not finish within 1000 ms");
    expect(requests()).toEqual(["GET /jobs"]);
  });

  it("a request safe to repeat is retried after a timeout; the last timeout is thrown", async () => {
    const { client, waits } = clientWith(100, { attempts: 2 });
    await rejection(client.runs.get("01JOB", "01RUN"), RequestTimeoutError);
    await arrived(() => expect(requests()).toEqual(Array(3).fill("GET /jobs/01JOB/runs/01RUN")));
    expect(waits).toEqual([500, 1000]);
  });

  it("a POST with an Idempotency-Key is retried, the client's own too; one without is sent once (it may have been applied)", async () => {
    const { client } = clientWith(100, { attempts: 1 });
    const newJob = { type: "noop", schedule: { runAt: "2030-01-01T00:00:00Z" } } as const;
    await rejection(client.jobs.create(newJob, { idempotencyKey: "k1" }), RequestTimeoutError);
    await arrived(() =>
      expect(received.map((r) => [r.method, r.path, r.idempotencyKey])).toEqual([
        ["POST", "/jobs", "k1"],
        ["POST", "/jobs", "k1"],
      ]),
    );

    // A trigger carries a key the client made for it: retried under it, and still said to be
    // maybe applied once the retries ran out.
    received = [];
    const error = await rejection(client.jobs.handle("01JOB").trigger(), RequestTimeoutError);
    await arrived(() => {
      expect(requests()).toEqual(Array(2).fill("POST /jobs/01JOB/trigger"));
      expect(new Set(received.map((r) => r.idempotencyKey)).size).toBe(1);
    });
    expect(error.repeatable).toBe(true);
    expect(error.message).toBe(
      "POST /jobs/01JOB/trigger did not finish within 100 ms: it may have been applied",
    );

    received = [];
    const batch = await rejection(client.jobs.createBatch([newJob]), RequestTimeoutError);
    await arrived(() => expect(requests()).toEqual(["POST /jobs:batch"]));
    expect(batch.repeatable).toBe(false);

    // A pause's repeat answers the job as it stands: retried without a key.
    received = [];
    const paused = await rejection(client.jobs.handle("01JOB").pause(), RequestTimeoutError);
    await arrived(() => expect(requests()).toEqual(Array(2).fill("POST /jobs/01JOB/pause")));
    expect(paused.repeatable).toBe(true);
  });

  it("the caller's own AbortSignal still aborts, as an abort rather than a timeout", async () => {
    const { client } = clientWith(10_000, { attempts: 0 });
    const caller = new AbortController();
    const pending = client.http.GET("/health", { signal: caller.signal });
    setTimeout(() => caller.abort(), 50);
    const error = await rejection(pending, Error);
    expect(error).not.toBeInstanceOf(RequestTimeoutError);
    expect(error.name).toBe("AbortError");
  });

  it("waitForRun's signal aborts the poll in flight, not only the wait between polls", async () => {
    const { client } = clientWith(10_000);
    for (const wait of [
      (signal: AbortSignal) => client.waitForRun("01JOB", "01RUN", { signal }),
      (signal: AbortSignal) => client.jobs.handle("01JOB").waitForRun({ signal }),
    ]) {
      received = [];
      const caller = new AbortController();
      const pending = wait(caller.signal);
      await arrived(() => expect(received).toHaveLength(1));
      const abortedAt = Date.now();
      caller.abort();
      const error = await rejection(pending, DOMException);
      expect(error.name).toBe("AbortError");
      // The API never answers: only the abort ends the wait, well before the 10 s limit.
      expect(Date.now() - abortedAt).toBeLessThan(2000);
    }
  });

  // One case a test: they outlasted the 30 s test timeout together on a loaded machine when the
  // CLI's retries waited their real backoff (0.5, 1, 2 s).
  it("the CLI: --request-timeout, exit 8 for a read", async () => {
    const read = await cli([
      "--api",
      baseUrl,
      "--key",
      key,
      "--request-timeout",
      "0.2",
      "jobs",
      "list",
    ]);
    expect(read.code).toBe(EXIT.busy);
    expect(read.stderr).toContain(
      "error: timeout: GET /jobs?limit=50 did not finish within 200 ms",
    );
  });

  it("the CLI: --request-timeout, exit 1 for a trigger, which may have been applied", async () => {
    const write = await cli([
      "--api",
      baseUrl,
      "--key",
      key,
      "--request-timeout",
      "0.2",
      "jobs",
      "trigger",
      "01JOB",
    ]);
    expect(write.code).toBe(EXIT.failed);
    expect(write.stderr).toContain("it may have been applied");
    // The key the command made, sent again, answers the run the trigger queued, if it did.
    expect(write.stderr).toMatch(
      /\n {2}retry with --idempotency-key trigger-[0-9a-f-]{36} to avoid a duplicate\n$/,
    );
    const asJson = await cli([
      ...["-o", "json", "--api", baseUrl, "--key", key, "--request-timeout", "0.2"],
      ...["jobs", "create", "--type", "noop", "--run-at", "2030-01-01T00:00:00Z"],
    ]);
    expect(JSON.parse(asJson.stderr)).toEqual({
      error: {
        code: "timeout",
        message: "POST /jobs did not finish within 200 ms: it may have been applied",
        idempotencyKey: expect.stringMatching(/^create-[0-9a-f-]{36}$/),
      },
    });
  });

  it("the CLI: --request-timeout on a pause, whose repeat answers the job as it stands: retried, then exit 8", async () => {
    received = [];
    const paused = await cli([
      ...["--api", baseUrl, "--key", key, "--request-timeout", "0.2"],
      ...["jobs", "pause", "01JOB"],
    ]);
    await arrived(() => expect(requests()).toEqual(Array(4).fill("POST /jobs/01JOB/pause")));
    expect(paused.code).toBe(EXIT.busy);
    expect(paused.stderr).toContain("error: timeout: POST /jobs/01JOB/pause did not finish");
    expect(paused.stderr).not.toContain("it may have been applied");
  });

  it("the CLI: --request-timeout on a rotation, which the command does not repeat, exits 1", async () => {
    // The client retried the rotation (its own Idempotency-Key), but the command run again sends
    // a new key: a second rotation, which would cut off the secret receivers still verify with.
    received = [];
    const rotate = await cli([
      ...["--api", baseUrl, "--key", key, "--request-timeout", "0.2"],
      ...["webhook-secret", "rotate"],
    ]);
    await arrived(() => expect(requests()).toEqual(Array(4).fill("POST /webhook-secret/rotate")));
    expect(rotate.code).toBe(EXIT.failed);
  });

  it("the CLI: a --request-timeout that is not a number of seconds exits 2", async () => {
    for (const value of ["soon", "0", "-1", "1e9"]) {
      const bad = await cli(["--api", baseUrl, "--request-timeout", value, "jobs", "list"]);
      expect(bad.code).toBe(EXIT.usage);
      expect(bad.stderr).toContain(`--request-timeout <seconds>' argument '${value}' is invalid`);
    }
  });

  it("a timeoutMs that would make every request time out at once is refused when the client is made", () => {
    for (const timeoutMs of [0, -5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31]) {
      expect(() => clientWith(timeoutMs)).toThrow(
        new RangeError(`timeoutMs: ${timeoutMs} is not a number of ms from 1 to 2147483647`),
      );
    }
  });
});

describe("an answer too large to hold", () => {
  it("a body that goes on and on: unexpected_response naming the 16 MiB limit; the rest is not read", async () => {
    behave = streams(200, 64 * MiB);
    const { client } = clientWith(10_000, { attempts: 0 });
    const error = await rejection(client.jobs.page(), SchedulerApiError);
    expect([error.status, error.code]).toEqual([200, "unexpected_response"]);
    expect(error.message).toBe("GET /jobs: the answer is over 16 MiB, the most the client reads");
    expect(streamedBytes).toBeLessThan(32 * MiB);
  });

  it("an error answer as large is the same error, not a wait for its end", async () => {
    behave = streams(500, 64 * MiB);
    const { client } = clientWith(10_000, { attempts: 0 });
    const error = await rejection(client.health(), SchedulerApiError);
    expect([error.status, error.code]).toEqual([500, "unexpected_response"]);
    expect(error.message).toContain("over 16 MiB");
  });

  it("a Content-Length over the limit fails before the body is read", async () => {
    behave = (_, response) => {
      response.writeHead(200, {
        "Content-Type": "application/json",
        "Content-Length": String(1024 * MiB),
      });
      response.write("{");
    };
    const { client } = clientWith(10_000, { attempts: 0 });
    const started = Date.now();
    const error = await rejection(client.health(), SchedulerApiError);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(error.message).toBe("GET /health: the answer is over 16 MiB, the most the client reads");
  });
});

describe("a success answer without what the method relies on", () => {
  /** Answers every request with `status` and this body. */
  const answers =
    (status: number, body: string, contentType = "application/json"): Behaviour =>
    (_, response) => {
      response.writeHead(status, { "Content-Type": contentType }).end(body);
    };
  const client = () => clientWith(5000, { attempts: 0 }).client;
  const newJob = { type: "noop", schedule: { runAt: "2030-01-01T00:00:00Z" } } as const;

  const cases: readonly [string, number, string, () => Promise<unknown>, string][] = [
    [
      "jobs.create",
      201,
      "{}",
      () => client().jobs.create(newJob),
      "POST /jobs: the 201 answer is not a job: id is not a string",
    ],
    [
      "jobs.get",
      200,
      '{"id": "01JOB", "status": "active"}',
      () => client().jobs.get("01JOB"),
      "GET /jobs/{id}: the 200 answer is not a job: version is not a number",
    ],
    [
      "handle.pause",
      200,
      "[]",
      () => client().jobs.handle("01JOB").pause(),
      "POST /jobs/{id}/pause: the 200 answer is not a job: not an object",
    ],
    [
      "runs.get",
      200,
      '{"runId": "01RUN", "jobId": "01JOB"}',
      () => client().runs.get("01JOB", "01RUN"),
      "GET /jobs/{id}/runs/{runId}: the 200 answer is not a run: status is not a string",
    ],
    [
      "handle.trigger",
      202,
      "{}",
      () => client().jobs.handle("01JOB").trigger(),
      "POST /jobs/{id}/trigger: the 202 answer is not a run: runId is not a string",
    ],
    [
      "jobs.page",
      200,
      "{}",
      () => client().jobs.page(),
      "GET /jobs: the 200 answer is not a page of jobs: nextCursor is not a string or null",
    ],
    [
      "runs.page",
      200,
      '{"items": [{}], "nextCursor": null}',
      () => client().runs.page("01JOB"),
      "GET /jobs/{id}/runs: the 200 answer is not a page of runs: items[0]: runId is not a string",
    ],
    [
      "deadLetters.list",
      200,
      '{"items": null, "nextCursor": null}',
      () => client().deadLetters.list().next(),
      "GET /dead-letters: the 200 answer is not a page of runs: items is not an array",
    ],
    [
      "jobs.createBatch",
      200,
      '{"results": [{"index": 0}]}',
      () => client().jobs.createBatch([newJob]),
      "POST /jobs:batch: the 200 answer is not a batch's results: results[0]: status is not a number",
    ],
    [
      "schedules.preview",
      200,
      "{}",
      () => client().schedules.preview({ runAt: "2030-01-01T00:00:00Z" }),
      "POST /schedules/preview: the 200 answer is not a preview: occurrences is not an array",
    ],
    [
      "webhookSecret.rotate",
      200,
      "{}",
      () => client().webhookSecret.rotate(),
      "POST /webhook-secret/rotate: the 200 answer is not a webhook secret: secret is not a string",
    ],
    [
      "quotas.get",
      200,
      '"ok"',
      () => client().quotas.get(),
      "GET /quotas: the 200 answer is not a tenant's quotas: not an object",
    ],
    [
      "health",
      200,
      "",
      () => client().health(),
      "GET /health: the 200 answer is not the health: it is empty",
    ],
  ];
  for (const [method, status, body, call, message] of cases) {
    it(`${method}: ${status} ${body || "(empty)"} is unexpected_response naming the operation and what is missing`, async () => {
      behave = answers(status, body);
      const error = await rejection(call(), SchedulerApiError);
      expect([error.status, error.code, error.message]).toEqual([
        status,
        "unexpected_response",
        message,
      ]);
    });
  }

  it("a proxy's HTML page answered 200 is unexpected_response naming the request, not a SyntaxError", async () => {
    behave = answers(200, "<html><body>Welcome to the hotel wifi</body></html>", "text/html");
    const error = await rejection(client().jobs.page({ limit: 5 }), SchedulerApiError);
    expect([error.status, error.code, error.message]).toEqual([
      200,
      "unexpected_response",
      "GET /jobs?limit=5: the 200 answer is not JSON: <html><body>Welcome to the hotel wifi</body></html>",
    ]);
  });

  it("the CLI exits 1 with the error, and prints nothing to stdout", async () => {
    behave = answers(201, "{}");
    const { code, stderr } = await cli([
      "--api",
      baseUrl,
      "--key",
      key,
      "jobs",
      "create",
      "--type",
      "noop",
      "--run-at",
      "2030-01-01T00:00:00Z",
    ]);
    expect(code).toBe(EXIT.failed);
    // The create was applied (a 201): the key the command made, sent again, answers its job.
    expect(stderr).toMatch(
      /^error: unexpected_response \(201\): POST \/jobs: the 201 answer is not a job: id is not a string\n {2}retry with --idempotency-key create-[0-9a-f-]{36} to avoid a duplicate\n$/,
    );
  });
});

describe("API Gateway's own refusals, not in the API's error shape", () => {
  const gateway =
    (status: number, message: string, headers: Record<string, string> = {}): Behaviour =>
    (_, response) => {
      response
        .writeHead(status, { "Content-Type": "application/json", ...headers })
        .end(JSON.stringify({ message }));
    };
  const cases: readonly [number, string, string, number][] = [
    [401, "Unauthorized", "unauthorized", EXIT.unauthorized],
    [
      403,
      "The request signature we calculated does not match the signature you provided.",
      "unauthorized",
      EXIT.unauthorized,
    ],
    [403, "Forbidden", "unauthorized", EXIT.unauthorized],
    [413, "Request Entity Too Large", "payload_too_large", EXIT.invalid],
    [429, "Too Many Requests", "rate_limited", EXIT.busy],
  ];
  for (const [status, message, code, exit] of cases) {
    it(`${status} {"message": "${message.slice(0, 30)}"} is ${code} with the gateway's message; the CLI exits ${exit}`, async () => {
      behave = gateway(status, message, { "Retry-After": "2" });
      const { client } = clientWith(5000, { attempts: 0 });
      const error = await rejection(client.jobs.page(), SchedulerApiError);
      expect([error.status, error.code, error.message, error.retryAfterSeconds]).toEqual([
        status,
        code,
        message,
        2,
      ]);

      const run = await cli(["--api", baseUrl, "--key", key, "jobs", "list"]);
      expect(run.code).toBe(exit);
      expect(run.stderr).toContain(`error: ${code} (${status}): ${message}`);
    });
  }

  it("a proxy's page of those statuses takes the same code, its text as the message", async () => {
    behave = (_, response) => {
      response.writeHead(403, { "Content-Type": "text/html" }).end("<h1>Request blocked</h1>");
    };
    const { client } = clientWith(5000, { attempts: 0 });
    const error = await rejection(client.health(), SchedulerApiError);
    expect([error.status, error.code, error.message]).toEqual([
      403,
      "unauthorized",
      "<h1>Request blocked</h1>",
    ]);
  });

  it("any other status not in the error shape stays unexpected_response (exit 1)", async () => {
    behave = gateway(500, "Internal Server Error");
    const { client } = clientWith(5000, { attempts: 0 });
    const error = await rejection(client.health(), SchedulerApiError);
    expect([error.status, error.code]).toEqual([500, "unexpected_response"]);
    expect((await cli(["--api", baseUrl, "--key", key, "jobs", "list"])).code).toBe(EXIT.failed);
  });
});

describe("an error answer in the API's shape whose issues are not", () => {
  const refusedWith =
    (issues: unknown): Behaviour =>
    (_, response) => {
      response.writeHead(400, { "Content-Type": "application/json" }).end(
        JSON.stringify({
          error: { code: "validation_failed", message: "name: too long", field: "name", issues },
        }),
      );
    };

  it("an issue that is not a { field, message } of strings is left out: the CLI prints the error and the others, exit 3", async () => {
    behave = refusedWith([
      { field: "name", message: "too long" },
      5,
      { field: 7, message: null },
      { field: "payload.x" },
      { field: "payload.y", message: "not a number" },
    ]);
    const run = await cli(["--api", baseUrl, "--key", key, "jobs", "list"]);
    expect(run.stderr).toBe(
      "error: validation_failed (400): name: too long\n  payload.y: not a number\n",
    );
    expect(run.code).toBe(EXIT.invalid);

    const { client } = clientWith(5000, { attempts: 0 });
    const error = await rejection(client.jobs.page(), SchedulerApiError);
    expect(error.issues).toEqual([
      { field: "name", message: "too long" },
      { field: "payload.y", message: "not a number" },
    ]);
  });

  it("issues that are no list are none", async () => {
    for (const issues of ["name: too long", { field: "name", message: "too long" }, null]) {
      behave = refusedWith(issues);
      const run = await cli(["--api", baseUrl, "--key", key, "jobs", "list"]);
      expect(run.stderr, JSON.stringify(issues)).toBe(
        "error: validation_failed (400): name: too long\n",
      );
      expect(run.code, JSON.stringify(issues)).toBe(EXIT.invalid);
      const { client } = clientWith(5000, { attempts: 0 });
      const error = await rejection(client.jobs.page(), SchedulerApiError);
      expect(error.issues, JSON.stringify(issues)).toEqual([]);
    }
  });
});

describe("a batch whose refused job the CLI cannot read", () => {
  let file: string;
  beforeAll(() => {
    file = join(mkdtempSync(join(tmpdir(), "batch-")), "jobs.json");
    writeFileSync(
      file,
      JSON.stringify([{ type: "noop", schedule: { runAt: "2030-01-01T00:00:00Z" } }]),
    );
  });
  const batchAnswers =
    (results: unknown): Behaviour =>
    (_, response) => {
      response
        .writeHead(200, { "Content-Type": "application/json" })
        .end(JSON.stringify({ results }));
    };
  const createBatch = () =>
    cli(["--api", baseUrl, "--key", key, "jobs", "create-batch", "--file", file]);

  it("a refusal with a code this CLI does not know (a newer server's) exits 1, not 0", async () => {
    behave = batchAnswers([
      { index: 0, status: 422, error: { code: "a_newer_code", message: "refused" } },
    ]);
    const run = await createBatch();
    expect(run.stderr).toBe("error: 1 of 1 jobs were not created\n");
    expect(run.code).toBe(EXIT.failed);
  });

  it("a refusal whose code names a property every object has (constructor, toString, __proto__) exits 1, not with that property", async () => {
    for (const code of ["constructor", "toString", "__proto__", "hasOwnProperty"]) {
      behave = batchAnswers([{ index: 0, status: 422, error: { code, message: "refused" } }]);
      const run = await createBatch();
      expect(run.stderr, code).toBe("error: 1 of 1 jobs were not created\n");
      expect(run.code, code).toBe(EXIT.failed);
    }
  });

  it("a refusal without its error exits 1, not 0", async () => {
    behave = batchAnswers([{ index: 0, status: 500 }]);
    const run = await createBatch();
    expect(run.stderr).toBe("error: 1 of 1 jobs were not created\n");
    expect(run.code).toBe(EXIT.failed);
  });
});

describe("the CLI does not send a bearer key over plain http to another host", () => {
  /** A documentation address (RFC 5737): nothing answers there. */
  const remote = "http://192.0.2.1:3000";

  it("--key to an http URL that is not loopback is a usage error naming the flag and the scheme; nothing is sent", async () => {
    const { code, stderr } = await cli(["--api", remote, "--key", key, "jobs", "list"]);
    expect(code).toBe(EXIT.usage);
    expect(stderr).toBe(
      "error: --key: a bearer key is not sent over http: to 192.0.2.1:3000, where anyone on the way can read it: use an https URL, or --allow-insecure-http\n",
    );
  });

  it("SCHEDULER_API_KEY from the environment is named the same way", async () => {
    const { code, stderr } = await cli(["jobs", "list"], {
      SCHEDULER_API_KEY: "k",
      SCHEDULER_API_URL: "http://scheduler.internal.example",
    });
    expect(code).toBe(EXIT.usage);
    expect(stderr).toContain(
      "error: SCHEDULER_API_KEY: a bearer key is not sent over http: to scheduler.internal.example",
    );
  });

  it("loopback (the sandbox) is allowed over http, with a key or the sandbox's", async () => {
    behave = (_, response) => {
      response
        .writeHead(200, { "Content-Type": "application/json" })
        .end('{"items": [], "nextCursor": null}');
    };
    const port = new URL(baseUrl).port;
    for (const api of [baseUrl, `http://localhost:${port}`]) {
      expect((await cli(["--api", api, "--key", key, "jobs", "list"])).code).toBe(EXIT.ok);
      expect((await cli(["--api", api, "jobs", "list"])).code).toBe(EXIT.ok);
    }
    expect(received.map((r) => r.path)).toEqual(Array(4).fill("/jobs?limit=50"));
  });

  it("every loopback address counts, 127.0.0.0/8 and IPv4-mapped too (here nothing listens: unreachable, not refused)", async () => {
    for (const api of ["http://127.0.0.2:9", "http://[::ffff:127.0.0.1]:9"]) {
      const { code, stderr } = await cli(["--api", api, "--key", key, "jobs", "list"]);
      expect([code, stderr.includes("bearer key is not sent")], api).toEqual([
        EXIT.unreachable,
        false,
      ]);
    }
  });

  it("--allow-insecure-http sends it anyway (here: to nobody, so the request itself fails)", async () => {
    const { code, stderr } = await cli([
      ...["--api", remote, "--key", key, "--allow-insecure-http", "--request-timeout", "0.3"],
      ...["jobs", "pause", "01JOB"],
    ]);
    expect(stderr).not.toContain("--allow-insecure-http");
    expect([EXIT.failed, EXIT.unreachable]).toContain(code);
  });
});

describe("a bearer key that cannot go in a header", () => {
  // Each holds "hunter2", which no error may print: the key is the tenant's.
  const unsendable = ["hunter2\nmore", "hunter2\u0001", "ключ-hunter2", "hunter2 two", "  "];

  it("the client refuses it when it is made, naming what is wrong and not the key", () => {
    for (const bad of unsendable) {
      const make = () => new SchedulerClient({ baseUrl, auth: { kind: "bearer", key: bad } });
      expect(make, JSON.stringify(bad)).toThrow(RangeError);
      expect(make).toThrow(/^auth\.key: /);
      expect(make).not.toThrow(/hunter2/);
    }
  });

  it("the CLI exits 2 naming --key or SCHEDULER_API_KEY, and sends nothing", async () => {
    for (const bad of unsendable) {
      const flag = await cli(["--api", baseUrl, "--key", bad, "jobs", "list"]);
      expect([flag.code, flag.stderr.includes("hunter2")], JSON.stringify(bad)).toEqual([
        EXIT.usage,
        false,
      ]);
      expect(flag.stderr).toMatch(/^error: --key: /);
      const env = await cli(["--api", baseUrl, "jobs", "list"], { SCHEDULER_API_KEY: bad });
      expect([env.code, env.stderr.includes("hunter2")]).toEqual([EXIT.usage, false]);
      expect(env.stderr).toMatch(/^error: SCHEDULER_API_KEY: /);
    }
    expect(received).toEqual([]);
  });

  it('an empty --key (`--key "$KEY"` with KEY unset) exits 2 naming it; no other key is sent in its place', async () => {
    for (const api of [baseUrl, "https://api.example.com"]) {
      const empty = await cli(["--api", api, "--key", "", "jobs", "list"]);
      expect(empty.code, empty.stderr).toBe(EXIT.usage);
      expect(empty.stderr).toMatch(/^error: --key: the bearer key is empty/);
    }
    expect(received).toEqual([]);
  });

  it("one with a line ending after it (read from a file) is sent without it, as before", async () => {
    behave = (_, response) => {
      response
        .writeHead(200, { "Content-Type": "application/json" })
        .end('{"items": [], "nextCursor": null}');
    };
    expect((await cli(["--api", baseUrl, "--key", `${key}\r\n`, "jobs", "list"])).code).toBe(
      EXIT.ok,
    );
    expect(requests()).toEqual(["GET /jobs?limit=50"]);
  });
});

/** Two collections with a turn of the event loop between, so finalizers queued by the first run. */
async function collectGarbage(): Promise<void> {
  const gc = collector();
  gc();
  await new Promise((resolve) => setTimeout(resolve, 0));
  gc();
}

const STILL_WAITING = "still waiting 3 s after the abort";
/** How `pending` ended, or STILL_WAITING when it had not 3 s after the abort. */
const outcomeSoonAfterAbort = (pending: Promise<unknown>) =>
  Promise.race([
    pending.then(
      (value) => ({ settled: "fulfilled", value }),
      (reason: unknown) => reason,
    ),
    new Promise((resolve) => setTimeout(() => resolve(STILL_WAITING), 3000)),
  ]);

describe("a caller's abort of a request the API has not answered", () => {
  it("a transport that ignores the signal: the caller's abort ends it all the same, with its reason", async () => {
    const client = new SchedulerClient({
      baseUrl,
      auth: { kind: "bearer", key },
      timeoutMs: 10_000,
      fetch: () => new Promise<Response>(() => undefined),
    });
    const caller = new AbortController();
    const pending = client.http.GET("/health", { signal: caller.signal });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const reason = new Error("the caller's own reason");
    caller.abort(reason);
    expect(await outcomeSoonAfterAbort(pending)).toBe(reason);
  });

  // Node 20's fetch carries a caller's abort through signals it holds weakly: a Request's follows
  // the one it was made with through a controller only that Request holds (a clone's: nothing),
  // and the client's layers each make their own. A collection while the request waits dropped one,
  // and the abort with it: the request waited out its time limit (the CLI's Ctrl-C did nothing for
  // 30 s).
  it.for([
    ["bearer", { kind: "bearer", key: "k-gc" }],
    [
      "sigv4",
      {
        kind: "sigv4",
        region: "eu-west-1",
        credentials: { accessKeyId: "AKID", secretAccessKey: "secret" },
      },
    ],
    ["none", { kind: "none" }],
  ] as const)(
    "after a garbage collection (auth %s): the abort still ends it, with an AbortError",
    async ([, auth]) => {
      const reached: string[] = [];
      const closed: string[] = [];
      behave = (request) => {
        reached.push(request.url ?? "");
        request.socket.once("close", () => closed.push(request.url ?? ""));
      };
      const client = new SchedulerClient({ baseUrl, auth, timeoutMs: 10_000 });
      const caller = new AbortController();
      const pending = client.http.GET("/jobs", { signal: caller.signal });
      await arrived(() => expect(reached).toHaveLength(1));
      await collectGarbage();
      caller.abort();
      const outcome = await outcomeSoonAfterAbort(pending);
      expect(outcome).toBeInstanceOf(DOMException);
      expect(outcome).toHaveProperty("name", "AbortError");
      // Not only no longer awaited: fetch's own request is aborted, its connection closed.
      await arrived(() => expect(closed).toEqual(["/jobs"]));
    },
  );

  it("a middleware of the caller's may still return a Request of its own, sent as it is", async () => {
    const tags: (string | undefined)[] = [];
    behave = (request, response) => {
      tags.push(request.headers["x-tag"]?.toString());
      response.writeHead(200, { "Content-Type": "application/json" });
      response.end('{"status":"ok"}');
    };
    const { client } = clientWith(10_000);
    client.http.use({
      onRequest: ({ request }) =>
        new Request(request, {
          headers: { ...Object.fromEntries(request.headers), "X-Tag": "t1" },
        }),
    });
    await expect(client.health()).resolves.toEqual({ status: "ok" });
    expect(tags).toEqual(["t1"]);
  });

  it("a signal given to many requests holds no listener of theirs once they ended", async () => {
    behave = (request, response) => {
      if (request.url === "/health") {
        response.writeHead(200, { "Content-Type": "application/json" });
        response.end('{"status":"ok"}');
      }
    };
    const caller = new AbortController();
    const { client } = clientWith(10_000);
    for (let request = 0; request < 200; request++)
      await client.http.GET("/health", { signal: caller.signal });
    // Two that time out (the server never answers them), retried once each.
    const { client: timingOut } = clientWith(100, { attempts: 1 });
    for (let request = 0; request < 2; request++)
      await rejection(timingOut.jobs.page({}, { signal: caller.signal }), RequestTimeoutError);
    // Fetch's own listeners on it (one per Request made with it) go when a collection finds their
    // Request gone, its finalizer run in a later turn: under load, a collection or two later.
    await vi.waitFor(
      async () => {
        await collectGarbage();
        expect(getEventListeners(caller.signal, "abort")).toHaveLength(0);
      },
      { timeout: 5000, interval: 50 },
    );
  });
});

describe("Ctrl-C during runs watch", () => {
  /** `runs watch` run in-process with a signal aborted (Ctrl-C) once a request reached the server. */
  async function interruptedWatch() {
    const interrupt = new AbortController();
    let stderr = "";
    let stdout = "";
    const started = Date.now();
    const exited = runCli(
      ["--api", baseUrl, "--key", key, "runs", "watch", "01J0000000000000000000000X"],
      {
        stdout: (text) => {
          stdout += text;
        },
        stderr: (text) => {
          stderr += text;
        },
        env: {},
        signal: interrupt.signal,
      },
    );
    await arrived(() => expect(received.length).toBeGreaterThanOrEqual(1));
    // A collection before the Ctrl-C: Node 20's fetch holds the signals that carry it weakly.
    await collectGarbage();
    const interruptedAt = Date.now();
    interrupt.abort();
    const code = await Promise.race([
      exited,
      new Promise<string>((resolve) => setTimeout(() => resolve(STILL_WAITING), 3000)),
    ]);
    return {
      code,
      stdout,
      stderr,
      stoppedInMs: Date.now() - interruptedAt,
      ranMs: Date.now() - started,
    };
  }

  it("in the wait before a retry of a 503 (Retry-After 5): ends at once, exit 0, nothing sent after", async () => {
    behave = (_, response) => {
      response.writeHead(503, { "Content-Type": "application/json", "Retry-After": "5" });
      response.end(JSON.stringify({ error: { code: "busy", message: "busy" } }));
    };
    const watched = await interruptedWatch();
    expect(watched.code, watched.stderr).toBe(EXIT.ok);
    expect(watched.stoppedInMs).toBeLessThan(1000);
    expect(watched.stderr).toBe("");
    expect(requests()).toEqual([`GET /jobs/01J0000000000000000000000X/runs?limit=100`]);
  });

  it("with a poll the API has not answered: ends at once, exit 0", async () => {
    behave = silent;
    const watched = await interruptedWatch();
    expect(watched.code, watched.stderr).toBe(EXIT.ok);
    expect(watched.stoppedInMs).toBeLessThan(1000);
    expect(watched.stderr).toBe("");
  });
});

describe("runs watch on a job with a long history", () => {
  interface ListedRun {
    readonly runId: string;
    readonly jobId: string;
    readonly status: string;
    readonly scheduledFor: string;
    readonly finishedAt: string | null;
  }

  /**
   * 250 runs a minute apart, newest first: the newest running, the others ended long ago (or
   * `runs`, newest first), listed by the API's `from`, `limit` and `cursor`.
   */
  function listing(now: number, runs?: readonly ListedRun[]): void {
    const history =
      runs ??
      Array.from({ length: 250 }, (_, i) => {
        const occurrence = now - (i + 1) * 60_000;
        return {
          runId: `r${i}`,
          jobId: "01JOBLONG",
          status: i === 0 ? "running" : "succeeded",
          scheduledFor: new Date(occurrence).toISOString(),
          finishedAt: i === 0 ? null : new Date(occurrence + 1000).toISOString(),
        };
      });
    behave = (request, response) => {
      const url = new URL(request.url ?? "", baseUrl);
      const from = Date.parse(url.searchParams.get("from") ?? "1970-01-01T00:00:00Z");
      const start = Number(url.searchParams.get("cursor") ?? 0);
      const listed = history.filter((run) => Date.parse(run.scheduledFor) >= from);
      const end = start + Number(url.searchParams.get("limit"));
      response.writeHead(200, { "Content-Type": "application/json" });
      response.end(
        JSON.stringify({
          items: listed.slice(start, end),
          nextCursor: end < listed.length ? String(end) : null,
        }),
      );
    };
  }

  /** `runs watch 01JOBLONG` for a second (two polls): its exit code and the run ids it printed. */
  async function watchASecond(): Promise<{ code: number; printed: string[] }> {
    let stdout = "";
    const code = await runCli(
      ["--api", baseUrl, "--key", key, "-o", "json", "runs", "watch", "01JOBLONG"].concat([
        "--timeout",
        "1",
      ]),
      {
        stdout: (text) => {
          stdout += text;
        },
        stderr: () => undefined,
        env: {},
      },
    );
    const printed = stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line).runId);
    return { code, printed };
  }

  it("the first poll reads the newest page, not every page; later polls only what is new", async () => {
    listing(Date.now());
    const { code, printed } = await watchASecond();
    expect(code).toBe(EXIT.ok);
    expect(printed).toEqual(["r0"]);
    const paths = requests();
    expect(paths[0]).toBe("GET /jobs/01JOBLONG/runs?limit=100");
    expect(paths.filter((path) => path.includes("cursor="))).toEqual([]);
    // The second poll: from 2 minutes before the first (runPolls), one request.
    expect(paths).toHaveLength(2);
    expect(paths[1]).toMatch(/^GET \/jobs\/01JOBLONG\/runs\?from=[^&]+&limit=100$/);
  });

  it("a run ended long ago, of the occurrence the first page ends in, is not shown", async () => {
    // The first page ends with a queued retry (attempt 2) of an old occurrence: the second poll
    // reads from there, and finds its attempt 1, failed long ago, the first run of the next page.
    const now = Date.now();
    const run = (i: number, status: string, runId = `r${i}`): ListedRun => {
      const occurrence = now - (i + 1) * 60_000;
      const ended = status !== "running" && status !== "queued";
      return {
        runId,
        jobId: "01JOBLONG",
        status,
        scheduledFor: new Date(occurrence).toISOString(),
        finishedAt: ended ? new Date(occurrence + 1000).toISOString() : null,
      };
    };
    listing(now, [
      run(0, "running"),
      ...Array.from({ length: 98 }, (_, i) => run(i + 1, "succeeded")),
      run(99, "queued", "r99-retry"),
      run(99, "failed"),
      ...Array.from({ length: 150 }, (_, i) => run(i + 100, "succeeded")),
    ]);
    const { code, printed } = await watchASecond();
    expect(code).toBe(EXIT.ok);
    expect(printed).toEqual(["r0"]);
  });
});

describe("Ctrl-C during another command", () => {
  /** The bin running `args` against a server that never answers, sent SIGINT once `request` reached it. */
  async function interrupted(args: readonly string[], request: string) {
    behave = silent;
    const child = spawnWitnessed(["--api", baseUrl, "--key", key, ...args], {
      cwd: process.cwd(),
      env: process.env,
    });
    await arrived(() => expect(requests()).toEqual([request]));
    const interruptedAt = Date.now();
    child.process.kill("SIGINT");
    const outcome = await child.outcome;
    return { ...outcome, endedInMs: Date.now() - interruptedAt };
  }

  // A read's request cannot have changed anything: Ctrl-C aborts it rather than wait for the bin.
  it.each([
    { command: "jobs get", args: ["jobs", "get", "01JOB"], request: "GET /jobs/01JOB" },
    {
      command: "runs get",
      args: ["runs", "get", "01JOB", "01RUN"],
      request: "GET /jobs/01JOB/runs/01RUN",
    },
    {
      command: "schedules preview --job",
      args: ["schedules", "preview", "--job", "01JOB"],
      request: "GET /jobs/01JOB/preview",
    },
    {
      command: "schedules preview --every",
      args: ["schedules", "preview", "--every", "60"],
      request: "POST /schedules/preview",
    },
    { command: "quotas get", args: ["quotas", "get"], request: "GET /quotas" },
    {
      command: "quotas get TENANT",
      args: ["quotas", "get", "acme"],
      request: "GET /tenants/acme/quotas",
    },
    {
      command: "webhook-secret get",
      args: ["webhook-secret", "get"],
      request: "GET /webhook-secret",
    },
  ])(
    "$command ends at once, exit 130, nothing printed",
    async ({ args, request }) => {
      const { code, out, err, end } = await interrupted(args, request);
      expect(code).toBe(EXIT.interrupted);
      // The command's own end: the process ran out of work, not ended by the bin's process.exit
      // 2 s after Ctrl-C (a read still running, a socket or timer keeping it alive), and no timer
      // keeping it alive ran after the command returned.
      expect(end).toEqual({ drained: true, timersAfterCommand: 0 });
      expect(out).toBe("");
      expect(err).toBe("");
    },
    20_000,
  );

  it("a write (jobs pause) still runs until the bin exits 130, 2 s after Ctrl-C", async () => {
    const { code, endedInMs } = await interrupted(
      ["jobs", "pause", "01JOB"],
      "POST /jobs/01JOB/pause",
    );
    expect(code).toBe(EXIT.interrupted);
    expect(endedInMs).toBeGreaterThanOrEqual(1900);
  }, 20_000);

  it("a create the API has not answered prints the key it was sent under before exiting 130", async () => {
    behave = silent;
    const args = ["jobs", "create", "--type", "noop", "--run-at", "2030-01-01T00:00:00Z"];
    const child = spawnRunning(
      process.execPath,
      ["bin/scheduler.mjs", "--api", baseUrl, "--key", key, ...args],
      { cwd: process.cwd(), env: process.env },
    );
    await arrived(() => expect(requests()).toEqual(["POST /jobs"]));
    child.process.kill("SIGINT");
    const { code, err } = await child.outcome;
    expect(code).toBe(EXIT.interrupted);
    const sent = received[0]?.idempotencyKey ?? "";
    expect(sent).toMatch(/^create-/);
    expect(err).toContain(`retry with --idempotency-key ${sent} to avoid a duplicate`);
  }, 20_000);

  it("-o json: a trigger's own key, as its failure would; the user's own key is not printed", async () => {
    behave = silent;
    /** `jobs trigger` whose bin is about to exit 130 once its request reached the server. */
    const interruptedTrigger = async (...flags: string[]) => {
      received = [];
      const exiting = new AbortController();
      let stderr = "";
      const exited = runCli(
        ["--api", baseUrl, "--key", key, "--request-timeout", "0.2", "-o", "json"].concat([
          "jobs",
          "trigger",
          "01JOB",
          ...flags,
        ]),
        {
          stdout: () => undefined,
          stderr: (text) => {
            stderr += text;
          },
          env: {},
          exiting: exiting.signal,
          retrySleep: async () => undefined,
        },
      );
      await arrived(() => expect(requests()[0]).toBe("POST /jobs/01JOB/trigger"));
      exiting.abort();
      const atExit = stderr;
      await exited;
      return { atExit, sent: received[0]?.idempotencyKey };
    };
    const own = await interruptedTrigger();
    expect(own.sent).toMatch(/^trigger-/);
    expect(JSON.parse(own.atExit)).toEqual({
      error: {
        message: "interrupted with the trigger unanswered: it may have been applied",
        idempotencyKey: own.sent,
      },
    });
    expect((await interruptedTrigger("--idempotency-key", "mine")).atExit).toBe("");
  });
});
