import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { EXIT } from "../../client/cli/exit-codes.js";
import { runCli } from "../../client/cli/main.js";
import { SchedulerApiError, SchedulerClient } from "../../client/index.js";
import { rejection } from "../support/rejection.js";

/**
 * The API never answers a redirect, so one comes from something else at the URL the client was
 * given (an http-to-https redirect of a custom domain, a proxy, a wrong host). Two local servers:
 * the one the client is pointed at answers every request with a redirect to the other, which
 * records what reaches it.
 */
interface Received {
  readonly method: string;
  readonly path: string;
  readonly body: string;
  readonly authorization: string | undefined;
}

let pointedAt: Server;
let elsewhere: Server;
let baseUrl: string;
let elsewhereUrl: string;
let redirectStatus = 302;
let reachedElsewhere: Received[] = [];

const listen = async (server: Server) => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

beforeAll(async () => {
  pointedAt = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      response.writeHead(redirectStatus, { Location: `${elsewhereUrl}${request.url}` }).end();
    });
  });
  elsewhere = createServer((request, response) => {
    let body = "";
    request.setEncoding("utf8");
    request.on("data", (chunk: string) => {
      body += chunk;
    });
    request.on("end", () => {
      reachedElsewhere.push({
        method: request.method ?? "",
        path: request.url ?? "",
        body,
        authorization: request.headers.authorization,
      });
      // What a careless or hostile host might answer: a 200 the client would take for a job.
      response.writeHead(200, { "Content-Type": "application/json" }).end("{}");
    });
  });
  baseUrl = await listen(pointedAt);
  elsewhereUrl = await listen(elsewhere);
});

afterAll(async () => {
  await Promise.all(
    [pointedAt, elsewhere].map(
      (server) => new Promise<void>((resolve) => server.close(() => resolve())),
    ),
  );
});

beforeEach(() => {
  reachedElsewhere = [];
});

const client = () => new SchedulerClient({ baseUrl, auth: { kind: "bearer", key: "k" } });
const newJob = {
  type: "noop",
  name: "n",
  payload: { secret: "the receiver's" },
  schedule: { runAt: "2030-01-01T00:00:00Z" },
} as const;

describe("the client does not follow a redirect", () => {
  for (const status of [301, 302, 303, 307, 308]) {
    it(`a POST answered ${status} is an error naming where it pointed; nothing is sent there`, async () => {
      redirectStatus = status;
      const error = await rejection(client().jobs.create(newJob), SchedulerApiError);
      expect([error.status, error.code]).toEqual([status, "unexpected_response"]);
      expect(error.message).toContain(`${elsewhereUrl}/jobs`);
      expect(reachedElsewhere).toEqual([]);
    });
  }

  it("a GET answered 302 is an error too", async () => {
    redirectStatus = 302;
    const error = await rejection(client().health(), SchedulerApiError);
    expect([error.status, error.code]).toEqual([302, "unexpected_response"]);
    expect(reachedElsewhere).toEqual([]);
  });

  it("the CLI exits 1 saying the API answered a redirect", async () => {
    redirectStatus = 301;
    let err = "";
    const code = await runCli(["--api", baseUrl, "--key", "k", "jobs", "list"], {
      stdout: () => undefined,
      stderr: (text) => {
        err += text;
      },
      env: {},
    });
    expect(code).toBe(EXIT.failed);
    expect(err).toContain(
      `error: unexpected_response (301): 301 Moved Permanently: a redirect to ${elsewhereUrl}/jobs`,
    );
    expect(reachedElsewhere).toEqual([]);
  });
});
